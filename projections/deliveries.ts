import type { Delivery, DeliveryEvent, DeliveryStatus } from '../domain/delivery.ts'
import type { Queryable } from './database.ts'
import { pageOf, readModel, snapshotRows, type Page, type PagePosition } from './projection.ts'

export const applyDeliveryRows = snapshotRows<Delivery>(
  'delivery',
  (db, d, seq) => db`
    INSERT INTO deliveries (project_id, webhook_id, id, event_id, event_type, status, response_status, attempt, attempted_at, created_at, last_seq)
    VALUES (${d.project_id}, ${d.webhook_id}, ${d.id}, ${d.event_id}, ${d.event_type}, ${d.status}, ${d.response_status}, ${d.attempt},
      ${d.attempted_at}, ${d.created_at}, ${seq})
    ON CONFLICT (id) DO UPDATE SET status = excluded.status, response_status = excluded.response_status, attempt = excluded.attempt,
      attempted_at = excluded.attempted_at, last_seq = excluded.last_seq
    WHERE deliveries.last_seq < excluded.last_seq`,
)

/** A delivery as a subscription's delivery list shows it. */
export interface DeliveryEntry {
  id: string
  event_type: string
  status: DeliveryStatus
  response_status: number | null
  attempt: number
  attempted_at: Date
  created_at: Date
}

/** A subscription's deliveries, newest first, after `after`. */
async function page(db: Queryable, projectId: string, webhookId: string, after: PagePosition | null, limit: number): Promise<Page<DeliveryEntry>> {
  const rows = await db<DeliveryEntry[]>`
    SELECT id, event_type, status, response_status, attempt, attempted_at, created_at FROM deliveries
    WHERE project_id = ${projectId} AND webhook_id = ${webhookId}
      ${after ? db`AND (created_at, id) < (${after.created_at}, ${after.id})` : db``}
    ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`
  return pageOf(rows, limit, (r) => r)
}

export const webhookDeliveries = readModel(
  {
    name: 'deliveries',
    handles: ['delivery_scheduled', 'delivery_attempted'] satisfies DeliveryEvent['type'][],
    tables: ['deliveries'],
    apply: applyDeliveryRows,
  },
  { page },
)
