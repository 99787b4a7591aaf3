import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { consumerNamePattern } from '../../../../domain/event-consumer.ts'
import { isFeedEventType } from '../../../../domain/event-feed.ts'
import { maxJobTypeLength, maxQueueNameLength } from '../../../../domain/job-options.ts'
import { EventConsumers, type ConsumerStart } from '../../../use-cases/events/event-consumers.ts'
import { untilClientGone } from '../client-gone.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest, rateLimitExceeded } from '../errors.ts'
import { errorResponses, instant, noContent, writeCodes } from '../openapi.ts'
import { boundedString, storableText } from '../text-fields.ts'
import { feedEvent } from './events.ts'

/** A poll: 1–1,000 events, 100 unless asked; a long poll of up to 30 s. */
const pollLimit = { fallback: 100, max: 1000 }
const maxWaitSeconds = 30
const retryAfterMs = 5_000

const nameParams = z.object({ name: boundedString(64) })

const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i

const startSchema = z
  .union([z.enum(['earliest', 'latest']), z.strictObject({ after: boundedString(200) }), z.strictObject({ from_time: boundedString(100) })])
  .describe('`earliest` (the oldest event the log holds), `latest` (what is appended from now on), `{after: cursor}` or `{from_time}`')

const consumerView = z
  .strictObject({
    name: z.string(),
    types: z.array(z.string()).nullable(),
    queue: z.string().nullable(),
    job_type: z.string().nullable(),
    ack_wait_seconds: z.number().int(),
    position: z.string().describe('cursor through which every event was committed: where the consumer goes on'),
    delivered: z.string().describe('cursor through which events were handed to polls'),
    lease_until: instant.nullable().describe("when the oldest poll's range still out goes to the next poll unless committed; null when none is out"),
    outstanding: z.number().int().describe("polls' ranges handed out and not committed"),
    created_at: instant,
    updated_at: instant,
  })
  .meta({ id: 'EventConsumer' })

const consumerWithLag = consumerView
  .extend({
    lag_events: z
      .number()
      .int()
      .describe("messages on the consumer's subjects after its position (an upper bound of its events when types or queue narrow it)"),
    lag_seconds: z.number().int().describe('seconds since the log stored the oldest of them; 0 when none'),
  })
  .meta({ id: 'EventConsumerWithLag' })

const createBody = z.strictObject({
  name: boundedString(64).describe('1–64 of A-Z a-z 0-9 _ -'),
  types: z.array(boundedString(64)).max(100).nullable().optional(),
  queue: storableText(1, maxQueueNameLength).nullable().optional(),
  job_type: storableText(1, maxJobTypeLength).nullable().optional(),
  ack_wait_seconds: z
    .number()
    .int()
    .min(5)
    .max(3600)
    .optional()
    .describe('how long a poll holds its events before they go to the next poll (default 30)'),
  start: startSchema.optional().describe('default `latest`'),
})

const pollBody = z
  .strictObject({
    limit: z.number().int().min(1).max(pollLimit.max).optional(),
    wait: z.number().min(0).max(maxWaitSeconds).optional().describe('seconds to wait for a first event when none is there yet'),
  })
  .optional()

const errorsOfConsumer = ['event_consumer_not_found', 'invalid_request', 'cursor_expired'] as const

const schemas = {
  create: {
    summary: 'Create a named consumer of the event feed',
    description:
      "The service keeps its position, so several workers can share it. Needs `admin`. The plan bounds a project's consumers (`max_event_consumers`; one more is 409 `event_consumer_limit_reached`); a name in use is 409 `event_consumer_exists`.",
    tags: ['Events'],
    body: createBody,
    response: {
      201: consumerView,
      ...errorResponses(...writeCodes, 'invalid_cursor', 'cursor_expired', 'event_consumer_exists', 'event_consumer_limit_reached'),
    },
  },
  list: {
    summary: "The project's named event consumers, by name",
    tags: ['Events'],
    response: { 200: z.strictObject({ data: z.array(consumerView) }), ...errorResponses() },
  },
  read: {
    summary: 'A named event consumer, with its lag',
    tags: ['Events'],
    params: nameParams,
    response: { 200: consumerWithLag, ...errorResponses('event_consumer_not_found') },
  },
  poll: {
    summary: "The consumer's next events, held for this poll",
    description:
      'At-least-once: the events are held for this poll for `ack_wait_seconds`; commit `ack_cursor` once they are handled. Several polls of one consumer never get the same events unless a poll did not commit in time, when its whole range goes to the next poll. A position retention has overtaken answers 410 `cursor_expired` (seek to `oldest_cursor`).',
    tags: ['Events'],
    params: nameParams,
    body: pollBody,
    response: {
      200: z.strictObject({
        data: z.array(feedEvent),
        ack_cursor: z.string().describe('commit it once the events are handled'),
        has_more: z.boolean(),
      }),
      ...errorResponses(...writeCodes, ...errorsOfConsumer, 'rate_limit_exceeded'),
    },
  },
  commit: {
    summary: "Commit a consumer's position",
    description:
      "Acknowledges the events of the poll that answered this `ack_cursor`. The consumer's `position` moves over every poll's range acknowledged without a gap, so a fast poller's commit never covers a slower one's events. A range sent out again after its lease keeps its `ack_cursor`: the first of its polls to commit acknowledges it, the other's commit changes nothing. A cursor that is not the `ack_cursor` of a range still out (after a seek, or any other cursor) is 409 `invalid_state`.",
    tags: ['Events'],
    params: nameParams,
    body: z.strictObject({ cursor: boundedString(200) }),
    response: { 200: consumerView, ...errorResponses(...writeCodes, ...errorsOfConsumer, 'invalid_cursor', 'invalid_state') },
  },
  seek: {
    summary: 'Move a consumer',
    description: 'Both positions move: the next poll reads after `after`, or from the first event at or after `from_time`.',
    tags: ['Events'],
    params: nameParams,
    body: z.union([z.strictObject({ after: boundedString(200) }), z.strictObject({ from_time: boundedString(100) })]),
    response: { 200: consumerView, ...errorResponses(...writeCodes, ...errorsOfConsumer, 'invalid_cursor') },
  },
  remove: {
    summary: 'Delete a named event consumer',
    tags: ['Events'],
    params: nameParams,
    response: { 204: noContent('deleted'), ...errorResponses(...writeCodes, 'event_consumer_not_found') },
  },
}

