-- Continuations still waiting on their parent, for the scheduler's sweep of interrupted cascades.
CREATE INDEX jobs_waiting_children ON jobs (parent_job_id) WHERE state = 'scheduled' AND waiting_for_parent;
