import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { feedAggregates, feedAggregatesBelowAdmin, isFeedEventType, type FeedAggregate, type FeedFilter } from '../../../../domain/event-feed.ts'
import { isSubjectToken } from '../../../../streams/names.ts'
import type { FeedStart } from '../../../use-cases/events/event-feed.ts'
import { hasRoleAtLeast } from '../api-key-directory.ts'
import { untilClientGone } from '../client-gone.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest, rateLimitExceeded } from '../errors.ts'
import { feedFormatOf, streamFeed, feedKeepAliveMs } from '../event-feed-stream.ts'
import { errorResponses, instant } from '../openapi.ts'
import { parseLimit } from '../pagination.ts'
import { cursorText, jobTypeFilter, limitText, queueFilter, typeList } from '../query-fields.ts'
import { boundedString } from '../text-fields.ts'

/** A page of the feed: 1–1,000 events, 100 unless asked. */
const feedLimit = { fallback: 100, max: 1000 }

/** The longest long poll (`wait`, seconds). */
const maxWaitSeconds = 30

/** What a stream or long poll refused for its project's number of open ones is told to wait. */
const retryAfterMs = 5_000

export const feedEvent = z
  .strictObject({
    id: z.string().describe('the event id (`evt_` + ULID); the same in webhooks and the job history'),
    cursor: z.string().describe('opaque: pass as `after` (or `Last-Event-ID`) to resume after this event'),
    type: z.string().describe('one of the types of the event catalogue (docs/event-log.md)'),
    occurred_at: instant,
    project_id: z.string(),
    aggregate: z.enum(feedAggregates).describe("what the event is about; `progress` is a job's progress reports, keyed by the job id"),
    aggregate_id: z.string(),
    data: z.unknown().describe("the event's data, without digests or sealed secrets"),
    state: z.unknown().describe('the aggregate after the event (null for a progress report)'),
    leaf_index: z
      .number()
      .int()
      .nullable()
      .describe("its place in the project's Merkle log (docs/audit.md); null only while the audit log has not taken it in yet"),
  })
  .meta({ id: 'FeedEvent' })

const feedQuery = z.object({
  after: cursorText.describe('a `cursor` or `next_cursor` from this feed: the events after it'),
  from_time: boundedString(100).optional().describe('RFC 3339: from the first event at or after it (instead of `after`)'),
  types: boundedString(4000).optional().describe('comma-separated event types, e.g. `job_created,job_succeeded`'),
  queue: queueFilter,
  job_type: jobTypeFilter,
  job_id: boundedString(100).optional(),
  limit: limitText,
  wait: boundedString(20).optional().describe(`seconds (0–${maxWaitSeconds}) to wait for a first event when none is stored yet`),
})

const feedSchema = {
  summary: "The project's events, oldest first (a resumable feed)",
  description: [
    `Every event of the project's jobs, progress reports, recurring schedules, alerts, webhooks and deliveries, and of the project itself, in the log's order, each with the aggregate's state after it. \`limit\` 1–${feedLimit.max} (default ${feedLimit.fallback}; outside: \`invalid_limit\`).`,
    '`next_cursor` is never null: store it and pass it as `after` to resume exactly; with filters it still moves past the events they skipped.',
    'A cursor from before what retention removed answers 410 `cursor_expired` with `oldest_cursor`; a cursor this project was not given, 400 `invalid_cursor`.',
    '`Accept: text/event-stream` follows the feed live (`id:` is the cursor, `Last-Event-ID` resumes, a comment with the cursor every 15 s); `Accept: application/x-ndjson` streams to the current end, then a last line `{next_cursor, has_more}`, and closes.',
    "A session below `admin` reads the events of jobs, progress, recurring schedules and alerts only. Streams and long polls share the project's `max_event_streams_per_project` per API process (429 `rate_limit_exceeded` past it).",
  ].join('\n\n'),
  tags: ['Events'],
  querystring: feedQuery,
  response: {
    200: z.strictObject({
      data: z.array(feedEvent),
      next_cursor: z.string().describe('where to resume: never null'),
      has_more: z.boolean().describe('more events may be read at once'),
    }),
    ...errorResponses('invalid_request', 'invalid_limit', 'invalid_cursor', 'cursor_expired', 'rate_limit_exceeded'),
  },
}

