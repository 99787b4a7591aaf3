-- Each project's Merkle log (docs/audit.md; projections/audit-log.ts): every event of its feed is
-- a leaf, in log order. The tree is kept as tiles of 256 hashes (a tile of level t holds nodes of
-- height 8·t), so a batch rewrites one tile per level and a proof reads a few tiles.
CREATE TABLE audit_trees (
  project_id text PRIMARY KEY,
  size bigint NOT NULL,
  -- The last message taken in: a message at or before it is not appended twice.
  last_seq bigint NOT NULL,
  -- The tree size the newest checkpoint taken in signed (null: none yet): the hourly pass skips
  -- a project whose tree grew by nothing but that checkpoint's own leaf.
  checkpointed_size bigint
);
CREATE INDEX audit_trees_uncheckpointed ON audit_trees (project_id) WHERE checkpointed_size IS NULL OR size > checkpointed_size + 1;

CREATE TABLE audit_tiles (
  project_id text NOT NULL,
  level smallint NOT NULL,
  idx bigint NOT NULL,
  -- Up to 256 SHA-256 hashes, 32 bytes each, in order.
  hashes bytea NOT NULL,
  PRIMARY KEY (project_id, level, idx)
);

-- Where each message's events are in the tree: its first event is leaf `leaf_index`, the others
-- follow it. The feed and the exports give each event its index from here.
CREATE TABLE audit_positions (
  project_id text NOT NULL,
  seq bigint NOT NULL,
  leaf_index bigint NOT NULL,
  events integer NOT NULL,
  -- The message's aggregate (a job's progress reports carry the job's id): retention finds the
  -- leaves of the jobs it removes by it, and a reader knows it with the sequence, so one index
  -- serves both (a second would cost every batch its writes).
  aggregate_id text NOT NULL,
  PRIMARY KEY (project_id, aggregate_id, seq)
);

-- Leaves whose messages retention removed, as retention recorded them on the log
-- (`leaves_expired`, domain/audit-expiry.ts): a tree rebuilt from the log puts them back in their
-- places, so its roots are those of the tree that held the messages.
CREATE TABLE audit_expired_leaves (
  project_id text NOT NULL,
  leaf_index bigint NOT NULL,
  hash bytea NOT NULL,
  PRIMARY KEY (project_id, leaf_index)
);

CREATE TABLE audit_checkpoints (
  project_id text NOT NULL,
  tree_size bigint NOT NULL,
  root_hash text NOT NULL,
  -- As signed (RFC 3339 with milliseconds), so the signed text is rebuilt byte for byte.
  issued_at text NOT NULL,
  key_id text NOT NULL,
  signature text NOT NULL,
  seq bigint NOT NULL,
  PRIMARY KEY (project_id, tree_size)
);
CREATE INDEX audit_checkpoints_by_time ON audit_checkpoints (project_id, issued_at);

CREATE TABLE audit_signing_keys (
  key_id text PRIMARY KEY,
  algorithm text NOT NULL,
  public_key text NOT NULL,
  valid_from text NOT NULL,
  valid_until text,
  last_seq bigint NOT NULL
);
