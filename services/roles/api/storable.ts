/**
 * What Postgres can hold. The log accepts any instant, but the projector writes instants to
 * `timestamptz` columns; strings are the read models' to judge (projections/storable-values.ts:
 * U+0000 and unpaired surrogates read back from no read model, nor from the log). A value the
 * read models cannot hold is refused at the edge with 400 `invalid_request`, before anything is
 * appended, so every accepted value reads back unchanged from every route.
 */

export { isStorableText } from '../../../projections/storable-values.ts'

export const unstorableTextMessage = 'must not contain U+0000 or unpaired surrogates'

const earliest = Date.parse('0001-01-01T00:00:00.000Z')
const latest = Date.parse('9999-12-31T23:59:59.999Z')

/** `timestamptz` has no year 0, and a year past 9999 serializes as `+010000-…`, which it refuses. */
export function isStorableInstant(ms: number): boolean {
  return ms >= earliest && ms <= latest
}

export const unstorableInstantMessage = 'must fall in the years 0001 to 9999 (UTC)'
