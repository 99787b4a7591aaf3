-- Named consumers of the projects' event feeds, as their list reads them (the positions are
-- the log's: a poll or a commit reads the consumer from its own subject). A deleted consumer
-- keeps its row (`deleted`) until a consumer of the same name is created again.
CREATE TABLE event_consumers (
  project_id text NOT NULL,
  name text NOT NULL,
  filter json NOT NULL,
  ack_wait_seconds integer NOT NULL,
  committed_seq bigint NOT NULL,
  -- The event's index in its message; -1: the whole message.
  committed_index integer NOT NULL,
  delivered_seq bigint NOT NULL,
  delivered_index integer NOT NULL,
  -- The earliest lease of a range still out, and how many are out.
  lease_until timestamptz,
  outstanding integer NOT NULL,
  deleted boolean NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_seq bigint NOT NULL,
  PRIMARY KEY (project_id, name)
);
