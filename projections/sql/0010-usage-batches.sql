-- Units taken by the last batch: an UPDATE's RETURNING sees only new values, and a process takes
-- units for all its waiting creates in one statement.
ALTER TABLE project_usage ADD COLUMN last_take bigint NOT NULL DEFAULT 0;
