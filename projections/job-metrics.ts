import type { Job, JobEvent, JobEventType, JobState } from '../domain/job.ts'
import {
  bucketStart,
  allQueues,
  emptyThroughput,
  histogramIndex,
  jobTypeResolutions,
  metricsOfJobEvent,
  throughputResolutions,
  type Resolution,
  type ThroughputCounts,
} from '../domain/job-metrics.ts'
import type { EventRecord, StoredEvent } from '../streams/event-store.ts'
import type { Queryable, Tx } from './database.ts'
import { readModel } from './projection.ts'

const handledTypes: readonly JobEventType[] = [
  'job_created',
  'job_promoted',
  'job_activated',
  'job_claimed',
  'job_succeeded',
  'job_attempt_failed',
  'job_dead_lettered',
  'job_cancelled',
  'job_retried',
  'job_released',
]

interface ThroughputRow extends ThroughputCounts {
  project_id: string
  resolution: string
  bucket_start: string
  queue: string
  durations: number[]
}

interface TypeStatsRow {
  project_id: string
  resolution: string
  bucket_start: string
  job_type: string
  created: number
  succeeded: number
  failed: number
  dead_lettered: number
  duration_sum_ms: number
  duration_count: number
}

/**
 * A group's rollup rows by resolution and bucket start (ms): a batch's events fall into a few
 * buckets, so after the group is found each event costs a number lookup per resolution, not a
 * text key built per row it adds to.
 */
type RowsByBucket<R> = Map<number, R>[]

/** A batch's metric deltas, summed in memory so the batch writes each rollup row once. */
export class MetricDeltas {
  readonly states = new Map<string, { project_id: string; queue: string; state: string; count: number }>()
  /** Throughput rows by project and queue (a project's all-queues rows under `allQueues`), then bucket. */
  readonly #throughput = new Map<string, RowsByBucket<ThroughputRow>>()
  /** Job-type rows by project and job type, then bucket. */
  readonly #types = new Map<string, RowsByBucket<TypeStatsRow>>()
  /** Bucket starts as the rows write them: a batch's events fall into a few. */
  readonly #startTexts = new Map<number, string>()

  get throughput(): ThroughputRow[] {
    return [...this.#throughput.values()].flatMap((byResolution) => byResolution.flatMap((rows) => [...rows.values()]))
  }

  get types(): TypeStatsRow[] {
    return [...this.#types.values()].flatMap((byResolution) => byResolution.flatMap((rows) => [...rows.values()]))
  }

  #startText(start: number): string {
    let text = this.#startTexts.get(start)
    if (text === undefined) {
      text = new Date(start).toISOString()
      this.#startTexts.set(start, text)
    }
    return text
  }

  #throughputRow(projectId: string, queue: string, r: number, start: number): ThroughputRow {
    const key = `${projectId}\u0000${queue}`
    let group = this.#throughput.get(key)
    if (group === undefined) this.#throughput.set(key, (group = throughputResolutions.map(() => new Map())))
    let row = group[r]!.get(start)
    if (row === undefined) {
      row = {
        project_id: projectId,
        resolution: throughputResolutions[r]!,
        bucket_start: this.#startText(start),
        queue,
        ...emptyThroughput(),
        durations: [],
      }
      group[r]!.set(start, row)
    }
    return row
  }

