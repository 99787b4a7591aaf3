import { feedEventTypes } from '../../../domain/event-feed.ts'
import type { JobMoment } from '../../../domain/job-as-of.ts'
import { decodeFeedCursor } from '../../use-cases/events/feed-cursor.ts'
import type { HistoryFilter } from '../../use-cases/jobs/job-service.ts'
import { invalidCursor, invalidRequest } from './errors.ts'
import { typeList } from './query-fields.ts'

/**
 * The query values that name moments of a job's history: `as_of` of `GET /jobs/{id}`, and the
 * filters of `GET /jobs/{id}/history` (docs/event-log.md, "A job's history over HTTP"). Each is
 * refused with the envelope's codes here, before anything reads the log.
 */

const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i

/** The event types a job's history holds: its own and its progress reports'. */
export const historyEventTypes: readonly string[] = [...feedEventTypes.job, ...feedEventTypes.progress]

/** An RFC 3339 date-time as an ISO instant (UTC, milliseconds); anything else is 400 `invalid_request` naming `name`. */
export function toInstant(text: string, name: string): string {
  const ms = Date.parse(text)
  if (!rfc3339.test(text) || Number.isNaN(ms)) throw invalidRequest(`${name} must be an RFC 3339 date-time, e.g. 2026-11-26T10:00:00Z`)
  return new Date(ms).toISOString()
}

/**
 * `as_of`: a cursor of the event feed (an event's `cursor`, as the feed and the history give it) or
 * an RFC 3339 date-time. A cursor this project was not given is 400 `invalid_cursor`; any other
 * text, 400 `invalid_request`.
 */
export function toJobMoment(asOf: string, projectId: string): JobMoment {
  if (asOf.startsWith('c1.')) {
    const position = decodeFeedCursor(projectId, asOf)
    if (position === null) throw invalidCursor('as_of: the cursor is not one this service issued for this project')
    return { position }
  }
  if (!rfc3339.test(asOf)) throw invalidRequest("as_of must be an RFC 3339 date-time or an event's cursor (from the event feed or the job's history)")
  return { time: toInstant(asOf, 'as_of') }
}

/** The history's `types`, `since` and `until`: unknown types and malformed or reversed bounds are 400 `invalid_request`. */
export function toHistoryFilter(q: { types?: string | undefined; since?: string | undefined; until?: string | undefined }): HistoryFilter {
  const types = typeList(q.types)
  if (types !== null) {
    if (types.size === 0) throw invalidRequest('types names no event type; leave it out to read every type')
    const unknown = [...types].filter((t) => !historyEventTypes.includes(t))
    if (unknown.length > 0) {
      const named = unknown
        .slice(0, 3)
        .map((t) => JSON.stringify(t))
        .join(', ')
      throw invalidRequest(`types: ${named} is not an event type of a job's history (${historyEventTypes.join(', ')})`)
    }
  }
  const since = q.since === undefined ? null : toInstant(q.since, 'since')
  const until = q.until === undefined ? null : toInstant(q.until, 'until')
  if (since !== null && until !== null && since > until) throw invalidRequest('since must not be after until')
  return { types, since, until }
}
