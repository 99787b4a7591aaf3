-- The continuations a job carries, so that a row is the whole aggregate state: the claim path
-- decides on the row (and appends at its last_seq) without loading the job from the log first.
ALTER TABLE jobs ADD COLUMN children json NOT NULL DEFAULT '[]';
