-- Expiry of jobs that waited too long to be claimed (issue 28: ttl_seconds). NULL for every job
-- created without a ttl. expires_at is the end of the job's current wait (set each time it becomes
-- due, cleared by its claim); cancel_reason is 'expired' once that wait ran out, NULL otherwise.
-- The index holds the waiting jobs with a deadline by project, so the scheduler's sweep finds each
-- project's overdue ones in order without reading the others (projections/job-list.ts, expiredWaiting).
ALTER TABLE jobs ADD COLUMN ttl_seconds integer, ADD COLUMN expires_at timestamptz, ADD COLUMN cancel_reason text;
CREATE INDEX jobs_waiting_expiry ON jobs (project_id, expires_at)
  WHERE state IN ('pending', 'scheduled') AND expires_at IS NOT NULL AND NOT waiting_for_parent;
-- A recurring schedule's ttl, given to each occurrence; NULL: none (the queue's default applies).
ALTER TABLE recurring_jobs ADD COLUMN ttl_seconds integer;
