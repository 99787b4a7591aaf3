-- Webhook redelivery and replay (issue 25, item 3). A delivery names what made it and where its
-- event is: the operation (a replay) or the delivery it repeats, and the message holding the
-- event. `scheduled_seq` is the sequence of the message that scheduled it: a replay judges which
-- events were delivered as of one position of the log (domain/webhook-replay.ts). Rows written
-- before have neither (NULL: scheduled before any replay could be counted).
ALTER TABLE deliveries
  ADD COLUMN event_seq bigint,
  ADD COLUMN operation_id text,
  ADD COLUMN redelivery_of text,
  ADD COLUMN scheduled_seq bigint;
CREATE INDEX deliveries_by_event ON deliveries (project_id, webhook_id, event_id);
CREATE INDEX deliveries_by_operation ON deliveries (operation_id, status) WHERE operation_id IS NOT NULL;

-- Operations (domain/operation.ts) as their list reads them, and as the role that runs them finds
-- those still running when it starts.
CREATE TABLE operations (
  project_id text NOT NULL,
  id text PRIMARY KEY,
  kind text NOT NULL,
  status text NOT NULL,
  matched integer NOT NULL,
  processed integer NOT NULL,
  succeeded integer NOT NULL,
  failed integer NOT NULL,
  error json,
  created_at timestamptz NOT NULL,
  finished_at timestamptz,
  last_seq bigint NOT NULL
);
CREATE INDEX operations_by_project_newest ON operations (project_id, created_at DESC, id DESC);
CREATE INDEX operations_running ON operations (created_at, id) WHERE status = 'running';
