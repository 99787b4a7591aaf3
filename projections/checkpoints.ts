import type { EventRecord } from '../streams/event-store.ts'
import type { Sql, Tx } from './database.ts'
import { isHandledBy, type Projection } from './projection.ts'

/**
 * Applies a batch to every projection in one transaction that also advances each projection's
 * checkpoint, so a batch is applied entirely or not at all and a redelivered message
 * (`seq <= last_seq`) is skipped. Resolves to the batch's last sequence.
 */
export async function applyBatch(sql: Sql, projections: readonly Projection[], records: readonly EventRecord[]): Promise<number> {
  const lastSeq = records.reduce((m, r) => Math.max(m, r.seq), 0)
  if (records.length === 0) return lastSeq
  await sql.begin(async (tx) => {
    const checkpoints = await readCheckpoints(tx, projections, true)
    for (const p of projections) {
      const from = checkpoints.get(p.name) ?? 0
      const fresh = records.filter((r) => r.seq > from && isHandledBy(p, r))
      if (fresh.length > 0) await p.apply(tx, fresh)
      if (lastSeq > from) {
        await tx`
          INSERT INTO projection_checkpoints (name, last_seq, updated_at) VALUES (${p.name}, ${lastSeq}, now())
          ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, updated_at = now()
          WHERE projection_checkpoints.last_seq < excluded.last_seq`
      }
    }
  })
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
    await tx.unsafe(`TRUNCATE ${tables.map((t) => `"${t}"`).join(', ')}`)
    await tx`DELETE FROM projection_checkpoints WHERE name = ANY(${projections.map((p) => p.name)})`
  })
}
