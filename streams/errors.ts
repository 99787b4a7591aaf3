/**
 * The aggregate changed between load and append (JetStream error 10071, "wrong last sequence").
 * handleCommand re-decides on fresh state a few times before letting this escape.
 */
export class ConcurrencyConflict extends Error {
  readonly subject: string
  constructor(subject: string, options?: { cause?: unknown }) {
    super(`the aggregate at ${subject} changed concurrently`, options)
    this.name = 'ConcurrencyConflict'
    this.subject = subject
  }
}

/**
 * The event log cannot be reached: the NATS connection is down (it reconnects by itself), or
 * JetStream did not answer in time. Nothing was decided; whether a publish that timed out was
 * stored is unknown, which is why clients retry writes with an Idempotency-Key.
 */
export class LogUnavailable extends Error {
  constructor(message = 'the event log (NATS JetStream) cannot be reached', options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'LogUnavailable'
  }
}

/**
 * The events stream is at its `max_bytes` (configuration `events_max_bytes`) and refuses new
 * messages: nothing is appended until space is freed (retention, or a larger limit). Discard
 * "new" rather than "old": dropping the oldest messages would silently delete live jobs.
 */
export class LogFull extends LogUnavailable {
  constructor(stream: string, options?: { cause?: unknown }) {
    super(`the event log (${stream}) is full: it refuses new messages until space is freed`, options)
    this.name = 'LogFull'
  }
}

/**
 * A project past its log budget (bytes appended in the last hour, by plan) asked for an append
 * that adds work or history (domain/log-budget.ts). `retryAfterMs`: until enough of the hour's
 * bytes leave the window.
 */
export class LogBudgetExceeded extends Error {
  readonly code = 'log_budget_exceeded'
  readonly retryAfterMs: number
  constructor(projectId: string, limitBytes: number, retryAfterMs: number) {
    super(`project ${projectId} appended its log budget of ${limitBytes} bytes in the last hour; retry after Retry-After`)
    this.name = 'LogBudgetExceeded'
    this.retryAfterMs = retryAfterMs
  }
}

/** nats.js errors that mean the server is out of reach, by name (nats-core does not export them from the transport). */
const transportFailures = new Set(['TimeoutError', 'ClosedConnectionError', 'ConnectionError', 'DrainingConnectionError', 'NoRespondersError'])

/** Whether `err` says the log is out of reach rather than that a request was wrong. */
export function isLogUnavailable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof LogUnavailable || transportFailures.has(e.name)) return true
  }
  return false
}
