import type { Alert, AlertEventType } from '../domain/alert.ts'
import type { Queryable } from './database.ts'
import { liveRowQueries, readModel, snapshotRows } from './projection.ts'

/** Alert settings as snapshots guarded by `last_seq`; a deleted alert keeps its row (`deleted`). */
export const applyAlertRows = snapshotRows<Alert>(
  'alert',
  (db, a, seq) => db`
    INSERT INTO alerts (project_id, id, name, kind, queue, threshold, window_minutes, email, webhook, enabled, status,
      last_value, last_triggered_at, last_resolved_at, deleted, created_at, updated_at, last_seq)
    VALUES (${a.project_id}, ${a.id}, ${a.name}, ${a.kind}, ${a.queue}, ${a.threshold}, ${a.window_minutes},
      ${JSON.stringify(a.email)}::text::json, ${a.webhook}, ${a.enabled}, ${a.status}, ${a.last_value}, ${a.last_triggered_at},
      ${a.last_resolved_at}, ${a.deleted}, ${a.created_at}, ${a.updated_at}, ${seq})
    ON CONFLICT (project_id, id) DO UPDATE SET name = excluded.name, kind = excluded.kind, queue = excluded.queue,
      threshold = excluded.threshold, window_minutes = excluded.window_minutes, email = excluded.email,
      webhook = excluded.webhook, enabled = excluded.enabled, status = excluded.status, last_value = excluded.last_value,
      last_triggered_at = excluded.last_triggered_at, last_resolved_at = excluded.last_resolved_at,
      deleted = excluded.deleted, updated_at = excluded.updated_at, last_seq = excluded.last_seq
    WHERE alerts.last_seq < excluded.last_seq`,
)

/** Alerts to evaluate (enabled, or firing and so to be resolved), in key order after `after`, at most `limit`. */
async function toEvaluate(db: Queryable, after: { project_id: string; id: string }, limit: number) {
  return db<{ project_id: string; id: string }[]>`
    SELECT project_id, id FROM alerts
    WHERE NOT deleted AND (enabled OR status = 'firing') AND (project_id, id) > (${after.project_id}, ${after.id})
    ORDER BY project_id, id LIMIT ${limit}`
}

export const alertSettings = readModel(
  {
    name: 'alerts',
    handles: ['alert_created', 'alert_updated', 'alert_deleted', 'alert_triggered', 'alert_resolved'] satisfies AlertEventType[],
    tables: ['alerts'],
    apply: applyAlertRows,
  },
  { ...liveRowQueries('alerts'), toEvaluate },
)
