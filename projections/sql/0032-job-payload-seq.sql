-- Deduplication with replace_payload (issue 29, item 5): a waiting job's payload may be replaced
-- by a later create with its dedup key. The job's state then names the message holding the latest
-- payload (`payload_seq`); the row keeps it so that a claim decided on the row (jobFromRow)
-- appends a state that still names it. NULL: the payload is the job_created's, as for every job
-- projected before this migration.
ALTER TABLE jobs ADD COLUMN payload_seq bigint;
