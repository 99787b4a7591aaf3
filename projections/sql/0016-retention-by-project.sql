-- Terminal jobs per project by the time they ended, for the retention sweep: each pass reads every
-- project's oldest expired jobs with one short range scan per project. The index it replaces
-- (0011) ordered all projects' jobs together, so a plan's sweep stepped over every job of longer
-- retention plans (up to 180 days of them) before reaching its own.
CREATE INDEX jobs_terminal_by_project_end ON jobs (project_id, (coalesce(completed_at, updated_at)))
  WHERE state IN ('succeeded', 'dead_letter', 'cancelled');
DROP INDEX jobs_terminal_by_end;
