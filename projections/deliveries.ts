import type { Delivery, DeliveryEvent } from '../domain/delivery.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable } from './database.ts'
import { latestPerAggregate, type Projection } from './projection.ts'

const handledTypes: readonly DeliveryEvent['type'][] = ['delivery_scheduled', 'delivery_attempted']

export async function applyDeliveryRows(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  for (const r of latestPerAggregate(records.filter((x) => x.message.aggregate === 'delivery'))) {
    const d = r.message.state as Delivery | null
    if (d === null) continue
    await db`
      INSERT INTO deliveries (project_id, webhook_id, id, event_id, event_type, status, response_status, attempt, attempted_at, created_at, last_seq)
      VALUES (${d.project_id}, ${d.webhook_id}, ${d.id}, ${d.event_id}, ${d.event_type}, ${d.status}, ${d.response_status}, ${d.attempt},
        ${d.attempted_at}, ${d.created_at}, ${r.seq})
      ON CONFLICT (id) DO UPDATE SET status = excluded.status, response_status = excluded.response_status, attempt = excluded.attempt,
        attempted_at = excluded.attempted_at, last_seq = excluded.last_seq
      WHERE deliveries.last_seq < excluded.last_seq`
  }
}

export const webhookDeliveries: Projection = {
  name: 'deliveries',
  handles: handledTypes,
  tables: ['deliveries'],
  apply: (tx, records) => applyDeliveryRows(tx, records),
}
