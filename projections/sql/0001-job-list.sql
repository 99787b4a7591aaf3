-- Read model of jobs: one row per job, the aggregate's state after its latest applied event.
-- Rows are snapshots guarded by last_seq, so events may be applied out of order (the claim path
-- writes rows before the projector sees the same events) and applied twice without harm.
CREATE TABLE projection_checkpoints (
  name text PRIMARY KEY,
  last_seq bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
  id text PRIMARY KEY,
  project_id text NOT NULL,
  state text NOT NULL,
  job_type text NOT NULL,
  queue text NOT NULL,
  -- json, not jsonb: payloads come back byte-for-byte as they were given (key order, spacing of numbers).
  payload json NOT NULL,
  created_at timestamptz NOT NULL,
  run_at timestamptz,
  started_at timestamptz,
  completed_at timestamptz,
  attempt integer NOT NULL,
  max_attempts integer NOT NULL,
  timeout_seconds integer NOT NULL,
  progress double precision,
  duration_ms bigint,
  error json,
  tags json,
  parent_job_id text,
  waiting_for_parent boolean NOT NULL,
  worker_id text,
  idempotency_key text,
  updated_at timestamptz NOT NULL,
  available_at timestamptz GENERATED ALWAYS AS (coalesce(run_at, created_at)) STORED,
  last_seq bigint NOT NULL
);

CREATE INDEX jobs_by_project_newest ON jobs (project_id, created_at DESC, id DESC);
CREATE INDEX jobs_by_project_state_newest ON jobs (project_id, state, created_at DESC, id DESC);
CREATE INDEX jobs_claimable ON jobs (project_id, queue, available_at, id) WHERE state = 'pending';
CREATE INDEX jobs_pending_by_due ON jobs (available_at) WHERE state = 'pending';
CREATE INDEX jobs_scheduled_by_due ON jobs (available_at) WHERE state = 'scheduled' AND NOT waiting_for_parent;
CREATE INDEX jobs_processing_by_start ON jobs (started_at) WHERE state = 'processing';
