import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { cursorText, limitText } from '../query-fields.ts'
import { BillingStateBlocked, InvalidState } from '../../../../domain/errors.ts'
import { billingOf } from '../../../../domain/project/index.ts'
import { deliveryStatuses, type Delivery } from '../../../../domain/delivery.ts'
import { maxWebhooksPerProject, webhookEventTypes, type EventFilter, type Webhook } from '../../../../domain/webhook.ts'
import { replayedTypes, replayModes } from '../../../../domain/webhook-replay.ts'
import { webhookDeliveries, type DeliveryEntry } from '../../../../projections/deliveries.ts'
import { webhookSubscriptions } from '../../../../projections/webhooks.ts'
import { checkWebhookUrl } from '../../../infrastructure/url-safety.ts'
import { OperationService } from '../../../use-cases/operations/operation-service.ts'
import { redeliver } from '../../../use-cases/webhooks/redelivery.ts'
import { WebhookReplays } from '../../../use-cases/webhooks/replay.ts'
import { WebhookService } from '../../../use-cases/webhooks/webhook-service.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest } from '../errors.ts'
import { errorResponses, instant, noContent, writeCodes } from '../openapi.ts'
import { clampLimit, decodeCursor, encodeCursor } from '../pagination.ts'
import { awaitOwnWrites, isoOrNull } from '../read-your-writes.ts'
import { isStorableInstant } from '../storable.ts'
import { boundedString, storableText } from '../text-fields.ts'

/**
 * Spec, Webhooks 1: the `events` value is at most 1024 characters, measured on the value as
 * sent: the length of its compact JSON text (`["job.created","job.failed"]` is 28), duplicates
 * included. `checkEventsAsSent` measures it before the schema runs, so an over-long list is
 * refused before any of its elements is checked and dropping its repeats cannot bring it under.
 */
const maxEventsLength = 1024

/** `*`, or a list of the known event types (an unknown type is refused, so typos do not go silent). */
const events = z
  .union([
    z.literal('*'),
    z
      .array(z.enum(webhookEventTypes))
      .min(1)
      .transform((list) => [...new Set(list)]),
  ])
  .describe(`\`*\` or a list of event types; at most ${maxEventsLength} characters as compact JSON, duplicates included (they are then dropped)`)

const url = storableText(1, 2048).describe('absolute http(s) URL resolving only to public addresses')
const createBody = z.object({ url, events })
const patchBody = z.object({ url: url.optional(), events: events.optional(), is_active: z.boolean().optional() }).strict()
// The router passes path parameters of up to 2048 characters; any id not of the `whk_` form is a 404.
const idParams = z.object({ id: boundedString(2048, 1) })
const deliveryParams = z.object({ id: boundedString(2048, 1), deliveryId: boundedString(2048, 1) })

const eventFilter = z.union([z.literal('*'), z.array(z.enum(webhookEventTypes))]).describe('`*` (every type) or a list of event types')

/** A subscription as reads show it: never the secret. */
export const webhookSchema = z
  .strictObject({
    id: z.string().describe('`whk_…`'),
    url: z.string(),
    events: eventFilter,
    is_active: z.boolean(),
    created_at: instant,
    updated_at: instant.nullable(),
  })
  .meta({ id: 'Webhook' })

export function webhookView(w: Webhook | Record<string, unknown>): z.output<typeof webhookSchema> {
  const r = w as Record<string, unknown>
  const iso = isoOrNull
  return {
    id: r.id as string,
    url: r.url as string,
    // Read-model rows hold the filter as JSON text; the aggregate holds the value itself.
    events: (typeof r.events === 'string' && r.events !== '*' ? JSON.parse(r.events) : r.events) as EventFilter,
    is_active: r.is_active as boolean,
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at),
  }
}

const delivery = z
  .strictObject({
    id: z.string().describe('`del_…`'),
    event_id: z.string().describe('the event delivered (`evt_…`): the same on every delivery of it, redeliveries included'),
    event_type: z.string(),
    status: z.enum(deliveryStatuses),
    response_status: z.number().int().nullable().describe("the receiver's HTTP status; null when the request could not be sent"),
    attempt: z.number().int().describe('1-based'),
    attempted_at: instant.nullable().describe('the latest attempt; for a pending delivery, its creation time'),
    redelivery_of: z
      .string()
      .nullable()
      .describe('the earlier delivery of the same event that this one repeats (a redelivery, or a replay of it); null otherwise'),
    operation_id: z.string().nullable().describe('the replay (`op_…`) that made this delivery; null otherwise'),
  })
  .meta({ id: 'WebhookDelivery' })

