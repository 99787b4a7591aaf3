-- Metering state. Not read models: the log does not hold per-request counts, so these tables are
-- never emptied by a replay.

-- Requests per project and minute (epoch minutes), for the sliding one-hour request limit.
CREATE TABLE request_counts (
  project_id text NOT NULL,
  minute bigint NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (project_id, minute)
);

-- Jobs created per project and billing period (the first of a UTC month): one row, incremented
-- with a guarded UPDATE, so the allowance is exact under any concurrency.
CREATE TABLE project_usage (
  project_id text NOT NULL,
  period_start date NOT NULL,
  used bigint NOT NULL,
  PRIMARY KEY (project_id, period_start)
);
