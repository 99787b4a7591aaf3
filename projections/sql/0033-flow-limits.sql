-- Flow limits (issue 29): a job's concurrency key, which the read-model claim query passes over
-- while its key is at its limit, and which the limits state counts waiting jobs by; and the flow
-- gates, one row per gate (a queue's or one of its keys'), as their last message left them: the
-- slots held, the bucket's tokens, a worker's hold. The reaper reconciles the slots from here.
ALTER TABLE jobs ADD COLUMN concurrency_key text;
-- Since when and why a waiting job was refused a gate, so a claim decided on the row keeps it.
ALTER TABLE jobs ADD COLUMN limit_waiting jsonb;
CREATE INDEX jobs_pending_by_key ON jobs (project_id, queue, concurrency_key) WHERE state = 'pending';

CREATE TABLE flow_gates (
  project_id text NOT NULL,
  gate_id text NOT NULL,
  queue text NOT NULL,
  key_by text,
  key text,
  holders jsonb NOT NULL,
  running integer NOT NULL,
  tokens double precision,
  refilled_at timestamptz,
  held_until timestamptz,
  last_seq bigint NOT NULL,
  PRIMARY KEY (project_id, gate_id)
);
CREATE INDEX flow_gates_held ON flow_gates (project_id, queue) WHERE running > 0;
