/**
 * The spec's webhook delivery policy (Outbound webhooks, "Delivery policy"), the one place that
 * holds its numbers: what an answer means, how long an attempt may take, how many attempts a
 * delivery gets and how long each retry waits. Configuration may shorten the timeout and the
 * waits (tests do); their defaults are these.
 */

/** At most 5 attempts in total. */
export const maxDeliveryAttempts = 5

/** Waits after the first, second, third and fourth failed attempt: 5 s, 30 s, 5 min, 1 h. */
export const deliveryRetryWaitsMs: readonly number[] = [5_000, 30_000, 300_000, 3_600_000]

/** Each attempt's timeout: 10 s. */
export const deliveryAttemptTimeoutMs = 10_000

/**
 * The wait after failed attempt number `attempt` (1-based) before the next, from `waits` (the
 * policy's, or configuration's override of them). Only a delivery still pending asks, so
 * `attempt` is below `maxDeliveryAttempts` and within the list; past its end the last wait holds.
 */
export function retryWaitMs(attempt: number, waits: readonly number[] = deliveryRetryWaitsMs): number {
  return waits[Math.min(Math.max(attempt, 1), waits.length) - 1]!
}

/**
 * 2xx delivered; 4xx failed at once; 3xx too (redirects are not followed, and repeating the
 * request would meet the same one); 5xx, timeouts and network errors retried until the last
 * attempt.
 */
export function outcomeOf(responseStatus: number | null): 'delivered' | 'permanent_failure' | 'retryable_failure' {
  if (responseStatus !== null && responseStatus >= 200 && responseStatus < 300) return 'delivered'
  if (responseStatus !== null && responseStatus >= 300 && responseStatus < 500) return 'permanent_failure'
  return 'retryable_failure'
}
