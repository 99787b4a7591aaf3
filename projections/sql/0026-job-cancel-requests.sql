-- When a cancel of a job's running attempt was asked for (issue 28: cancel with include_running);
-- NULL for every other job. The scheduler's reaper pass ends such an attempt cancelled once the
-- grace period (cancel_grace_ms) has passed without the worker's ack; the partial index holds the
-- few running jobs it looks at.
ALTER TABLE jobs ADD COLUMN cancel_requested_at timestamptz;
CREATE INDEX jobs_cancel_requested ON jobs (cancel_requested_at) WHERE state = 'processing' AND cancel_requested_at IS NOT NULL;