  #typeRow(projectId: string, jobType: string, r: number, start: number): TypeStatsRow {
    const key = `${projectId}\u0000${jobType}`
    let group = this.#types.get(key)
    if (group === undefined) this.#types.set(key, (group = jobTypeResolutions.map(() => new Map())))
    let row = group[r]!.get(start)
    if (row === undefined) {
      row = {
        project_id: projectId,
        resolution: jobTypeResolutions[r]!,
        bucket_start: this.#startText(start),
        job_type: jobType,
        created: 0,
        succeeded: 0,
        failed: 0,
        dead_lettered: 0,
        duration_sum_ms: 0,
        duration_count: 0,
      }
      group[r]!.set(start, row)
    }
    return row
  }

  add(job: Pick<Job, 'project_id' | 'queue' | 'job_type'>, event: StoredEvent<JobEvent>): void {
    const effect = metricsOfJobEvent(event)
    for (const state in effect.states) {
      const delta = effect.states[state as JobState]!
      const key = `${job.project_id}\u0000${job.queue}\u0000${state}`
      const row = this.states.get(key)
      if (row === undefined) this.states.set(key, { project_id: job.project_id, queue: job.queue, state, count: delta })
      else row.count += delta
    }
    const counts = Object.entries(effect.counts) as Array<[keyof ThroughputCounts, number]>
    if (counts.length === 0 && effect.duration_ms === null) return
    const at = Date.parse(event.time)
    const durationIndex = effect.duration_ms === null ? null : histogramIndex(effect.duration_ms)
    for (let r = 0; r < throughputResolutions.length; r++) {
      const start = bucketStart(at, throughputResolutions[r]!)
      // The queue's own row and the project's all-queues row.
      for (const queue of [job.queue, allQueues]) {
        const row = this.#throughputRow(job.project_id, queue, r, start)
        for (const [name, n] of counts) row[name] += n
        if (durationIndex !== null) {
          while (row.durations.length <= durationIndex) row.durations.push(0)
          row.durations[durationIndex]! += 1
        }
      }
    }
    for (let r = 0; r < jobTypeResolutions.length; r++) {
      const stats = this.#typeRow(job.project_id, job.job_type, r, bucketStart(at, jobTypeResolutions[r]!))
      stats.created += effect.counts.created ?? 0
      stats.succeeded += effect.counts.succeeded ?? 0
      stats.failed += effect.counts.failed ?? 0
      stats.dead_lettered += effect.counts.dead_lettered ?? 0
      if (effect.duration_ms !== null) {
        stats.duration_sum_ms += effect.duration_ms
        stats.duration_count += 1
      }
    }
  }
}

/** The deltas a batch of job messages adds to the rollups. */
export function metricDeltasOf(records: readonly EventRecord[]): MetricDeltas {
  const deltas = new MetricDeltas()
  for (const record of records) {
    if (record.message.aggregate !== 'job') continue
    const job = record.message.state as Job | null
    if (job === null) continue
    for (const event of record.message.events as StoredEvent<JobEvent>[]) deltas.add(job, event)
  }
  return deltas
}

/**
 * Adds a batch's deltas to the rollups: one statement per table, rows sent as one json
 * document (as the job list does). Runs in the batch's transaction, so the checkpoint guards it
 * against applying a message twice.
 */
export async function applyMetricDeltas(tx: Tx, deltas: MetricDeltas): Promise<void> {
  const states = [...deltas.states.values()].filter((r) => r.count !== 0)
  if (states.length > 0) {
    // In key order: retention locks the rows it subtracts from in the same order, so the two
    // never wait on each other in a cycle (a deadlock Postgres would break by failing one).
    await tx`
      INSERT INTO job_state_counts (project_id, queue, state, count)
      SELECT project_id, queue, state, count FROM json_populate_recordset(null::job_state_counts, ${JSON.stringify(states)}::text::json)
      ORDER BY project_id, queue, state
      ON CONFLICT (project_id, queue, state) DO UPDATE SET count = job_state_counts.count + excluded.count`
    // A state a queue has emptied leaves no row, so the rollup is the same however the log was
    // cut into batches (a replay and a live run must agree row by row).
    await tx`
      DELETE FROM job_state_counts c USING json_populate_recordset(null::job_state_counts, ${JSON.stringify(states)}::text::json) d
      WHERE c.count = 0 AND c.project_id = d.project_id AND c.queue = d.queue AND c.state = d.state`
  }
  const throughput = deltas.throughput
  if (throughput.length > 0) {
    await tx`
      INSERT INTO job_throughput (project_id, resolution, bucket_start, queue, created, succeeded, failed, dead_lettered, cancelled, retried, durations)
      SELECT project_id, resolution, bucket_start, queue, created, succeeded, failed, dead_lettered, cancelled, retried, durations
      FROM json_populate_recordset(null::job_throughput, ${JSON.stringify(throughput)}::text::json)
      ON CONFLICT (project_id, resolution, queue, bucket_start) DO UPDATE SET
        created = job_throughput.created + excluded.created,
        succeeded = job_throughput.succeeded + excluded.succeeded,
        failed = job_throughput.failed + excluded.failed,
        dead_lettered = job_throughput.dead_lettered + excluded.dead_lettered,
        cancelled = job_throughput.cancelled + excluded.cancelled,
        retried = job_throughput.retried + excluded.retried,
        durations = add_histograms(job_throughput.durations, excluded.durations)`
  }
  const types = deltas.types
  if (types.length > 0) {
    await tx`
      INSERT INTO job_type_stats (project_id, resolution, bucket_start, job_type, created, succeeded, failed, dead_lettered, duration_sum_ms, duration_count)
      SELECT project_id, resolution, bucket_start, job_type, created, succeeded, failed, dead_lettered, duration_sum_ms, duration_count
      FROM json_populate_recordset(null::job_type_stats, ${JSON.stringify(types)}::text::json)
      ON CONFLICT (project_id, resolution, bucket_start, job_type) DO UPDATE SET
        created = job_type_stats.created + excluded.created,
        succeeded = job_type_stats.succeeded + excluded.succeeded,
        failed = job_type_stats.failed + excluded.failed,
        dead_lettered = job_type_stats.dead_lettered + excluded.dead_lettered,
        duration_sum_ms = job_type_stats.duration_sum_ms + excluded.duration_sum_ms,
        duration_count = job_type_stats.duration_count + excluded.duration_count`
  }
}

