/**
 * How often a job is tried and how long it waits between tries (spec, Worker ack): the one place
 * these numbers live. A project may set its own policy, and one per queue; what it leaves unset
 * is the spec's. The job aggregate schedules a failed attempt's retry with `retryDelayMs` under
 * the policy of the job's queue; job creation takes that policy's `max_attempts` as the default.
 */

export interface RetryPolicy {
  /** The first retry's delay; each later one is `factor` times the one before. */
  base_delay_seconds: number
  factor: number
  /** No delay grows past this; the jitter comes on top. */
  max_delay_seconds: number
  /** A random 0 to this many seconds added to each delay, so that failures do not retry in step. */
  jitter_seconds: number
  /** What a job created without `max_attempts` gets. */
  max_attempts: number
}

export type QueueRetryPolicy = RetryPolicy & { queue: string }

/**
 * A project's own settings: its default (null: the spec's) and its queues' overrides. The
 * overrides are a list rather than a record keyed by queue, since a queue may be named
 * `__proto__`.
 */
export interface RetryPolicies {
  project: RetryPolicy | null
  queues: QueueRetryPolicy[]
}

/** The spec's bounds on `max_attempts`. */
export const maxAttemptsRange = { min: 1, max: 100 } as const

/** The spec's backoff: 15 × 2^(attempt−1) s plus 0–3 s of jitter, 3 attempts; 15 s doubling reaches the day's cap at attempt 14. */
export const defaultRetryPolicy: Readonly<RetryPolicy> = Object.freeze({
  base_delay_seconds: 15,
  factor: 2,
  max_delay_seconds: 24 * 60 * 60,
  jitter_seconds: 3,
  max_attempts: 3,
})

export const defaultMaxAttempts = defaultRetryPolicy.max_attempts
export const retryBaseDelayMs = defaultRetryPolicy.base_delay_seconds * 1000
export const retryJitterMs = defaultRetryPolicy.jitter_seconds * 1000
export const retryMaxDelayMs = defaultRetryPolicy.max_delay_seconds * 1000

/**
 * What a project may set. A factor of 1 retries at a constant delay; the cap reaches a week, the
 * longest a job waits for a retry; the jitter stays within an hour.
 */
export const retryPolicyBounds = {
  base_delay_seconds: { min: 1, max: 24 * 60 * 60 },
  factor: { min: 1, max: 10 },
  max_delay_seconds: { min: 1, max: 7 * 24 * 60 * 60 },
  jitter_seconds: { min: 0, max: 60 * 60 },
  max_attempts: maxAttemptsRange,
} as const

/** Queue overrides a project may hold: each is carried in the project's state, which every request loads. */
export const maxQueueRetryPolicies = 100

/** The policy a job of `queue` follows: the queue's override, else the project's, else the spec's. */
export function retryPolicyFor(policies: RetryPolicies | undefined, queue: string): RetryPolicy {
  return policies?.queues.find((p) => p.queue === queue) ?? policies?.project ?? defaultRetryPolicy
}

export function isSameRetryPolicy(a: RetryPolicy | null, b: RetryPolicy | null): boolean {
  if (a === null || b === null) return a === b
  return (
    a.base_delay_seconds === b.base_delay_seconds &&
    a.factor === b.factor &&
    a.max_delay_seconds === b.max_delay_seconds &&
    a.jitter_seconds === b.jitter_seconds &&
    a.max_attempts === b.max_attempts
  )
}

/** Only the policy's own fields, whatever else the object carries (a queue name). */
export function toRetryPolicy(p: RetryPolicy): RetryPolicy {
  return {
    base_delay_seconds: p.base_delay_seconds,
    factor: p.factor,
    max_delay_seconds: p.max_delay_seconds,
    jitter_seconds: p.jitter_seconds,
    max_attempts: p.max_attempts,
  }
}

/**
 * The wait before retrying after failed attempt `attempt`: `base × factor^(attempt−1)` s, capped,
 * plus `random × jitter` s, in whole milliseconds. `random` is in [0, 1).
 */
export function retryDelayMs(attempt: number, random: number, policy: RetryPolicy = defaultRetryPolicy): number {
  const exponential = policy.base_delay_seconds * 1000 * policy.factor ** Math.max(0, attempt - 1)
  return Math.floor(Math.min(exponential, policy.max_delay_seconds * 1000)) + Math.floor(random * policy.jitter_seconds * 1000)
}
