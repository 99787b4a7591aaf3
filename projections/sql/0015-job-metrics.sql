-- Metrics rollups (docs/api-notes.md, "Metrics"): maintained by the projector from the job events, so the
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

-- The 0-based index of the histogram bucket holding the nearest-rank `p` percentile; null for an
-- empty histogram. The same rule as histogramPercentile in domain/job-metrics.ts.
CREATE FUNCTION histogram_rank_index(h integer[], p float8) RETURNS smallint
  LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
  AS $$
DECLARE
  total bigint := 0;
  seen bigint := 0;
  wanted bigint;
  n integer := coalesce(array_length(h, 1), 0);
BEGIN
  FOR i IN 1 .. n LOOP total := total + h[i]; END LOOP;
  IF total = 0 THEN RETURN NULL; END IF;
  wanted := greatest(1, ceil(p * total));
  FOR i IN 1 .. n LOOP
    seen := seen + h[i];
    IF seen >= wanted THEN RETURN i - 1; END IF;
  END LOOP;
  RETURN n - 1;
END $$;

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
  -- The histogram buckets holding the p50, p95 and p99 durations (nearest rank), kept current
  -- on every write so a read of a day of minutes reads three small numbers per bucket instead
  -- of 1,440 histograms.
  p50_index smallint GENERATED ALWAYS AS (histogram_rank_index(durations, 0.50)) STORED,
  p95_index smallint GENERATED ALWAYS AS (histogram_rank_index(durations, 0.95)) STORED,
  p99_index smallint GENERATED ALWAYS AS (histogram_rank_index(durations, 0.99)) STORED,
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
