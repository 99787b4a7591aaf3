import type { Delivery, DeliveryEvent, DeliveryStatus } from '../domain/delivery.ts'
import type { RecordedDelivery } from '../domain/webhook-replay.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable } from './database.ts'
import { latestPerAggregate, pageOf, readModel, type Page, type PagePosition } from './projection.ts'

/**
 * One row per delivery, a snapshot of its state guarded by `last_seq`. `scheduled_seq` is the
 * sequence of the message that scheduled it, which no state carries: it is taken from the batch
 * that holds that message, when the row is made, and never changed after.
 */
export async function applyDeliveryRows(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  const ofDeliveries = records.filter((r) => r.message.aggregate === 'delivery')
  const scheduledAt = new Map<string, number>()
  for (const r of ofDeliveries) {
    if (!scheduledAt.has(r.subject) && r.message.events.some((e) => e.type === 'delivery_scheduled')) scheduledAt.set(r.subject, r.seq)
  }
  for (const r of latestPerAggregate(ofDeliveries)) {
    const d = r.message.state as Delivery | null
    if (d === null) continue
    await db`
      INSERT INTO deliveries (project_id, webhook_id, id, event_id, event_type, status, response_status, attempt, attempted_at, created_at,
        event_seq, operation_id, redelivery_of, scheduled_seq, last_seq)
      VALUES (${d.project_id}, ${d.webhook_id}, ${d.id}, ${d.event_id}, ${d.event_type}, ${d.status}, ${d.response_status}, ${d.attempt},
        ${d.attempted_at}, ${d.created_at}, ${d.event_seq}, ${d.operation_id}, ${d.redelivery_of}, ${scheduledAt.get(r.subject) ?? null}, ${r.seq})
      ON CONFLICT (id) DO UPDATE SET status = excluded.status, response_status = excluded.response_status, attempt = excluded.attempt,
        attempted_at = excluded.attempted_at, scheduled_seq = COALESCE(deliveries.scheduled_seq, excluded.scheduled_seq),
        last_seq = excluded.last_seq
      WHERE deliveries.last_seq < excluded.last_seq`
  }
}

/** A delivery as a subscription's delivery list shows it. */
export interface DeliveryEntry {
  id: string
  event_id: string
  event_type: string
  status: DeliveryStatus
  response_status: number | null
  attempt: number
  attempted_at: Date
  created_at: Date
  operation_id: string | null
  redelivery_of: string | null
}

/** What the list keeps: deliveries in a status, of an event type, created in a window (`until` excluded); null: any. */
export interface DeliveryFilter {
  status?: DeliveryStatus | null
  eventType?: string | null
  since?: string | null
  until?: string | null
}

/** A subscription's deliveries, newest first, after `after`, those `filter` keeps. */
async function page(
  db: Queryable,
  projectId: string,
  webhookId: string,
  after: PagePosition | null,
  limit: number,
  filter: DeliveryFilter = {},
): Promise<Page<DeliveryEntry>> {
  const rows = await db<DeliveryEntry[]>`
    SELECT id, event_id, event_type, status, response_status, attempt, attempted_at, created_at, operation_id, redelivery_of FROM deliveries
    WHERE project_id = ${projectId} AND webhook_id = ${webhookId}
      ${filter.status ? db`AND status = ${filter.status}` : db``}
      ${filter.eventType ? db`AND event_type = ${filter.eventType}` : db``}
      ${filter.since ? db`AND created_at >= ${filter.since}` : db``}
      ${filter.until ? db`AND created_at < ${filter.until}` : db``}
      ${after ? db`AND (created_at, id) < (${after.created_at}, ${after.id})` : db``}
    ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`
  return pageOf(rows, limit, (r) => r)
}

/** Every delivery to the subscription of each of `eventIds`, by event id (a replay's choice, domain/webhook-replay.ts). */
async function ofEvents(db: Queryable, projectId: string, webhookId: string, eventIds: readonly string[]): Promise<Map<string, RecordedDelivery[]>> {
  const byEvent = new Map<string, RecordedDelivery[]>()
  if (eventIds.length === 0) return byEvent
  const rows = await db<Array<RecordedDelivery & { event_id: string }>>`
    SELECT event_id, id, status, COALESCE(scheduled_seq, 0) AS scheduled_seq, last_seq FROM deliveries
    WHERE project_id = ${projectId} AND webhook_id = ${webhookId} AND event_id = ANY(${eventIds as string[]})`
  for (const { event_id, ...delivery } of rows) byEvent.set(event_id, [...(byEvent.get(event_id) ?? []), delivery])
  return byEvent
}

/** An operation's deliveries by status, as far as the projector has applied them. */
async function tallyOfOperation(db: Queryable, operationId: string): Promise<{ delivered: number; failed: number; pending: number }> {
  const rows = await db<{ status: DeliveryStatus; n: number }[]>`
    SELECT status, count(*)::int AS n FROM deliveries WHERE operation_id = ${operationId} GROUP BY status`
  const tally = { delivered: 0, failed: 0, pending: 0 }
  for (const r of rows) tally[r.status] = r.n
  return tally
}

export const webhookDeliveries = readModel(
  {
    name: 'deliveries',
    handles: ['delivery_scheduled', 'delivery_attempted'] satisfies DeliveryEvent['type'][],
    tables: ['deliveries'],
    apply: applyDeliveryRows,
  },
  { page, ofEvents, tallyOfOperation },
)
