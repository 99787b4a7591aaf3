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
