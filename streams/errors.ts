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

/** nats.js errors that mean the server is out of reach, by name (nats-core does not export them from the transport). */
const transportFailures = new Set(['TimeoutError', 'ClosedConnectionError', 'ConnectionError', 'DrainingConnectionError', 'NoRespondersError'])

/** Whether `err` says the log is out of reach rather than that a request was wrong. */
export function isLogUnavailable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof LogUnavailable || transportFailures.has(e.name)) return true
  }
  return false
}
