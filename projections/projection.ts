import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable, Tx } from './database.ts'

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
  /**
   * For a message whose rows Postgres refused (projection-failures.ts): writes them from a copy
   * whose strings are made storable (storable-values.ts), marked so that nothing decides on them,
   * so the aggregate still shows. Only a read model of one snapshot row per aggregate has one:
   * its next message replaces the row whole.
   */
  applyStorableCopy?(tx: Tx, record: EventRecord): Promise<void>
  /** Removes the row `applyStorableCopy` wrote for `record` while it is still the aggregate's latest. */
  removeStorableCopy?(tx: Tx, record: EventRecord): Promise<void>
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

/**
 * The writer of a read model holding one row per aggregate: for each `aggregate` in the batch,
 * `upsert` gets the state its newest message carries and that message's sequence, which the row
 * keeps as `last_seq` so that an older snapshot never overwrites a newer one. A message whose
 * state is null writes nothing.
 */
export function snapshotRows<State>(
  aggregate: string,
  upsert: (db: Queryable, state: State, seq: number) => Promise<unknown>,
): (db: Queryable, records: readonly EventRecord[]) => Promise<void> {
  return async (db, records) => {
    for (const r of latestPerAggregate(records.filter((x) => x.message.aggregate === aggregate))) {
      const state = r.message.state as State | null
      if (state !== null) await upsert(db, state, r.seq)
    }
  }
}

/** Where a page of a newest-first list ended: the keyset the next page starts after. */
export interface PagePosition {
  created_at: string
  id: string
}

/** A page of a list and whether more follow it. */
export interface Page<Row> {
  rows: Row[]
  hasMore: boolean
}

/** The page of `limit` rows out of `rows`, read with `LIMIT limit + 1` so that one more tells that more follow. */
export function pageOf<In, Row>(rows: readonly In[], limit: number, toRow: (r: In) => Row): Page<Row> {
  return { rows: rows.slice(0, limit).map(toRow), hasMore: rows.length > limit }
}

/**
 * A read model: its projection, and the named queries over the tables it writes. Those queries
 * are the only SQL over read-model tables outside projections/ callers may use (tools/lint/
 * no-read-model-sql.js), so a column change stays in the read model's file. Each query takes the
 * pool or transaction to run on as its first argument.
 */
export function readModel<Queries extends object>(projection: Projection, queries: Queries): Projection & Queries {
  return { ...projection, ...queries }
}

/**
 * The queries of a read model of one row per aggregate that keeps deleted ones as tombstones
 * (`deleted`): a project's live rows, oldest first, at most 1,000 (far above what a project may
 * have), and how many it has.
 */
export function liveRowQueries(table: 'alerts' | 'webhooks') {
  return {
    ofProject: (db: Queryable, projectId: string) =>
      db`SELECT * FROM ${db(table)} WHERE project_id = ${projectId} AND NOT deleted ORDER BY created_at, id LIMIT 1000`,
    liveCount: async (db: Queryable, projectId: string): Promise<number> => {
      const [row] = await db<{ n: number }[]>`SELECT count(*)::int AS n FROM ${db(table)} WHERE project_id = ${projectId} AND NOT deleted`
      return row!.n
    },
  }
}
