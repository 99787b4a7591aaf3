import type { EventRecord } from '../streams/event-store.ts'
import type { Sql, Tx } from './database.ts'
import { applyIsolating, isDataError, recordFailures, type ProjectionFailure } from './projection-failures.ts'
import { isHandledBy, type Projection } from './projection.ts'

export interface ApplyOptions {
  /**
   * Throws unless this process still leads (checked inside the batch's transaction, after the
   * checkpoint rows are locked), so a projector that lost its lock cannot commit a batch.
   */
  assertLeader?: (tx: Tx) => Promise<void>
}

/** Postgres's "current transaction is aborted": a statement sent after another one failed. */
const inFailedTransaction = '25P02'

type ApplyTo = (tx: Tx, projection: Projection, fresh: readonly EventRecord[]) => Promise<ProjectionFailure[]>

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
  await applyBatchWith(
    sql,
    projections,
    records,
    options,
    async (tx, p, fresh) => {
      await p.apply(tx, fresh)
      return []
    },
    true,
  )
  return lastSeqOf(records)
}

function lastSeqOf(records: readonly EventRecord[]): number {
  return records.reduce((m, r) => Math.max(m, r.seq), 0)
}

/**
 * The batch's transaction: checkpoints locked, each projection given its fresh messages, failures
 * recorded, checkpoints advanced. `together`: the projections are applied side by side on the
 * transaction (each writes only its own tables), so one's statements are sent while Postgres
 * still runs another's and the batch costs the slower of the projector's CPU and Postgres's
 * rather than their sum; the isolating path, whose savepoints must not interleave, applies them
 * one after another.
 */
async function applyBatchWith(
  sql: Sql,
  projections: readonly Projection[],
  records: readonly EventRecord[],
  options: ApplyOptions,
  applyTo: ApplyTo,
  together = false,
): Promise<ProjectionFailure[]> {
  if (records.length === 0) return []
  return (await sql.begin(async (tx) => {
    const checkpoints = await readCheckpoints(tx, projections, true)
    await options.assertLeader?.(tx)
    const failures: ProjectionFailure[] = []
    const freshFor = (p: Projection) => {
      const from = checkpoints.get(p.name) ?? 0
      return records.filter((r) => r.seq > from && isHandledBy(p, r))
    }
    if (together) {
      const applied = await Promise.allSettled(
        projections.map((p) => {
          const fresh = freshFor(p)
          return fresh.length > 0 ? applyTo(tx, p, fresh) : Promise.resolve([])
        }),
      )
      // Every projection has settled before the transaction ends. One failed statement aborts the
      // transaction, so the others' later statements fail as well (25P02): the batch fails with
      // the one that caused it, which is what tells a data error (isolated and recorded) apart.
      const rejected = applied.filter((a) => a.status === 'rejected').map((a) => a.reason as { code?: unknown })
      if (rejected.length > 0) throw rejected.find((err) => err?.code !== inFailedTransaction) ?? rejected[0]
      for (const a of applied) failures.push(...(a as PromiseFulfilledResult<ProjectionFailure[]>).value)
    } else {
      for (const p of projections) {
        const fresh = freshFor(p)
        if (fresh.length > 0) failures.push(...(await applyTo(tx, p, fresh)))
      }
    }
    await recordFailures(tx, failures)
    await advanceCheckpoints(tx, projections, lastSeqOf(records))
    return failures
  })) as ProjectionFailure[]
}

/** One statement for every projection: a batch's round trips add up at thousands of events a second. */
async function advanceCheckpoints(tx: Tx, projections: readonly Projection[], seq: number): Promise<void> {
  await tx`
    INSERT INTO projection_checkpoints (name, last_seq, updated_at)
    SELECT name, ${seq}, now() FROM unnest(${projections.map((p) => p.name)}::text[]) AS name
    ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, updated_at = now()
    WHERE projection_checkpoints.last_seq < excluded.last_seq`
}

export { isDataError }

/**
 * `applyBatch`, except that a message a read model cannot hold neither stalls the read models
 * nor costs the rest of the batch: when the batch fails on its data (`isDataError`), it is
 * applied again in one transaction, each projection isolating the refused messages under
 * savepoints (`applyIsolating`). A job whose row was refused is still written, from a storable
 * copy; every refused message and projection is recorded in `projection_failures` with its
 * project and subject (and reported through `onFailure` once committed), and the checkpoints
 * move past it. A replay meets the same message and records it the same way.
 */
export async function applyBatchIsolatingFailures(
  sql: Sql,
  projections: readonly Projection[],
  records: readonly EventRecord[],
  onFailure: (failure: ProjectionFailure) => void,
  options: ApplyOptions = {},
): Promise<number> {
  try {
    return await applyBatch(sql, projections, records, options)
  } catch (err) {
    if (!isDataError(err)) throw err
  }
  const failures = await applyBatchWith(sql, projections, records, options, applyIsolating)
  for (const failure of failures) onFailure(failure)
  return lastSeqOf(records)
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
