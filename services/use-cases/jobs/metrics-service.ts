import { jobStates, type JobState } from '../../../domain/job.ts'
import { bucketStart, histogramValue, resolutionSizeMs, type Resolution, type ThroughputCounts } from '../../../domain/job-metrics.ts'
import { jobMetrics } from '../../../projections/job-metrics.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * The metrics routes' reads (docs/api-notes.md, "Metrics"). Counts come from the projector's rollups
 * (projections/job-metrics.ts); only the oldest pending job of a queue is read from the jobs
 * read model, as the first entry of the claim index.
 */

export type StateCounts = Record<JobState, number>

const zeroCounts = (): StateCounts => Object.fromEntries(jobStates.map((s) => [s, 0])) as StateCounts
const totalOf = (counts: StateCounts) => Object.values(counts).reduce((a, b) => a + b, 0)

export interface Summary {
  queue: string | null
  counts: StateCounts
  total: number
  queues?: Array<{ queue: string; counts: StateCounts; total: number }>
}

export async function summary(deps: Deps, projectId: string, options: { queue: string | null; byQueue: boolean }): Promise<Summary> {
  const rows = await jobMetrics.stateCounts(deps.sql, projectId, options.queue)
  const counts = zeroCounts()
  const perQueue = new Map<string, StateCounts>()
  for (const r of rows) {
    counts[r.state] += r.count
    if (!options.byQueue) continue
    const q = perQueue.get(r.queue) ?? zeroCounts()
    q[r.state] += r.count
    perQueue.set(r.queue, q)
  }
  const answer: Summary = { queue: options.queue, counts, total: totalOf(counts) }
  if (options.byQueue) {
    answer.queues = [...perQueue.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([queue, c]) => ({ queue, counts: c, total: totalOf(c) }))
  }
  return answer
}

export interface QueueDepth {
  queue: string
  /** Pending jobs, including those waiting out a retry backoff. */
  pending: number
  scheduled: number
  processing: number
  /** The oldest job that is due and not claimed: when it became due, and for how long. */
  oldest_pending_at: string | null
  oldest_pending_age_ms: number | null
}

export async function queueDepths(deps: Deps, projectId: string, limit: number): Promise<{ data: QueueDepth[]; has_more: boolean }> {
  const now = deps.now()
  const rows = await jobMetrics.queueDepths(deps.sql, projectId, now, limit + 1)
  return {
    data: rows.slice(0, limit).map((r) => ({
      queue: r.queue,
      pending: r.pending,
      scheduled: r.scheduled,
      processing: r.processing,
      oldest_pending_at: r.oldest === null ? null : r.oldest.toISOString(),
      oldest_pending_age_ms: r.oldest === null ? null : Math.max(0, now.getTime() - r.oldest.getTime()),
    })),
    has_more: rows.length > limit,
  }
}

export interface ThroughputBucket extends ThroughputCounts {
  start: string
  p50_ms: number | null
  p95_ms: number | null
  p99_ms: number | null
}

const valueAt = (index: number | null | undefined): number | null => (index === null || index === undefined ? null : histogramValue(index))

/** The durations of every attempt finished in the window, as one set: what no bucket's percentiles can give. */
export async function windowPercentiles(
  deps: Deps,
  projectId: string,
  window: { from: Date; until: Date; interval: Resolution; queue: string | null },
): Promise<{ p50_ms: number | null; p95_ms: number | null; p99_ms: number | null }> {
  const i = await jobMetrics.windowPercentileIndexes(deps.sql, projectId, {
    resolution: window.interval,
    queue: window.queue,
    first: new Date(bucketStart(window.from.getTime(), window.interval)),
    last: new Date(bucketStart(window.until.getTime(), window.interval)),
  })
  return { p50_ms: valueAt(i.p50), p95_ms: valueAt(i.p95), p99_ms: valueAt(i.p99) }
}

/** Contiguous buckets from the one holding `from` to the one holding `until`, empty ones included. */
export async function throughput(
  deps: Deps,
  projectId: string,
  window: { from: Date; until: Date; interval: Resolution; queue: string | null },
): Promise<ThroughputBucket[]> {
  const first = bucketStart(window.from.getTime(), window.interval)
  const last = bucketStart(window.until.getTime(), window.interval)
  // One row per bucket: the queue's own, or the project's all-queues row. Percentiles come as
  // the histogram buckets the table keeps current (generated columns), not as histograms.
  const rows = await jobMetrics.throughputRows(deps.sql, projectId, {
    resolution: window.interval,
    queue: window.queue,
    first: new Date(first),
    last: new Date(last),
  })
  const byStart = new Map(rows.map((r) => [r[0], r]))
  const buckets: ThroughputBucket[] = []
  for (let at = first; at <= last; at += resolutionSizeMs(window.interval)) {
    const r = byStart.get(at)
    buckets.push({
      start: new Date(at).toISOString(),
      created: r?.[1] ?? 0,
      succeeded: r?.[2] ?? 0,
      failed: r?.[3] ?? 0,
      dead_lettered: r?.[4] ?? 0,
      cancelled: r?.[5] ?? 0,
      retried: r?.[6] ?? 0,
      p50_ms: valueAt(r?.[7]),
      p95_ms: valueAt(r?.[8]),
      p99_ms: valueAt(r?.[9]),
    })
  }
  return buckets
}

export interface JobTypeStats {
  job_type: string
  created: number
  succeeded: number
  failed: number
  dead_lettered: number
  /** Share of finished attempts that succeeded, 0 to 1; null when none finished. */
  success_rate: number | null
  avg_duration_ms: number | null
}

/** Windows longer than this are summed from day rows, so a 90-day window reads 90 rows per type, not 2,160. */
export const jobTypesByDayFromMs = 2 * 86_400_000

/** The job types with the most jobs created in the window's hours (or days), most first. */
export async function topJobTypes(deps: Deps, projectId: string, window: { from: Date; until: Date; limit: number }): Promise<JobTypeStats[]> {
  const resolution: Resolution = window.until.getTime() - window.from.getTime() > jobTypesByDayFromMs ? 'day' : 'hour'
  const rows = await jobMetrics.jobTypeTotals(deps.sql, projectId, {
    resolution,
    first: new Date(bucketStart(window.from.getTime(), resolution)),
    last: new Date(bucketStart(window.until.getTime(), resolution)),
    limit: window.limit,
  })
  return rows.map((r) => {
    const finished = r.succeeded + r.failed
    return {
      job_type: r.job_type,
      created: r.created,
      succeeded: r.succeeded,
      failed: r.failed,
      dead_lettered: r.dead_lettered,
      success_rate: finished === 0 ? null : Math.round((r.succeeded / finished) * 10_000) / 10_000,
      avg_duration_ms: r.duration_count === 0 ? null : Math.round((r.duration_sum_ms / r.duration_count) * 10) / 10,
    }
  })
}
