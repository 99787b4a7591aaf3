-- Terminal jobs by the time they ended, for the retention sweep.
CREATE INDEX jobs_terminal_by_end ON jobs ((coalesce(completed_at, updated_at)))
  WHERE state IN ('succeeded', 'dead_letter', 'cancelled');