type FeedQuery = z.infer<typeof feedQuery>

/** The query's filter, for a caller of this role: each value checked, with the envelope's codes. */
function filterOf(q: FeedQuery, readsEverything: boolean): FeedFilter {
  const types = typeList(q.types)
  if (types !== null) {
    const unknown = [...types].filter((t) => !isFeedEventType(t))
    if (unknown.length > 0)
      throw invalidRequest(
        `types: ${unknown
          .slice(0, 3)
          .map((t) => JSON.stringify(t))
          .join(', ')} is not an event type of the feed (docs/event-log.md)`,
      )
  }
  if (q.job_id !== undefined && !isSubjectToken(q.job_id)) throw invalidRequest('job_id is not a job id')
  const aggregates: readonly FeedAggregate[] = readsEverything ? feedAggregates : feedAggregatesBelowAdmin
  return {
    types,
    queue: q.queue === undefined || q.queue === '' ? null : q.queue,
    jobType: q.job_type === undefined || q.job_type === '' ? null : q.job_type,
    jobId: q.job_id ?? null,
    aggregates: new Set(aggregates),
  }
}

/** Where to start: `Last-Event-ID` (a stream's resume), `after`, `from_time`, or the oldest event. */
function startOf(q: FeedQuery, lastEventId: string | undefined): FeedStart {
  const after = lastEventId ?? q.after
  if (after !== undefined && after !== '' && q.from_time !== undefined) throw invalidRequest('pass either after or from_time, not both')
  if (after !== undefined && after !== '') return { after }
  if (q.from_time === undefined) return null
  const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i
  const t = Date.parse(q.from_time)
  if (!rfc3339.test(q.from_time) || Number.isNaN(t)) throw invalidRequest('from_time must be an RFC 3339 date-time, e.g. 2026-11-26T10:00:00Z')
  return { fromTime: new Date(t).toISOString() }
}

function waitMsOf(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 0
  const seconds = /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : Number.NaN
  if (!(seconds >= 0 && seconds <= maxWaitSeconds)) throw invalidRequest(`wait must be a number of seconds from 0 to ${maxWaitSeconds}`)
  return Math.round(seconds * 1000)
}

/** `GET /jobsvc/v1/events`: the project's event feed (docs/event-log.md, "The event feed"). */
export function eventRoutes(ctx: Pick<ApiContext, 'streams' | 'stopping' | 'feed'>): FastifyPluginAsync {
  const feed = ctx.feed
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.get('/', { schema: feedSchema, config: { role: 'viewer' } }, async (request, reply) => {
      const q = request.query
      const projectId = request.principal.projectId
      const format = feedFormatOf(request.headers.accept)
      const limit = parseLimit(q.limit, feedLimit.fallback, 1, feedLimit.max)
      const waitMs = waitMsOf(q.wait)
      const filter = filterOf(q, hasRoleAtLeast(request.principal.role, 'admin'))
      const lastEventId = format === 'sse' ? headerValue(request.headers['last-event-id']) : undefined
      const start = startOf(q, lastEventId)
      // A stream or a long poll holds a consumer on the log: each takes one of the project's slots.
      const holds = format !== 'json' || waitMs > 0
      const release = holds ? ctx.streams.tryAcquire(projectId) : () => undefined
      if (release === null) {
        throw rateLimitExceeded(
          retryAfterMs,
          `this project already has ${ctx.streams.max} event streams or long polls open on this server; retry after Retry-After`,
        )
      }
      if (format !== 'json') {
        let reader
        try {
          reader = await feed.open(projectId, start, filter)
        } catch (err) {
          release()
          throw err
        }
        return streamFeed({ request, reply, reader, format, release, stopping: ctx.stopping, keepAliveMs: feedKeepAliveMs })
      }
      const gone = untilClientGone(reply, ctx.stopping)
      try {
        const page = await feed.page(projectId, start, filter, limit, waitMs, gone.signal)
        return { data: page.events, next_cursor: page.nextCursor, has_more: page.hasMore }
      } finally {
        gone.dispose()
        release()
      }
    })
  }
}

function headerValue(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value
  return v === undefined || v === '' ? undefined : v
}
