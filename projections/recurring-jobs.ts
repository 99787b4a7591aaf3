import type { RecurringJob } from '../domain/recurring-job.ts'
import type { Queryable } from './database.ts'
import { latestPerAggregate, type Projection } from './projection.ts'

/** Recurring schedules by project; firing them belongs to the scheduler (a later issue). */
export const recurringJobs: Projection = {
  name: 'recurring-jobs',
  handles: ['recurring_upserted'],
  tables: ['recurring_jobs'],
  async apply(tx: Queryable, records) {
    for (const r of latestPerAggregate(records.filter((x) => x.message.aggregate === 'recurring'))) {
      const s = r.message.state as RecurringJob | null
      if (s === null) continue
      await tx`
        INSERT INTO recurring_jobs (project_id, id, job_type, cron_expression, queue, timezone,
          max_attempts, timeout_seconds, created_at, updated_at, last_seq)
        VALUES (${s.project_id}, ${s.id}, ${s.job_type}, ${s.cron_expression}, ${s.queue}, ${s.timezone},
          ${s.max_attempts}, ${s.timeout_seconds}, ${s.created_at}, ${s.updated_at}, ${r.seq})
        ON CONFLICT (project_id, id) DO UPDATE SET job_type = excluded.job_type,
          cron_expression = excluded.cron_expression, queue = excluded.queue, timezone = excluded.timezone,
          max_attempts = excluded.max_attempts, timeout_seconds = excluded.timeout_seconds,
          updated_at = excluded.updated_at, last_seq = excluded.last_seq
        WHERE recurring_jobs.last_seq < excluded.last_seq`
    }
  },
}
