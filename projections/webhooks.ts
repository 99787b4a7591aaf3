import type { Webhook, WebhookEventKind } from '../domain/webhook.ts'
import type { Queryable } from './database.ts'
import { liveRowQueries, readModel, snapshotRows } from './projection.ts'

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

/** A subscription a delivery may go to: its id and its event filter (JSON text). */
export interface ActiveSubscription {
  id: string
  events: string
}

/** The project's active subscriptions, oldest first. */
async function active(db: Queryable, projectId: string): Promise<ActiveSubscription[]> {
  return db<ActiveSubscription[]>`
    SELECT id, events FROM webhooks WHERE project_id = ${projectId} AND is_active AND NOT deleted ORDER BY created_at, id`
}

export const webhookSubscriptions = readModel(
  {
    name: 'webhooks',
    handles: ['webhook_created', 'webhook_updated', 'webhook_secret_rotated', 'webhook_deleted'] satisfies WebhookEventKind[],
    tables: ['webhooks'],
    apply: applyWebhookRows,
  },
  { ...liveRowQueries('webhooks'), active },
)
