/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): a job created with a `traceparent`
 * keeps it, so that the worker that runs the job continues the caller's trace.
 *
 * Version 00 is the exact 55-character form. A later version may append fields after a `-`, so
 * its first four fields are read and the rest kept as sent, as the spec asks of a reader that
 * knows an older version. Version ff, all-zero trace or parent ids and anything else malformed
 * are not a trace context: the caller's value is dropped, never refused, because a broken
 * tracing header must not cost anyone a job.
 */
const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/

/** Longer values are not kept: no version of the header is anywhere near this long. */
const maxTraceparentLength = 512

const allZero = /^0+$/

/** The header's value when it is a valid traceparent, otherwise null. */
export function toTraceparent(value: unknown): string | null {
  if (typeof value !== 'string' || value.length > maxTraceparentLength) return null
  const match = traceparentPattern.exec(value)
  if (match === null) return null
  const [, version, traceId, parentId, , rest] = match
  if (version === 'ff' || allZero.test(traceId!) || allZero.test(parentId!)) return null
  if (version === '00' && rest !== undefined) return null
  return value
}