/**
 * Takes jobs retention deleted out of the state counts: the counts lose the deleted jobs with their rows (a replay, which no longer sees their
 * messages, would not count them either), and a state a queue has emptied leaves no row, as the
 * projector does. The rows are locked in key order first, the order the projector's batches lock
 * them in too, so the two never wait on each other in a cycle.
 */
async function subtractStateCounts(tx: Tx, rows: ReadonlyArray<{ project_id: string; queue: string; state: string }>): Promise<void> {
  const counts = new Map<string, { project_id: string; queue: string; state: string; n: number }>()
  for (const r of rows) {
    const key = `${r.project_id}\u0000${r.queue}\u0000${r.state}`
    const entry = counts.get(key) ?? { project_id: r.project_id, queue: r.queue, state: r.state, n: 0 }
    entry.n++
    counts.set(key, entry)
  }
  const deltas = JSON.stringify([...counts.values()])
  await tx`
    SELECT 1 FROM job_state_counts c
    JOIN json_to_recordset(${deltas}::text::json) AS d(project_id text, queue text, state text, n bigint) USING (project_id, queue, state)
    ORDER BY c.project_id, c.queue, c.state
    FOR UPDATE OF c`
  await tx`
    UPDATE job_state_counts c SET count = c.count - d.n
    FROM json_to_recordset(${deltas}::text::json) AS d(project_id text, queue text, state text, n bigint)
    WHERE c.project_id = d.project_id AND c.queue = d.queue AND c.state = d.state`
  await tx`
    DELETE FROM job_state_counts c USING json_to_recordset(${deltas}::text::json) AS d(project_id text, queue text, state text)
    WHERE c.count = 0 AND c.project_id = d.project_id AND c.queue = d.queue AND c.state = d.state`
}

/** Deletes minute buckets of throughput that started before `cutoff`; resolves to how many. */
async function pruneMinuteThroughput(db: Queryable, cutoff: Date): Promise<number> {
  const deleted = await db`DELETE FROM job_throughput WHERE resolution = 'minute' AND bucket_start < ${cutoff}`
  return deleted.count
}

/** The project's non-zero state counts per queue (of one queue, or of all: null). */
async function stateCounts(db: Queryable, projectId: string, queue: string | null) {
  return db<{ queue: string; state: JobState; count: number }[]>`
    SELECT queue, state, count FROM job_state_counts
    WHERE project_id = ${projectId} ${queue === null ? db`` : db`AND queue = ${queue}`} AND count <> 0`
}

/**
 * The project's queues, most pending first, at most `limit`: their pending, scheduled and
 * processing counts, and when the oldest job due at `now` became due (null when none is).
 */
async function queueDepths(db: Queryable, projectId: string, now: Date, limit: number) {
  // min(available_at) over the partial claim index (project_id, queue, available_at) WHERE
  // state = 'pending' is one index probe per queue, however deep the queue.
  return db<{ queue: string; pending: number; scheduled: number; processing: number; oldest: Date | null }[]>`
    SELECT q.queue, q.pending, q.scheduled, q.processing,
      CASE WHEN q.pending > 0 THEN (
        SELECT min(j.available_at) FROM jobs j
        WHERE j.project_id = ${projectId} AND j.queue = q.queue AND j.state = 'pending' AND j.available_at <= ${now}
      ) END AS oldest
    FROM (
      SELECT queue,
        coalesce(sum(count) FILTER (WHERE state = 'pending'), 0)::bigint AS pending,
        coalesce(sum(count) FILTER (WHERE state = 'scheduled'), 0)::bigint AS scheduled,
        coalesce(sum(count) FILTER (WHERE state = 'processing'), 0)::bigint AS processing
      FROM job_state_counts WHERE project_id = ${projectId}
      GROUP BY queue
    ) q
    ORDER BY q.pending DESC, q.queue
    LIMIT ${limit}`
}

