-- Metrics rollups (README, "Metrics"): maintained by the projector from the job events, so the
-- metrics routes read a few rows instead of scanning the jobs. Every column is a sum, applied
-- as `column + delta` in the transaction that advances the projector's checkpoint.

-- Jobs by state, per project and queue: +1 for the state a job enters, -1 for the state it leaves.
CREATE TABLE job_state_counts (
  project_id text NOT NULL,
  queue text NOT NULL,
  state text NOT NULL,
  count bigint NOT NULL,
  PRIMARY KEY (project_id, queue, state)
);

-- Throughput per project, queue and time bucket, at three resolutions (minute, hour, day):
-- counts of what happened in the bucket and a histogram of finished attempts' durations
-- (logarithmic buckets, domain/job-metrics.ts). Queue '' (no real queue name is empty) holds
-- the project's total, so any answer reads one row per bucket.
CREATE TABLE job_throughput (
  project_id text NOT NULL,
  resolution text NOT NULL,
  bucket_start timestamptz NOT NULL,
  queue text NOT NULL,
  created bigint NOT NULL,
  succeeded bigint NOT NULL,
  failed bigint NOT NULL,
  dead_lettered bigint NOT NULL,
  cancelled bigint NOT NULL,
  retried bigint NOT NULL,
  durations integer[] NOT NULL,
  PRIMARY KEY (project_id, resolution, queue, bucket_start)
);

-- Per project, job type and hour or day: volume, outcomes and the sum of finished attempts'
-- durations.
CREATE TABLE job_type_stats (
  project_id text NOT NULL,
  resolution text NOT NULL,
  bucket_start timestamptz NOT NULL,
  job_type text NOT NULL,
  created bigint NOT NULL,
  succeeded bigint NOT NULL,
  failed bigint NOT NULL,
  dead_lettered bigint NOT NULL,
  duration_sum_ms bigint NOT NULL,
  duration_count bigint NOT NULL,
  PRIMARY KEY (project_id, resolution, bucket_start, job_type)
);

-- Element-wise sum of two duration histograms (of any lengths).
CREATE FUNCTION add_histograms(a integer[], b integer[]) RETURNS integer[]
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}') FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i) $$;
