-- A message the read models cannot hold is isolated per read model (checkpoints.ts): each
-- projection that refused it has its own row, saying whether it wrote a storable copy instead
-- ('sanitised') or nothing ('skipped'), and the project it belongs to, so an operator can find
-- and re-project it (`npm run replay -- --subject` or `--project`). Rows recorded before this
-- were skipped by every projection: they read as projection '*'.
ALTER TABLE projection_failures ADD COLUMN projection text NOT NULL DEFAULT '*';
ALTER TABLE projection_failures ADD COLUMN project_id text;
ALTER TABLE projection_failures ADD COLUMN projected text NOT NULL DEFAULT 'skipped';
ALTER TABLE projection_failures DROP CONSTRAINT projection_failures_pkey;
ALTER TABLE projection_failures ADD PRIMARY KEY (seq, projection);
UPDATE projection_failures SET project_id = split_part(subject, '.', 3);
CREATE INDEX projection_failures_by_project ON projection_failures (project_id);
CREATE INDEX projection_failures_by_subject ON projection_failures (subject);

-- The sequence at which a job's row was written from such a storable copy: while it equals
-- last_seq, the row is shown but not trusted as the job's state (a claim loads the job from the log).
ALTER TABLE jobs ADD COLUMN sanitised_seq bigint;
