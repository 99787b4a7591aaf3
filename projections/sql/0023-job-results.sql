-- What a job's successful attempt returned (the ack's `result`, issue 26): kept once in the log,
-- in the job's job_succeeded, and here from it. NULL: none (the handler returned nothing, or the
-- job has not succeeded). json, not jsonb, so its keys keep the worker's order, as payloads do.
ALTER TABLE jobs ADD COLUMN result json;