/** A delivery as the list and the redeliver answer show it, from its row or its state. */
function deliveryView(d: DeliveryEntry | Delivery): z.output<typeof delivery> {
  return {
    id: d.id,
    event_id: d.event_id,
    event_type: d.event_type,
    status: d.status,
    response_status: d.response_status,
    attempt: Math.max(d.attempt, 1),
    attempted_at: isoOrNull(d.attempted_at),
    redelivery_of: d.redelivery_of,
    operation_id: d.operation_id,
  }
}

/** An RFC 3339 date-time of a query or body field, as an ISO instant; 400 `invalid_request` naming the field otherwise. */
function instantOf(field: string, raw: string): string {
  const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i
  const at = Date.parse(raw)
  if (!rfc3339.test(raw) || Number.isNaN(at) || !isStorableInstant(at))
    throw invalidRequest(`${field} must be an RFC 3339 date-time, e.g. 2026-11-26T10:00:00Z`)
  return new Date(at).toISOString()
}

/**
 * Spec, Webhooks: every route answers 402 while the project's billing state is not active. Every
 * route, reads included, needs the role admin: a subscription's URL often carries a credential.
 */
const webhookCodes = ['billing_state_blocked', 'forbidden']
const tags = ['Webhooks']

const listSchema = {
  summary: 'List subscriptions',
  tags,
  response: { 200: z.strictObject({ data: z.array(webhookSchema) }), ...errorResponses(...webhookCodes) },
}

const readSchema = {
  summary: 'Read a subscription',
  tags,
  params: idParams,
  response: { 200: webhookSchema, ...errorResponses(...webhookCodes, 'webhook_not_found') },
}

const createSchema = {
  summary: 'Subscribe a URL to events',
  description:
    'The URL must be absolute http(s) and resolve only to public addresses. The answer shows the signing secret, once. ' +
    `A project has at most ${maxWebhooksPerProject} subscriptions, active or not: one more is 409 \`webhook_limit_reached\`.`,
  tags,
  body: createBody,
  response: {
    201: z.strictObject({
      id: z.string(),
      url: z.string(),
      events: eventFilter,
      secret: z.string().describe('`whsec_…`; shown only here and on rotation'),
      is_active: z.boolean(),
      created_at: instant,
    }),
    ...errorResponses(...writeCodes, ...webhookCodes, 'webhook_limit_reached'),
  },
}

const updateSchema = {
  summary: 'Change a subscription',
  tags,
  params: idParams,
  body: patchBody,
  response: { 200: webhookSchema, ...errorResponses(...writeCodes, ...webhookCodes, 'webhook_not_found') },
}

const rotateSchema = {
  summary: "Rotate a subscription's signing secret",
  description: 'The previous secret stays valid for 24 hours.',
  tags,
  params: idParams,
  response: {
    200: z.strictObject({
      id: z.string(),
      secret: z.string(),
      previous_secret_expires_at: instant.nullable().describe('rotated_at plus 24 hours'),
      rotated_at: instant.nullable(),
    }),
    ...errorResponses(...writeCodes, ...webhookCodes, 'webhook_not_found'),
  },
}

const deliveriesQuery = z.object({
  limit: limitText,
  cursor: cursorText,
  status: z.enum(deliveryStatuses).optional().describe('only deliveries in this status'),
  event_type: z.enum(webhookEventTypes).optional().describe('only deliveries of this event type'),
  since: boundedString(100).optional().describe('RFC 3339: only deliveries created at or after it'),
  until: boundedString(100).optional().describe('RFC 3339: only deliveries created before it'),
})

const deliveriesSchema = {
  summary: "A subscription's deliveries, newest first",
  description:
    '`limit` is clamped to 1–100 (default 50). `next_cursor` is omitted when `has_more` is false. ' +
    '`status`, `event_type`, `since` and `until` keep only the deliveries they match (pass the same on every page).',
  tags,
  params: idParams,
  querystring: deliveriesQuery,
  response: {
    200: z.strictObject({ data: z.array(delivery), has_more: z.boolean(), next_cursor: z.string().optional() }),
    ...errorResponses(...webhookCodes, 'webhook_not_found', 'invalid_cursor'),
  },
}

