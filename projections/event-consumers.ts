import { summaryOf, type ConsumerSummary, type EventConsumer, type EventConsumerEvent } from '../domain/event-consumer.ts'
import type { FeedPosition } from '../domain/event-feed.ts'
import type { Queryable } from './database.ts'
import { readModel, snapshotRows } from './projection.ts'

/** A position's index as a column: -1 for the whole message. */
const indexColumn = (p: FeedPosition) => (p.index === 'all' ? -1 : p.index)
const positionOf = (seq: number | string, index: number): FeedPosition => ({ seq: Number(seq), index: index < 0 ? 'all' : index })

/** Named event consumers as snapshots guarded by `last_seq`. */
const applyConsumerRows = snapshotRows<EventConsumer>('consumer', (db, c, seq) => {
  const s = summaryOf(c)
  return db`
    INSERT INTO event_consumers (project_id, name, filter, ack_wait_seconds, committed_seq, committed_index, delivered_seq,
      delivered_index, lease_until, outstanding, deleted, created_at, updated_at, last_seq)
    VALUES (${c.project_id}, ${c.name}, ${JSON.stringify(c.filter)}::text::json, ${c.ack_wait_seconds}, ${c.committed.seq},
      ${indexColumn(c.committed)}, ${c.delivered.seq}, ${indexColumn(c.delivered)}, ${s.lease_until}, ${s.outstanding}, ${c.deleted},
      ${c.created_at}, ${c.updated_at}, ${seq})
    ON CONFLICT (project_id, name) DO UPDATE SET filter = excluded.filter, ack_wait_seconds = excluded.ack_wait_seconds,
      committed_seq = excluded.committed_seq, committed_index = excluded.committed_index, delivered_seq = excluded.delivered_seq,
      delivered_index = excluded.delivered_index, lease_until = excluded.lease_until, outstanding = excluded.outstanding,
      deleted = excluded.deleted, created_at = excluded.created_at, updated_at = excluded.updated_at, last_seq = excluded.last_seq
    WHERE event_consumers.last_seq < excluded.last_seq`
})

interface ConsumerRow {
  project_id: string
  name: string
  filter: EventConsumer['filter']
  ack_wait_seconds: number
  committed_seq: string
  committed_index: number
  delivered_seq: string
  delivered_index: number
  lease_until: Date | null
  outstanding: number
  created_at: Date
  updated_at: Date
}

function toSummary(r: ConsumerRow): ConsumerSummary {
  return {
    name: r.name,
    filter: r.filter,
    ack_wait_seconds: r.ack_wait_seconds,
    committed: positionOf(r.committed_seq, r.committed_index),
    delivered: positionOf(r.delivered_seq, r.delivered_index),
    lease_until: r.lease_until?.toISOString() ?? null,
    outstanding: r.outstanding,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  }
}

/** The project's live consumers by name (at most a plan's cap, far under 1,000). */
async function ofProject(db: Queryable, projectId: string): Promise<ConsumerSummary[]> {
  const rows = await db<ConsumerRow[]>`
    SELECT * FROM event_consumers WHERE project_id = ${projectId} AND NOT deleted ORDER BY name LIMIT 1000`
  return rows.map(toSummary)
}

/** How many live consumers the project has (its plan's cap counts them). */
async function liveCount(db: Queryable, projectId: string): Promise<number> {
  const [row] = await db<{ n: number }[]>`SELECT count(*)::int AS n FROM event_consumers WHERE project_id = ${projectId} AND NOT deleted`
  return row!.n
}

export const eventConsumers = readModel(
  {
    name: 'event_consumers',
    handles: [
      'consumer_created',
      'consumer_delivered',
      'consumer_redelivered',
      'consumer_committed',
      'consumer_seeked',
      'consumer_deleted',
    ] satisfies EventConsumerEvent['type'][],
    tables: ['event_consumers'],
    apply: applyConsumerRows,
  },
  { ofProject, liveCount },
)
