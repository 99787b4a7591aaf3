/**
 * What Postgres can hold. The log accepts any string and any instant, but the projector writes
 * them to `text` and `timestamptz` columns; a value Postgres refuses would stop the projector on
 * that event for every project, so the edge refuses it first with 400 `invalid_request`.
 */

const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/**
 * Postgres `text` refuses U+0000 (`json` columns keep it escaped, so payloads and tags may hold
 * it) and stores a lone UTF-16 surrogate as U+FFFD. A row must read back exactly as the log
 * holds it, because the claim path decides on the row, so both are refused.
 */
export function isStorableText(s: string): boolean {
  return !s.includes('\u0000') && !loneSurrogate.test(s)
}

export const unstorableTextMessage = 'must not contain U+0000 or unpaired surrogates'

const earliest = Date.parse('0001-01-01T00:00:00.000Z')
const latest = Date.parse('9999-12-31T23:59:59.999Z')

/** `timestamptz` has no year 0, and a year past 9999 serializes as `+010000-…`, which it refuses. */
export function isStorableInstant(ms: number): boolean {
  return ms >= earliest && ms <= latest
}

export const unstorableInstantMessage = 'must fall in the years 0001 to 9999 (UTC)'
