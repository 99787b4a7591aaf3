-- The workers the API has seen (issue 26: GET /jobsvc/v1/workers). Not read models of the log:
-- polls, heartbeats and registrations are not events, so a replay does not rebuild these; like
-- the metering tables they belong to the service that writes them
-- (services/use-cases/workers/worker-presence.ts), which batches its writes every second.
CREATE TABLE worker_presence (
  project_id text NOT NULL,
  worker_id text NOT NULL,
  hostname text,
  sdk_version text,
  queues text[] NOT NULL DEFAULT '{}',
  job_types text[] NOT NULL DEFAULT '{}',
  registered_at timestamptz,
  last_poll_at timestamptz,
  last_seen_at timestamptz NOT NULL,
  PRIMARY KEY (project_id, worker_id)
);
CREATE INDEX worker_presence_recent ON worker_presence (project_id, last_seen_at DESC);

-- Acks per worker and minute (epoch minutes), for "finished in the last hour".
CREATE TABLE worker_outcomes (
  project_id text NOT NULL,
  worker_id text NOT NULL,
  minute bigint NOT NULL,
  succeeded integer NOT NULL DEFAULT 0,
  failed integer NOT NULL DEFAULT 0,
  PRIMARY KEY (project_id, worker_id, minute)
);
