import type { EventRecord } from '../streams/event-store.ts'
import type { Sql, Tx } from './database.ts'
import { isHandledBy, type Projection } from './projection.ts'

export interface ApplyOptions {
  /**
   * Throws unless this process still leads (checked inside the batch's transaction, after the
   * checkpoint rows are locked), so a projector that lost its lock cannot commit a batch.
   */
  assertLeader?: (tx: Tx) => Promise<void>
}

/**
 * Applies a batch to every projection in one transaction that also advances each projection's
 * checkpoint, so a batch is applied entirely or not at all and a redelivered message
 * (`seq <= last_seq`) is skipped. Resolves to the batch's last sequence.
 */
export async function applyBatch(
  sql: Sql,
  projections: readonly Projection[],
  records: readonly EventRecord[],
  options: ApplyOptions = {},
): Promise<number> {
  const lastSeq = records.reduce((m, r) => Math.max(m, r.seq), 0)
  if (records.length === 0) return lastSeq
  await sql.begin(async (tx) => {
    const checkpoints = await readCheckpoints(tx, projections, true)
    await options.assertLeader?.(tx)
    for (const p of projections) {
      const from = checkpoints.get(p.name) ?? 0
      const fresh = records.filter((r) => r.seq > from && isHandledBy(p, r))
      if (fresh.length > 0) await p.apply(tx, fresh)
    }
    await advanceCheckpoints(tx, projections, lastSeq)
  })
  return lastSeq
}

/** One statement for every projection: a batch's round trips add up at thousands of events a second. */
async function advanceCheckpoints(tx: Tx, projections: readonly Projection[], seq: number): Promise<void> {
  await tx`
    INSERT INTO projection_checkpoints (name, last_seq, updated_at)
    SELECT name, ${seq}, now() FROM unnest(${projections.map((p) => p.name)}::text[]) AS name
    ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, updated_at = now()
    WHERE projection_checkpoints.last_seq < excluded.last_seq`
}

/**
 * True when Postgres refused the data itself (SQLSTATE classes 22 data exception, 23 integrity
 * constraint, 54 program limit): applying the same message again can never succeed. Anything
 * else (a lost connection, a restart) is transient and is retried.
 */
export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' && /^(22|23|54)[0-9A-Z]{3}$/.test(code)
}

/**
 * `applyBatch`, except that a message the read models cannot hold does not stall them: when a
 * batch fails on its data, its messages are applied one by one, and each one that still fails
 * is recorded in `projection_failures` (and reported through `onFailure`) while the checkpoints
 * move past it. A replay meets the same message and records it the same way.
 */
export async function applyBatchIsolatingFailures(
  sql: Sql,
  projections: readonly Projection[],
  records: readonly EventRecord[],
  onFailure: (record: EventRecord, err: unknown) => void,
  options: ApplyOptions = {},
): Promise<number> {
  try {
    return await applyBatch(sql, projections, records, options)
  } catch (err) {
    if (!isDataError(err)) throw err
  }
  let lastSeq = 0
  for (const record of records) {
    try {
      lastSeq = await applyBatch(sql, projections, [record], options)
    } catch (err) {
      if (!isDataError(err)) throw err
      const e = err as { code?: string; message?: string }
      await sql.begin(async (tx) => {
        await options.assertLeader?.(tx)
        await tx`
          INSERT INTO projection_failures (seq, subject, error_code, error_message)
          VALUES (${record.seq}, ${record.subject}, ${e.code ?? null}, ${String(e.message ?? err)})
          ON CONFLICT (seq) DO NOTHING`
        await advanceCheckpoints(tx, projections, record.seq)
      })
      onFailure(record, err)
      lastSeq = record.seq
    }
  }
  return lastSeq
}

/** Checkpoints by projection name; `lock` holds them for the rest of the transaction. */
export async function readCheckpoints(db: Sql | Tx, projections: readonly Projection[], lock = false): Promise<Map<string, number>> {
  const names = projections.map((p) => p.name)
  const rows = lock
    ? await db<{ name: string; last_seq: number }[]>`SELECT name, last_seq FROM projection_checkpoints WHERE name = ANY(${names}) FOR UPDATE`
    : await db<{ name: string; last_seq: number }[]>`SELECT name, last_seq FROM projection_checkpoints WHERE name = ANY(${names})`
  return new Map(rows.map((r) => [r.name, r.last_seq]))
}

/** The sequence every projection has reached (the lowest checkpoint). */
export async function projectedThrough(db: Sql | Tx, projections: readonly Projection[]): Promise<number> {
  const checkpoints = await readCheckpoints(db, projections)
  return Math.min(...projections.map((p) => checkpoints.get(p.name) ?? 0))
}

/** Empties every read model and its checkpoint: the first step of a replay. */
export async function resetReadModels(sql: Sql, projections: readonly Projection[]): Promise<void> {
  await sql.begin(async (tx) => {
    const tables = projections.flatMap((p) => p.tables)
    await tx.unsafe(`TRUNCATE ${[...tables, 'projection_failures'].map((t) => `"${t}"`).join(', ')}`)
    await tx`DELETE FROM projection_checkpoints WHERE name = ANY(${projections.map((p) => p.name)})`
  })
}
