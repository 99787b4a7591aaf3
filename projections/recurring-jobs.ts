import { isActiveSchedule, type RecurringJob, type RecurringJobEvent } from '../domain/recurring-job.ts'
import { snapshotRows, type Projection } from './projection.ts'

/**
 * Recurring schedules by project; a deleted one keeps its row as `status = 'deleted'` (a
 * tombstone, so a late write of an older snapshot cannot bring it back). The
 * scheduler finds due schedules here (`next_run_at`); writers outside the projector apply the
 * same rows right after their command, guarded by `last_seq` like every snapshot row.
 */
export const applyRecurringRows = snapshotRows<RecurringJob>(
  'recurring',
  (db, s, seq) => db`
    INSERT INTO recurring_jobs (project_id, id, status, job_type, cron_expression, queue, timezone, max_attempts, timeout_seconds,
      payload, next_run_at, last_run_at, last_occurrence_at, last_job_id, created_at, updated_at, last_seq)
    VALUES (${s.project_id}, ${s.id}, ${isActiveSchedule(s) ? 'active' : 'deleted'}, ${s.job_type}, ${s.cron_expression}, ${s.queue}, ${s.timezone}, ${s.max_attempts},
      ${s.timeout_seconds}, ${JSON.stringify(s.payload ?? {})}::text::json, ${s.next_run_at ?? null}, ${s.last_run_at ?? null},
      ${s.last_occurrence_at ?? null}, ${s.last_job_id ?? null}, ${s.created_at}, ${s.updated_at}, ${seq})
    ON CONFLICT (project_id, id) DO UPDATE SET status = excluded.status, job_type = excluded.job_type,
      cron_expression = excluded.cron_expression, queue = excluded.queue, timezone = excluded.timezone,
      max_attempts = excluded.max_attempts, timeout_seconds = excluded.timeout_seconds, payload = excluded.payload,
      next_run_at = excluded.next_run_at, last_run_at = excluded.last_run_at, last_occurrence_at = excluded.last_occurrence_at,
      last_job_id = excluded.last_job_id, updated_at = excluded.updated_at, last_seq = excluded.last_seq
    WHERE recurring_jobs.last_seq < excluded.last_seq`,
)

export const recurringJobs: Projection = {
  name: 'recurring-jobs',
  handles: ['recurring_upserted', 'recurring_deleted', 'recurring_fired', 'recurring_rescheduled'] satisfies RecurringJobEvent['type'][],
  tables: ['recurring_jobs'],
  apply: applyRecurringRows,
}