const redeliverSchema = {
  summary: "Send a delivery's event again",
  description:
    'A new delivery of the same event (the same event id and body) to the subscription, signed with its current secret when sent, ' +
    'with `X-Jobsvc-Redelivery: <the delivery it repeats>`, tried by the normal policy. ' +
    '409 `invalid_state` while the delivery is still pending, while the subscription is inactive, or once retention removed the event.',
  tags,
  params: deliveryParams,
  response: { 202: delivery, ...errorResponses(...writeCodes, ...webhookCodes, 'webhook_not_found', 'delivery_not_found', 'invalid_state') },
}

const replayBody = z
  .object({
    since: boundedString(100).describe("RFC 3339: events from this time (the events' own)"),
    until: boundedString(100).optional().describe('RFC 3339: events up to this time (default: now)'),
    event_types: z.array(z.enum(webhookEventTypes)).min(1).max(webhookEventTypes.length).optional().describe("default: the subscription's types"),
    mode: z
      .enum(replayModes)
      .describe('`failed`: events whose delivery ended failed; `missing`: events never delivered to the subscription; `all`: every event'),
    dry_run: z.boolean().optional().describe('count only'),
  })
  .strict()

const replaySchema = {
  summary: "Replay a subscription's events from the log",
  description:
    "Sends the subscription's webhook events of a time range again, read from the log: those whose delivery ended failed, those it never " +
    "received (events from before it existed or outside its former filter included), or all. `event_types` must be among the subscription's. " +
    'With `dry_run`, 200 with the count; otherwise 202 with an operation (`GET /jobsvc/v1/operations/{id}`) that sends them paced per endpoint ' +
    '(`webhook_replay_requests_per_second`, 10 by default) through the same delivery slots as live deliveries. 409 `invalid_state` on an inactive subscription.',
  tags,
  params: idParams,
  body: replayBody,
  response: {
    200: z.strictObject({ matched: z.number().int().describe('events the replay would send') }),
    202: z.strictObject({ operation_id: z.string().describe('`op_…`'), matched: z.number().int().describe('events the replay sends') }),
    ...errorResponses(...writeCodes, ...webhookCodes, 'webhook_not_found', 'invalid_state'),
  },
}

const deleteSchema = {
  summary: 'Delete a subscription',
  description: 'Deliveries already pending still go out.',
  tags,
  params: idParams,
  response: { 204: noContent('Deleted'), ...errorResponses(...writeCodes, ...webhookCodes, 'webhook_not_found') },
}

/** `events` over `maxEventsLength` as sent: 400 `invalid_request`, before the schema sees it. */
async function checkEventsAsSent(request: FastifyRequest): Promise<void> {
  const body = request.body
  if (typeof body !== 'object' || body === null || !('events' in body)) return
  const text = JSON.stringify(body.events)
  if (text !== undefined && text.length > maxEventsLength) {
    throw invalidRequest(`body.events: at most ${maxEventsLength} characters as sent (its JSON text, duplicates included)`)
  }
}

/** The URL's safety rules, checked after the schema: 400 `invalid_request`. */
async function checkSubscription(ctx: Pick<ApiContext, 'deps'>, input: { url?: string | undefined }): Promise<void> {
  if (input.url !== undefined) {
    const verdict = await checkWebhookUrl(
      input.url,
      ctx.deps.config.webhookAllowHosts,
      ctx.deps.resolveHost,
      undefined,
      ctx.deps.config.webhookAllowLoopback,
    )
    if (!verdict.ok) throw invalidRequest(`body.url: ${verdict.reason}`)
  }
}

