import type { Webhook, WebhookEventKind } from '../domain/webhook.ts'
import { snapshotRows, type Projection } from './projection.ts'

/** Subscriptions without their secrets, as snapshots guarded by `last_seq`. */
export const applyWebhookRows = snapshotRows<Webhook>(
  'webhook',
  (db, w, seq) => db`
    INSERT INTO webhooks (project_id, id, url, events, is_active, deleted, created_at, updated_at, last_seq)
    VALUES (${w.project_id}, ${w.id}, ${w.url}, ${JSON.stringify(w.events)}, ${w.is_active}, ${w.deleted}, ${w.created_at}, ${w.updated_at}, ${seq})
    ON CONFLICT (project_id, id) DO UPDATE SET url = excluded.url, events = excluded.events, is_active = excluded.is_active,
      deleted = excluded.deleted, updated_at = excluded.updated_at, last_seq = excluded.last_seq
    WHERE webhooks.last_seq < excluded.last_seq`,
)

export const webhookSubscriptions: Projection = {
  name: 'webhooks',
  handles: ['webhook_created', 'webhook_updated', 'webhook_secret_rotated', 'webhook_deleted'] satisfies WebhookEventKind[],
  tables: ['webhooks'],
  apply: applyWebhookRows,
}
