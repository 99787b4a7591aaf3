import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable, Tx } from './database.ts'
import { toStorableValue } from './storable-values.ts'

/**
 * A job whose message the job list cannot hold (a string Postgres refuses, in a log written
 * before the API refused such values) must not vanish from the lists, the claims and the
 * scheduler: its row is written from a copy whose strings are made storable, and marked with
 * `sanitised_seq`. A marked row is shown as it is, but the claim paths do not decide on it (a
 * claim appends the state it decided on, which would put the copy in the log): they load the job
 * from the log instead. The job's later messages carry neither its payload nor an error written
 * before, so the row keeps the copied ones and the mark stays, until a message that brings the
 * payload (its `job_created`, re-projected once it can be held) writes the row anew.
 */

/** Writes `record`'s job row from a storable copy with `upsert` (the job list's own writer), marked. */
export async function writeStorableJobRow(
  tx: Tx,
  record: EventRecord,
  upsert: (db: Queryable, records: readonly EventRecord[]) => Promise<void>,
): Promise<void> {
  const message = record.message
  await upsert(tx, [{ ...record, message: { ...message, state: toStorableValue(message.state), events: toStorableValue(message.events) } }])
  await tx`UPDATE jobs SET sanitised_seq = ${record.seq} WHERE id = ${message.aggregate_id} AND last_seq = ${record.seq}`
}

/** Removes the marked row of `record`, if it is still the job's latest. */
export async function removeStorableJobRow(tx: Tx, record: EventRecord): Promise<void> {
  await tx`DELETE FROM jobs WHERE id = ${record.message.aggregate_id} AND last_seq = ${record.seq} AND sanitised_seq = ${record.seq}`
}

/** True for a row written from a storable copy: shown, but not the job's state to decide on. */
export function isStorableCopyRow(row: Record<string, unknown>): boolean {
  return row.sanitised_seq !== null && row.sanitised_seq !== undefined
}
