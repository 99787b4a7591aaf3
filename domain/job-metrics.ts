import type { Job, JobEvent, JobState } from './job.ts'

/**
 * What the metrics rollups learn from the job events: pure functions from events to additive
 * deltas, and the duration histogram they are summed into. Every delta is additive, so the
 * projector can apply a batch as a handful of `count = count + delta` upserts, and replaying the
 * log rebuilds the same rollups.
 */

/** Throughput buckets kept at three resolutions, so a long window never sums thousands of rows. */
export const throughputResolutions = ['minute', 'hour', 'day'] as const
export type Resolution = (typeof throughputResolutions)[number]
/** Job-type stats are summed over windows of hours to months: hour and day rows. */
export const jobTypeResolutions = ['hour', 'day'] as const satisfies readonly Resolution[]

/** The queue name of a project's all-queues throughput row: no real queue name is empty. */
export const allQueues = ''

const resolutionMs: Record<Resolution, number> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 }

/** The start of the bucket (UTC) holding `atMs`. */
export function bucketStart(atMs: number, resolution: Resolution): number {
  const size = resolutionMs[resolution]
  return Math.floor(atMs / size) * size
}

export function resolutionSizeMs(resolution: Resolution): number {
  return resolutionMs[resolution]
}

/**
 * Durations go into logarithmic buckets: bucket 0 holds [0, 1) ms, bucket i ≥ 1 holds
 * [1.1^(i-1), 1.1^i) ms. A percentile read back from it is the bucket's geometric middle, within
 * 5% of the true value, whatever the scale (1 ms or 20 hours); 200 buckets reach past the longest
 * timeout (24 h). Stored as an integer array as long as the highest bucket used.
 */
const histogramGrowth = 1.1
export const histogramBuckets = 200

export function histogramIndex(durationMs: number): number {
  if (!(durationMs >= 1)) return 0
  return Math.min(histogramBuckets - 1, 1 + Math.floor(Math.log(durationMs) / Math.log(histogramGrowth)))
}

/** The value a bucket stands for: its geometric middle, in whole milliseconds. */
export function histogramValue(index: number): number {
  if (index === 0) return 0
  return Math.round(Math.pow(histogramGrowth, index - 0.5))
}

/** Nearest-rank percentile (`p` in (0, 1]) of a histogram; null when it counts nothing. */
export function histogramPercentile(histogram: readonly number[], p: number): number | null {
  const total = histogram.reduce((sum, n) => sum + n, 0)
  if (total === 0) return null
  const rank = Math.max(1, Math.ceil(p * total))
  let seen = 0
  for (let i = 0; i < histogram.length; i++) {
    seen += histogram[i] ?? 0
    if (seen >= rank) return histogramValue(i)
  }
  return histogramValue(histogram.length - 1)
}

/** Adds `b` into a copy of `a`, element by element (arrays may differ in length). */
export function addHistograms(a: readonly number[], b: readonly number[]): number[] {
  const sum = new Array<number>(Math.max(a.length, b.length)).fill(0)
  for (let i = 0; i < sum.length; i++) sum[i] = (a[i] ?? 0) + (b[i] ?? 0)
  return sum
}

/** Counters of one throughput bucket (and of one job type's hour, which adds the duration sum). */
export interface ThroughputCounts {
  created: number
  succeeded: number
  /** Attempts that ended in failure, whether they were retried or dead-lettered. */
  failed: number
  dead_lettered: number
  cancelled: number
  retried: number
}

export const emptyThroughput = (): ThroughputCounts => ({ created: 0, succeeded: 0, failed: 0, dead_lettered: 0, cancelled: 0, retried: 0 })

/** One event's contribution, before it is keyed by project, queue and time. */
export interface JobEventMetrics {
  /** State count changes: -1 for the state left, +1 for the state entered. */
  states: Partial<Record<JobState, number>>
  counts: Partial<ThroughputCounts>
  /** A finished attempt's duration, counted in the duration histogram and averages. */
  duration_ms: number | null
}

/**
 * The metrics effect of one job event. The state a job leaves is implied by the event type
 * (claimed: pending → processing), or carried by the event where it is not (cancelled from
 * pending or scheduled, retried from failed or dead_letter), so no per-job lookup is needed.
 */
export function metricsOfJobEvent(event: JobEvent): JobEventMetrics {
  const move = (from: JobState | null, to: JobState): Partial<Record<JobState, number>> =>
    from === to ? {} : from === null ? { [to]: 1 } : { [from]: -1, [to]: 1 }
  const none: JobEventMetrics = { states: {}, counts: {}, duration_ms: null }
  switch (event.type) {
    case 'job_created':
      return { states: move(null, event.data.state), counts: { created: 1 }, duration_ms: null }
    case 'job_promoted':
      return { ...none, states: move('scheduled', 'pending') }
    case 'job_activated':
      return { ...none, states: move('scheduled', event.data.state) }
    case 'job_claimed':
      return { ...none, states: move('pending', 'processing') }
    case 'job_succeeded':
      return { states: move('processing', 'succeeded'), counts: { succeeded: 1 }, duration_ms: event.data.duration_ms }
    case 'job_attempt_failed':
      return { states: move('processing', 'pending'), counts: { failed: 1 }, duration_ms: event.data.duration_ms }
    case 'job_dead_lettered':
      return { states: move('processing', 'dead_letter'), counts: { failed: 1, dead_lettered: 1 }, duration_ms: event.data.duration_ms }
    case 'job_cancelled':
      return { ...none, states: move(event.data.previous_state, 'cancelled'), counts: { cancelled: 1 } }
    case 'job_retried':
      return { ...none, states: move(event.data.previous_state, 'pending'), counts: { retried: 1 } }
    case 'job_released':
      return { ...none, states: move('processing', event.data.state) }
    case 'job_child_attached':
    case 'job_progressed':
    case 'job_cancel_requested':
    case 'job_priority_changed':
    case 'job_payload_replaced':
    case 'job_limit_waiting':
    case 'job_parent_settled':
      return none
  }
}

/** The identity every delta of one job is keyed by (a job never changes queue or type). */
export type JobKey = Pick<Job, 'project_id' | 'queue' | 'job_type'>
