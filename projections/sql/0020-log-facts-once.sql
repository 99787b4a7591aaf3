-- The log keeps a job's payload, last error and progress once rather than in every message
-- (docs/event-log.md). The job list takes each from the message that holds it and keeps it
-- while later messages refer to it:
-- - payload: from the job's job_created; NULL only for a job whose job_created left the log
--   before a later message was projected (retention racing a retry);
-- - error_seq: where the last error is in the log (the error column holds it);
-- - progress_seq: the last progress report applied, so retention removes the job's progress
--   subject with it.
ALTER TABLE jobs ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE jobs ADD COLUMN error_seq bigint;
ALTER TABLE jobs ADD COLUMN progress_seq bigint;

-- Metering state, not a read model (never emptied by a replay): bytes appended per project and
-- minute (epoch minutes), for the sliding one-hour log budget.
CREATE TABLE log_byte_counts (
  project_id text NOT NULL,
  minute bigint NOT NULL,
  bytes bigint NOT NULL,
  PRIMARY KEY (project_id, minute)
);