/**
 * A throughput bucket as one array: its start (epoch ms), the counts, and the histogram indexes
 * of its percentiles (the generated columns the table keeps current).
 */
export type ThroughputBucketRow = [
  startMs: number,
  created: number,
  succeeded: number,
  failed: number,
  deadLettered: number,
  cancelled: number,
  retried: number,
  p50: number | null,
  p95: number | null,
  p99: number | null,
]

/**
 * The buckets of `resolution` starting from `first` to `last` (both included) of one queue, or of
 * the project's all-queues row (null); buckets nothing happened in have no row. The rows travel
 * as one JSON array of arrays: a day of minutes is 1,440 rows, and postgres.js's column-by-column
 * row parsing took most of the answer's time; JSON.parse takes well under 1 ms.
 */
async function throughputRows(
  db: Queryable,
  projectId: string,
  window: { resolution: Resolution; queue: string | null; first: Date; last: Date },
): Promise<ThroughputBucketRow[]> {
  const [result] = await db<{ rows: ThroughputBucketRow[] | null }[]>`
    SELECT json_agg(json_build_array((extract(epoch FROM bucket_start) * 1000)::bigint, created, succeeded, failed, dead_lettered, cancelled, retried,
      p50_index, p95_index, p99_index)) AS rows
    FROM job_throughput
    WHERE project_id = ${projectId} AND resolution = ${window.resolution} AND queue = ${window.queue ?? allQueues}
      AND bucket_start >= ${window.first} AND bucket_start <= ${window.last}`
  return result?.rows ?? []
}

/**
 * The p50, p95 and p99 histogram indexes of every attempt finished in the buckets of `resolution`
 * from `first` to `last` of one queue (or all, null): their histograms summed, then ranked. Null
 * when none finished.
 */
async function windowPercentileIndexes(
  db: Queryable,
  projectId: string,
  window: { resolution: Resolution; queue: string | null; first: Date; last: Date },
): Promise<{ p50: number | null; p95: number | null; p99: number | null }> {
  const [row] = await db<{ p50: number | null; p95: number | null; p99: number | null }[]>`
    WITH summed AS (
      SELECT array_agg(n ORDER BY i) AS h FROM (
        SELECT i, sum(x)::int AS n FROM job_throughput, unnest(durations) WITH ORDINALITY AS u(x, i)
        WHERE project_id = ${projectId} AND resolution = ${window.resolution} AND queue = ${window.queue ?? allQueues}
          AND bucket_start >= ${window.first} AND bucket_start <= ${window.last}
        GROUP BY i) per_index)
    SELECT histogram_rank_index(h, 0.50) AS p50, histogram_rank_index(h, 0.95) AS p95, histogram_rank_index(h, 0.99) AS p99 FROM summed`
  return row ?? { p50: null, p95: null, p99: null }
}

/** Per job type, the sums of the buckets of `resolution` from `first` to `last`: the most created first, at most `limit`. */
async function jobTypeTotals(db: Queryable, projectId: string, window: { resolution: Resolution; first: Date; last: Date; limit: number }) {
  return db<
    { job_type: string; created: number; succeeded: number; failed: number; dead_lettered: number; duration_sum_ms: number; duration_count: number }[]
  >`
    SELECT job_type, sum(created)::bigint AS created, sum(succeeded)::bigint AS succeeded, sum(failed)::bigint AS failed,
      sum(dead_lettered)::bigint AS dead_lettered, sum(duration_sum_ms)::bigint AS duration_sum_ms, sum(duration_count)::bigint AS duration_count
    FROM job_type_stats
    WHERE project_id = ${projectId} AND resolution = ${window.resolution}
      AND bucket_start >= ${window.first} AND bucket_start <= ${window.last}
    GROUP BY job_type
    ORDER BY sum(created) DESC, sum(duration_count) DESC, job_type
    LIMIT ${window.limit}`
}

export const jobMetrics = readModel(
  {
    name: 'job-metrics',
    handles: handledTypes,
    tables: ['job_state_counts', 'job_throughput', 'job_type_stats'],
    apply: (tx, records) => applyMetricDeltas(tx, metricDeltasOf(records)),
  },
  { stateCounts, queueDepths, throughputRows, windowPercentileIndexes, jobTypeTotals, subtractStateCounts, pruneMinuteThroughput },
)
