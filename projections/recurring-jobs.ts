import { isActiveSchedule, type RecurringJob, type RecurringJobEvent } from '../domain/recurring-job.ts'
import type { Queryable } from './database.ts'
import { readModel, snapshotRows } from './projection.ts'

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
      payload, next_run_at, last_run_at, last_occurrence_at, last_job_id, created_at, updated_at, last_seq, priority, ttl_seconds)
    VALUES (${s.project_id}, ${s.id}, ${isActiveSchedule(s) ? 'active' : 'deleted'}, ${s.job_type}, ${s.cron_expression}, ${s.queue}, ${s.timezone}, ${s.max_attempts},
      ${s.timeout_seconds}, ${JSON.stringify(s.payload ?? {})}::text::json, ${s.next_run_at ?? null}, ${s.last_run_at ?? null},
      ${s.last_occurrence_at ?? null}, ${s.last_job_id ?? null}, ${s.created_at}, ${s.updated_at}, ${seq}, ${s.priority ?? null}, ${s.ttl_seconds ?? null})
    ON CONFLICT (project_id, id) DO UPDATE SET status = excluded.status, job_type = excluded.job_type,
      cron_expression = excluded.cron_expression, queue = excluded.queue, timezone = excluded.timezone,
      max_attempts = excluded.max_attempts, timeout_seconds = excluded.timeout_seconds, payload = excluded.payload,
      next_run_at = excluded.next_run_at, last_run_at = excluded.last_run_at, last_occurrence_at = excluded.last_occurrence_at,
      last_job_id = excluded.last_job_id, updated_at = excluded.updated_at, last_seq = excluded.last_seq, priority = excluded.priority,
      ttl_seconds = excluded.ttl_seconds
    WHERE recurring_jobs.last_seq < excluded.last_seq`,
)

/** A schedule the scheduler saw fail, and from when it may be tried again. */
export interface FailingSchedule {
  projectId: string
  id: string
  retryAt: Date
}

/**
 * Active schedules due at `now`, numbered per project (`turn`, from 1) from the earliest
 * `next_run_at`, and ordered by turn: every project's first, then every project's second, and so
 * on, `turns` per project and `limit` in all at most. `firing` (already being fired) are left out;
 * of `failing`, those not yet due for another try are left out and the others come after their
 * project's other due schedules. Both lists join as tables (a hash join), not as `= ANY` lists
 * compared row by row.
 */
async function dueSchedulesInTurns(
  db: Queryable,
  now: Date,
  options: { turns: number; limit: number; failing: readonly FailingSchedule[]; firing: ReadonlyArray<{ projectId: string; id: string }> },
): Promise<Array<{ project_id: string; id: string; turn: number }>> {
  const { failing, firing } = options
  return db<{ project_id: string; id: string; turn: number }[]>`
    WITH failing AS (
      SELECT * FROM unnest(${failing.map((f) => f.projectId)}::text[], ${failing.map((f) => f.id)}::text[],
        ${failing.map((f) => f.retryAt.toISOString())}::timestamptz[]) AS f(project_id, id, retry_at)
    ), firing AS (
      SELECT * FROM unnest(${firing.map((f) => f.projectId)}::text[], ${firing.map((f) => f.id)}::text[]) AS b(project_id, id)
    )
    SELECT project_id, id, turn FROM (
      SELECT r.project_id, r.id, r.next_run_at,
        row_number() OVER (PARTITION BY r.project_id ORDER BY f.id IS NOT NULL, r.next_run_at, r.id)::int AS turn
      FROM recurring_jobs r
        LEFT JOIN failing f ON f.project_id = r.project_id AND f.id = r.id
        LEFT JOIN firing b ON b.project_id = r.project_id AND b.id = r.id
      WHERE r.status = 'active' AND r.next_run_at <= ${now} AND (f.retry_at IS NULL OR f.retry_at <= ${now}) AND b.id IS NULL
    ) due
    WHERE turn <= ${options.turns}
    ORDER BY turn, next_run_at
    LIMIT ${options.limit}`
}

/** The project's active schedules other than `id`, and whether `id` is one of its active schedules. */
async function liveSchedulesBeside(db: Queryable, projectId: string, id: string): Promise<{ others: number; live: boolean }> {
  const [row] = await db<{ others: number; live: boolean | null }[]>`
    SELECT count(*) FILTER (WHERE id <> ${id})::int AS others, bool_or(id = ${id}) AS live
    FROM recurring_jobs WHERE project_id = ${projectId} AND status = 'active'`
  return { others: row!.others, live: row!.live === true }
}

/** A project's active schedules, by id, at most 1,000 (the most a plan allows is far below). */
async function activeOfProject(db: Queryable, projectId: string) {
  return db`SELECT * FROM recurring_jobs WHERE project_id = ${projectId} AND status = 'active' ORDER BY id LIMIT 1000`
}

export const recurringJobs = readModel(
  {
    name: 'recurring-jobs',
    handles: ['recurring_upserted', 'recurring_deleted', 'recurring_fired', 'recurring_rescheduled'] satisfies RecurringJobEvent['type'][],
    tables: ['recurring_jobs'],
    apply: applyRecurringRows,
  },
  { dueSchedulesInTurns, liveSchedulesBeside, activeOfProject },
)
