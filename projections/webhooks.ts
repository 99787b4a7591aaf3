import type { Webhook, WebhookEventKind } from '../domain/webhook.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable } from './database.ts'
import { latestPerAggregate, type Projection } from './projection.ts'

const handledTypes: readonly WebhookEventKind[] = ['webhook_created', 'webhook_updated', 'webhook_secret_rotated', 'webhook_deleted']

/** Subscriptions without their secrets, as snapshots guarded by `last_seq`. */
export async function applyWebhookRows(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  for (const r of latestPerAggregate(records.filter((x) => x.message.aggregate === 'webhook'))) {
    const w = r.message.state as Webhook | null
    if (w === null) continue
    await db`
      INSERT INTO webhooks (project_id, id, url, events, is_active, deleted, created_at, updated_at, last_seq)
      VALUES (${w.project_id}, ${w.id}, ${w.url}, ${JSON.stringify(w.events)}, ${w.is_active}, ${w.deleted}, ${w.created_at}, ${w.updated_at}, ${r.seq})
      ON CONFLICT (project_id, id) DO UPDATE SET url = excluded.url, events = excluded.events, is_active = excluded.is_active,
        deleted = excluded.deleted, updated_at = excluded.updated_at, last_seq = excluded.last_seq
      WHERE webhooks.last_seq < excluded.last_seq`
  }
}

export const webhookSubscriptions: Projection = {
  name: 'webhooks',
  handles: handledTypes,
  tables: ['webhooks'],
  apply: (tx, records) => applyWebhookRows(tx, records),
}
