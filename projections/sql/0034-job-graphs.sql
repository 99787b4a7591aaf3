-- Graphs (issue 30): a job's parents (`depends_on`), those it still waits for (`waiting_for`) and
-- what a parent's dead-letter or cancel does to it (`on_parent_failure`); null for every job not
-- created with `depends_on`. The scheduler's sweep finds, through `waiting_for`, the ended parents
-- of waiting graph jobs whose cascade a crash interrupted, as it does through `parent_job_id` for
-- continuations.
ALTER TABLE jobs ADD COLUMN depends_on text[];
ALTER TABLE jobs ADD COLUMN waiting_for text[];
ALTER TABLE jobs ADD COLUMN on_parent_failure text;
CREATE INDEX jobs_waiting_graph_children ON jobs (project_id) WHERE state = 'scheduled' AND waiting_for_parent AND waiting_for IS NOT NULL;
