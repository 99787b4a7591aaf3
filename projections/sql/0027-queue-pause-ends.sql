-- When a project's earliest queue pause with `until` ends (domain/project/queue-pauses.ts): the
-- scheduler records the end of the pauses whose `until` has passed (an automatic queue_resumed).
ALTER TABLE projects ADD COLUMN queue_pause_ends_at timestamptz;
CREATE INDEX projects_queue_pause_ends ON projects (queue_pause_ends_at) WHERE queue_pause_ends_at IS NOT NULL;
