-- Webhook subscriptions as the list route reads them. No secret here: the dispatcher reads the
-- sealed secret from the log.
CREATE TABLE webhooks (
  project_id text NOT NULL,
  id text NOT NULL,
  url text NOT NULL,
  events text NOT NULL,
  is_active boolean NOT NULL,
  deleted boolean NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz,
  last_seq bigint NOT NULL,
  PRIMARY KEY (project_id, id)
);
