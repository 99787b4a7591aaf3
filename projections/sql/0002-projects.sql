-- Projects and the API-key lookup table used by authentication (prefix -> project, hash).
CREATE TABLE projects (
  id text PRIMARY KEY,
  name text NOT NULL,
  plan text NOT NULL,
  owner_email text,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_seq bigint NOT NULL
);

CREATE TABLE api_keys (
  prefix text PRIMARY KEY,
  project_id text NOT NULL,
  key_hash text NOT NULL,
  status text NOT NULL,
  issued_at timestamptz NOT NULL,
  expires_at timestamptz,
  last_seq bigint NOT NULL
);

CREATE INDEX api_keys_by_project ON api_keys (project_id);

CREATE TABLE recurring_jobs (
  project_id text NOT NULL,
  id text NOT NULL,
  job_type text NOT NULL,
  cron_expression text NOT NULL,
  queue text NOT NULL,
  timezone text NOT NULL,
  max_attempts integer NOT NULL,
  timeout_seconds integer NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_seq bigint NOT NULL,
  PRIMARY KEY (project_id, id)
);
