-- The priority a recurring schedule gives each job it creates (issue 28, item 5); NULL for a
-- schedule without one, which the routes then show without the field.
ALTER TABLE recurring_jobs ADD COLUMN priority integer;
