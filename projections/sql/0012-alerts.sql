-- Alert settings of each project, for the routes and the scheduler's evaluation.
CREATE TABLE alerts (
  project_id text NOT NULL,
  id text NOT NULL,
  name text NOT NULL,
  kind text NOT NULL,
  queue text,
  threshold bigint NOT NULL,
  window_minutes integer NOT NULL,
  email json NOT NULL,
  webhook boolean NOT NULL,
  enabled boolean NOT NULL,
  status text NOT NULL,
  last_value double precision,
  last_triggered_at timestamptz,
  last_resolved_at timestamptz,
  deleted boolean NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_seq bigint NOT NULL,
  PRIMARY KEY (project_id, id)
);
