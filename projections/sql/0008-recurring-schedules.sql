-- Recurring schedules as the routes and the scheduler read them: payload, next and last run.
ALTER TABLE recurring_jobs ADD COLUMN status text NOT NULL DEFAULT 'active';
ALTER TABLE recurring_jobs ADD COLUMN payload jsonb NOT NULL DEFAULT '{}';
ALTER TABLE recurring_jobs ADD COLUMN next_run_at timestamptz;
ALTER TABLE recurring_jobs ADD COLUMN last_run_at timestamptz;
ALTER TABLE recurring_jobs ADD COLUMN last_occurrence_at timestamptz;
ALTER TABLE recurring_jobs ADD COLUMN last_job_id text;
CREATE INDEX recurring_jobs_due ON recurring_jobs (next_run_at) WHERE next_run_at IS NOT NULL;
