-- Webhook deliveries as the deliveries route lists them: one row per (event, subscription).
CREATE TABLE deliveries (
  project_id text NOT NULL,
  webhook_id text NOT NULL,
  id text PRIMARY KEY,
  event_id text NOT NULL,
  event_type text NOT NULL,
  status text NOT NULL,
  response_status integer,
  attempt integer NOT NULL,
  attempted_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL,
  last_seq bigint NOT NULL
);
CREATE INDEX deliveries_by_webhook_newest ON deliveries (project_id, webhook_id, created_at DESC, id DESC);