/** The seven webhook routes of the spec, and (extensions) redelivery and replay. */
export function webhookRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps, jobs } = ctx
  const hooks = new WebhookService(deps)
  const replays = new WebhookReplays(deps, new OperationService(deps))
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    // Spec: every webhook route answers 402 while the project's billing state is not active.
    app.addHook('preHandler', async (request) => {
      const state = billingOf(request.principal.project).state
      if (state !== 'active') throw new BillingStateBlocked(`the project's billing state is ${state}`)
    })

    app.get('/', { schema: listSchema, config: { role: 'admin' } }, async (request) => {
      const projectId = request.principal.projectId
      await awaitOwnWrites(ctx, projectId, undefined)
      const rows = await webhookSubscriptions.ofProject(deps.sql, projectId)
      return { data: rows.map(webhookView) }
    })

    app.get('/:id', { schema: readSchema, config: { role: 'admin' } }, async (request) =>
      webhookView(await hooks.load(request.principal.projectId, request.params.id)),
    )

    app.post('/', { schema: createSchema, config: { role: 'admin' }, preValidation: checkEventsAsSent }, async (request, reply) => {
      await checkSubscription(ctx, request.body)
      const { result, secret } = await hooks.create(
        request.principal.projectId,
        { url: request.body.url, events: request.body.events as EventFilter },
        request.principal.actor,
      )
      jobs.noteWritten(request.principal.projectId, result.seq)
      const w = result.state!
      return reply.code(201).send({ id: w.id, url: w.url, events: w.events, secret, is_active: w.is_active, created_at: w.created_at })
    })

    app.patch('/:id', { schema: updateSchema, config: { role: 'admin' }, preValidation: checkEventsAsSent }, async (request) => {
      await hooks.load(request.principal.projectId, request.params.id)
      await checkSubscription(ctx, request.body)
      const result = await hooks.update(
        request.principal.projectId,
        request.params.id,
        request.body as { url?: string; events?: EventFilter; is_active?: boolean },
        request.principal.actor,
      )
      jobs.noteWritten(request.principal.projectId, result.seq)
      return webhookView(result.state!)
    })

    app.post('/:id/rotate-secret', { schema: rotateSchema, config: { role: 'admin' } }, async (request) => {
      const { result, secret } = await hooks.rotateSecret(request.principal.projectId, request.params.id, request.principal.actor)
      const w = result.state!
      return { id: w.id, secret, previous_secret_expires_at: w.previous_secret_expires_at, rotated_at: w.updated_at }
    })

    app.get('/:id/deliveries', { schema: deliveriesSchema, config: { role: 'admin' } }, async (request) => {
      const projectId = request.principal.projectId
      const q = request.query
      await hooks.load(projectId, request.params.id)
      const limit = clampLimit(q.limit, 50, 1, 100)
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor)
      const since = q.since === undefined ? null : instantOf('since', q.since)
      const until = q.until === undefined ? null : instantOf('until', q.until)
      if (since !== null && until !== null && since >= until) throw invalidRequest('until must be after since')
      await awaitOwnWrites(ctx, projectId, undefined)
      const { rows: page, hasMore } = await webhookDeliveries.page(deps.sql, projectId, request.params.id, after, limit, {
        status: q.status ?? null,
        eventType: q.event_type ?? null,
        since,
        until,
      })
      const data = page.map(deliveryView)
      const last = page.at(-1)
      // Spec, Webhooks 4: next_cursor is omitted when there is nothing more.
      return hasMore && last
        ? { data, has_more: true, next_cursor: encodeCursor({ created_at: last.created_at.toISOString(), id: last.id }) }
        : { data, has_more: false }
    })

    app.post('/:id/deliveries/:deliveryId/redeliver', { schema: redeliverSchema, config: { role: 'admin' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const hook = await hooks.load(projectId, request.params.id)
      const result = await redeliver(deps, projectId, hook, request.params.deliveryId, request.principal.actor)
      jobs.noteWritten(projectId, result.seq)
      return reply.code(202).send(deliveryView(result.state!))
    })

    app.post('/:id/replay', { schema: replaySchema, config: { role: 'admin' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const body = request.body
      const hook = await hooks.load(projectId, request.params.id)
      const since = instantOf('body.since', body.since)
      const until = body.until === undefined ? null : instantOf('body.until', body.until)
      if (until !== null && until <= since) throw invalidRequest('body.until must be after body.since')
      const chosen = replayedTypes(hook.events, body.event_types ?? null)
      if ('refused' in chosen) throw invalidRequest(`body.event_types: ${chosen.refused} is not among the subscription's events`)
      if (!hook.is_active) throw new InvalidState('the webhook subscription is inactive: activate it to replay')
      // Counted as of the log's end now, once the deliveries read model has reached it (bounded wait).
      const throughSeq = await deps.store.lastSequence()
      await ctx.watcher.waitFor(throughSeq, deps.config.tunables.read_your_writes_wait_ms)
      const asked = { mode: body.mode, since, until, types: chosen.types }
      const { params, matched } = await replays.count(projectId, hook, asked, throughSeq)
      if (body.dry_run === true) return reply.code(200).send({ matched })
      const result = await replays.start(projectId, params, matched, request.principal.actor)
      jobs.noteWritten(projectId, result.seq)
      return reply.code(202).send({ operation_id: result.state!.id, matched })
    })

    app.delete('/:id', { schema: deleteSchema, config: { role: 'admin' } }, async (request, reply) => {
      const result = await hooks.delete(request.principal.projectId, request.params.id, request.principal.actor)
      jobs.noteWritten(request.principal.projectId, result.seq)
      return reply.code(204).send()
    })
  }
}