function checkName(name: string): string {
  if (!consumerNamePattern.test(name)) throw invalidRequest('name must be 1 to 64 of A-Z a-z 0-9 _ -')
  return name
}

function checkTypes(types: string[] | null | undefined): string[] | null {
  if (types === undefined || types === null || types.length === 0) return null
  const unknown = types.filter((t) => !isFeedEventType(t))
  if (unknown.length > 0) throw invalidRequest(`types: ${JSON.stringify(unknown[0])} is not an event type of the feed (docs/event-log.md)`)
  return [...new Set(types)]
}

function checkStart<S extends ConsumerStart>(start: S): S {
  if (typeof start === 'object' && 'from_time' in start) {
    if (!rfc3339.test(start.from_time) || Number.isNaN(Date.parse(start.from_time))) throw invalidRequest('from_time must be an RFC 3339 date-time')
    return { from_time: new Date(Date.parse(start.from_time)).toISOString() } as S
  }
  return start
}

/** `/jobsvc/v1/event-consumers`: named consumers of the project's event feed (docs/event-log.md, "Named consumers"). */
export function eventConsumerRoutes(ctx: Pick<ApiContext, 'deps' | 'streams' | 'stopping' | 'feed'>): FastifyPluginAsync {
  const consumers = new EventConsumers(ctx.deps, ctx.feed)
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.post('/', { schema: schemas.create, config: { role: 'admin' } }, async (request, reply) => {
      const b = request.body
      const view = await consumers.create(
        request.principal.projectId,
        {
          name: checkName(b.name),
          types: checkTypes(b.types),
          queue: b.queue ?? null,
          job_type: b.job_type ?? null,
          ...(b.ack_wait_seconds === undefined ? {} : { ack_wait_seconds: b.ack_wait_seconds }),
          start: checkStart(b.start ?? 'latest'),
        },
        ctx.deps.config.plans[request.principal.project.plan],
      )
      return reply.code(201).send(view)
    })
    app.get('/', { schema: schemas.list, config: { role: 'admin' } }, async (request) => ({
      data: await consumers.list(request.principal.projectId),
    }))
    app.get('/:name', { schema: schemas.read, config: { role: 'admin' } }, async (request) =>
      consumers.get(request.principal.projectId, checkName(request.params.name)),
    )
    app.post('/:name/poll', { schema: schemas.poll, config: { role: 'admin' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const waitMs = Math.round((request.body?.wait ?? 0) * 1000)
      const release = waitMs > 0 ? ctx.streams.tryAcquire(projectId) : () => undefined
      if (release === null)
        throw rateLimitExceeded(
          retryAfterMs,
          `this project already has ${ctx.streams.max} event streams or long polls open on this server; retry after Retry-After`,
        )
      const gone = untilClientGone(reply, ctx.stopping)
      try {
        const poll = await consumers.poll(projectId, checkName(request.params.name), request.body?.limit ?? pollLimit.fallback, waitMs, gone.signal)
        return { data: poll.events, ack_cursor: poll.ackCursor, has_more: poll.hasMore }
      } finally {
        gone.dispose()
        release()
      }
    })
    app.post('/:name/commit', { schema: schemas.commit, config: { role: 'admin' } }, async (request) =>
      consumers.commit(request.principal.projectId, checkName(request.params.name), request.body.cursor),
    )
    app.post('/:name/seek', { schema: schemas.seek, config: { role: 'admin' } }, async (request) =>
      consumers.seek(request.principal.projectId, checkName(request.params.name), checkStart(request.body)),
    )
    app.delete('/:name', { schema: schemas.remove, config: { role: 'admin' } }, async (request, reply) => {
      await consumers.delete(request.principal.projectId, checkName(request.params.name))
      return reply.code(204).send()
    })
  }
}
