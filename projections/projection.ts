import type { EventRecord } from '../streams/event-store.ts'
import type { Tx } from './database.ts'

/**
 * A read model fed by the event log. `apply` receives, in stream order, the messages carrying
 * at least one event type in `handles`, and runs inside the transaction that also advances the
 * projection's checkpoint; it must be idempotent by sequence.
 */
export interface Projection {
  name: string
  handles: readonly string[]
  /** Tables this projection owns; a replay empties them before rebuilding. */
  tables: readonly string[]
  apply(tx: Tx, records: readonly EventRecord[]): Promise<void>
}

/** True when the message carries an event the projection handles. */
export function isHandledBy(projection: Projection, record: EventRecord): boolean {
  return record.message.events.some((e) => projection.handles.includes(e.type))
}

/** Keeps, per aggregate, only the newest message: rows are snapshots of the carried state. */
export function latestPerAggregate(records: readonly EventRecord[]): EventRecord[] {
  const latest = new Map<string, EventRecord>()
  for (const r of records) {
    const prior = latest.get(r.subject)
    if (prior === undefined || prior.seq < r.seq) latest.set(r.subject, r)
  }
  return [...latest.values()]
}
