import type { Delivery, DeliveryEvent } from '../domain/delivery.ts'
import { snapshotRows, type Projection } from './projection.ts'

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

export const webhookDeliveries: Projection = {
  name: 'deliveries',
  handles: ['delivery_scheduled', 'delivery_attempted'] satisfies DeliveryEvent['type'][],
  tables: ['deliveries'],
  apply: applyDeliveryRows,
}
