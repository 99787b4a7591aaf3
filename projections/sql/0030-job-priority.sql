-- Job priorities (issue 28, item 5): the claim order of a queue is due time − priority.
-- `priority` is NULL for a job that never had one (its state carries none, and neither does its
-- detail), the offset in seconds otherwise. `claim_rank_at` (available_at − priority) is written by
-- the projection from the job's state: Postgres does not take timestamptz − interval as an
-- immutable expression, so it cannot be a generated column like available_at. Rows projected
-- before this migration have no priority: their rank is their due time.
ALTER TABLE jobs ADD COLUMN priority integer;
ALTER TABLE jobs ADD COLUMN claim_rank_at timestamptz;
UPDATE jobs SET claim_rank_at = available_at;
-- The claim paths' order (claimCandidates, pendingQueue); jobs_claimable stays for the queries
-- that ask for the oldest due job (metrics, alerts).
CREATE INDEX jobs_claimable_by_rank ON jobs (project_id, queue, claim_rank_at, id) WHERE state = 'pending';
