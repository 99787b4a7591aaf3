-- The W3C traceparent a job was created with: a claim from the pending rows hands it to the worker,
-- so the row must carry it like the rest of the job's state. Jobs created before it have none.
ALTER TABLE jobs ADD COLUMN traceparent text;
