-- The audit trail: one row per event that has an activity kind (spec, Activity kinds). Project
-- kinds carry the project; account kinds (passwords, 2FA, profile) carry the user instead.
CREATE TABLE activity (
  id text PRIMARY KEY,
  project_id text,
  user_id text,
  kind text NOT NULL,
  target_type text NOT NULL,
  target_id text,
  summary text NOT NULL,
  metadata text,
  created_at timestamptz NOT NULL,
  seq bigint NOT NULL
);

CREATE INDEX activity_by_project ON activity (project_id, created_at DESC, id DESC) WHERE project_id IS NOT NULL;
CREATE INDEX activity_by_user ON activity (user_id, created_at DESC, id DESC) WHERE user_id IS NOT NULL;

ALTER TABLE projects ADD COLUMN status text NOT NULL DEFAULT 'active';
