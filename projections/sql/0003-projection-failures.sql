-- Messages the read models could not hold (Postgres refused the data itself). The projector
-- records them here and moves on, so one bad value cannot stall every project's read models.
CREATE TABLE projection_failures (
  seq bigint PRIMARY KEY,
  subject text NOT NULL,
  error_code text,
  error_message text NOT NULL,
  failed_at timestamptz NOT NULL DEFAULT now()
);
