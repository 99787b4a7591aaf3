-- json, not jsonb, like the jobs' payloads: a schedule's payload reads back with its keys in the
-- order they were given. Rows written before keep jsonb's order until their schedule's next change.
ALTER TABLE recurring_jobs ALTER COLUMN payload DROP DEFAULT;
ALTER TABLE recurring_jobs ALTER COLUMN payload TYPE json USING payload::json;
ALTER TABLE recurring_jobs ALTER COLUMN payload SET DEFAULT '{}';
