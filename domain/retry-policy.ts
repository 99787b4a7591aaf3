/**
 * How often a job is tried and how long it waits between tries (spec, Worker ack): the one place
 * these numbers live. The job aggregate schedules a failed attempt's retry with `retryDelayMs`;
 * the routes bound and default `max_attempts` with the rest.
 */

/** The spec's bounds on `max_attempts`, and what a job that does not say gets. */
export const maxAttemptsRange = { min: 1, max: 100 } as const
export const defaultMaxAttempts = 3

export const retryBaseDelayMs = 15_000
export const retryJitterMs = 3_000
/** 15 s doubling reaches a day at attempt 14; beyond that the delay stays at a day. */
export const retryMaxDelayMs = 24 * 60 * 60 * 1000

/** The spec's backoff: 15 * 2^(attempt-1) seconds plus 0-3 s of jitter, capped at a day. `random` is in [0, 1). */
export function retryDelayMs(attempt: number, random: number): number {
  const exponential = retryBaseDelayMs * 2 ** Math.max(0, attempt - 1)
  return Math.min(exponential, retryMaxDelayMs) + Math.floor(random * retryJitterMs)
}
