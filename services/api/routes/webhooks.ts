import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { BillingStateBlocked } from '../../../domain/errors.ts'
import { billingOf } from '../../../domain/project.ts'
import { webhookEventTypes, type EventFilter, type Webhook } from '../../../domain/webhook.ts'
import { checkWebhookUrl } from '../../webhooks/url-safety.ts'
import { WebhookService } from '../../webhooks/webhook-service.ts'
import type { ApiContext } from '../app.ts'
import { invalidRequest } from '../errors.ts'
import { clampLimit, decodeCursor, encodeCursor } from '../pagination.ts'
import { awaitOwnWrites, isoOrNull } from '../read-your-writes.ts'

/** `*`, or a list of the known event types (an unknown type is refused, so typos do not go silent). */
const events = z.union([
  z.literal('*'),
  z.array(z.enum(webhookEventTypes)).min(1).transform((list) => [...new Set(list)]),
])

const createBody = z.object({ url: z.string().min(1), events })
const patchBody = z.object({ url: z.string().min(1).optional(), events: events.optional(), is_active: z.boolean().optional() }).strict()
const idParams = z.object({ id: z.string().min(1) })

export function webhookView(w: Webhook | Record<string, unknown>) {
  const r = w as Record<string, unknown>
  const iso = isoOrNull
  return {
    id: r.id,
    url: r.url,
    // Read-model rows hold the filter as JSON text; the aggregate holds the value itself.
    events: typeof r.events === 'string' && r.events !== '*' ? JSON.parse(r.events) : r.events,
    is_active: r.is_active,
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
  }
}

/** The spec's limits on a subscription, checked after the schema: 400 `invalid_request`. */
async function checkSubscription(ctx: ApiContext, input: { url?: string | undefined; events?: EventFilter | undefined }): Promise<void> {
  if (input.events !== undefined && JSON.stringify(input.events).length > 1024) throw invalidRequest('body.events: at most 1024 characters')
  if (input.url !== undefined) {
    const verdict = await checkWebhookUrl(input.url, ctx.deps.config.webhookAllowHosts, ctx.deps.resolveHost)
    if (!verdict.ok) throw invalidRequest(`body.url: ${verdict.reason}`)
  }
}

/** The seven webhook routes of the spec. */
export function webhookRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps, jobs } = ctx
  const hooks = new WebhookService(deps)
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    // Spec: every webhook route answers 402 while the project's billing state is not active.
    app.addHook('preHandler', async (request) => {
      const state = billingOf(request.principal.project).state
      if (state !== 'active') throw new BillingStateBlocked(`the project's billing state is ${state}`)
    })

    app.get('/', async (request) => {
      const projectId = request.principal.projectId
      await awaitOwnWrites(ctx, projectId, undefined)
      const rows = await deps.sql`SELECT * FROM webhooks WHERE project_id = ${projectId} AND NOT deleted ORDER BY created_at, id LIMIT 1000`
      return { data: rows.map(webhookView) }
    })

    app.get('/:id', { schema: { params: idParams } }, async (request) => webhookView(await hooks.load(request.principal.projectId, request.params.id)))

    app.post('/', { schema: { body: createBody } }, async (request, reply) => {
      await checkSubscription(ctx, request.body)
      const { result, secret } = await hooks.create(request.principal.projectId, { url: request.body.url, events: request.body.events as EventFilter })
      jobs.noteWritten(request.principal.projectId, result.seq)
      const w = result.state!
      return reply.code(201).send({ id: w.id, url: w.url, events: w.events, secret, is_active: w.is_active, created_at: w.created_at })
    })

    app.patch('/:id', { schema: { params: idParams, body: patchBody } }, async (request) => {
      await hooks.load(request.principal.projectId, request.params.id)
      await checkSubscription(ctx, request.body)
      const result = await hooks.update(request.principal.projectId, request.params.id, request.body as { url?: string; events?: EventFilter; is_active?: boolean })
      jobs.noteWritten(request.principal.projectId, result.seq)
      return webhookView(result.state!)
    })

    app.post('/:id/rotate-secret', { schema: { params: idParams } }, async (request) => {
      const { result, secret } = await hooks.rotateSecret(request.principal.projectId, request.params.id)
      const w = result.state!
      return { id: w.id, secret, previous_secret_expires_at: w.previous_secret_expires_at, rotated_at: w.updated_at }
    })

    app.get('/:id/deliveries', { schema: { params: idParams, querystring: z.object({ limit: z.string().optional(), cursor: z.string().optional() }) } }, async (request) => {
      const projectId = request.principal.projectId
      await hooks.load(projectId, request.params.id)
      const limit = clampLimit(request.query.limit, 50, 1, 100)
      const after = request.query.cursor === undefined ? null : decodeCursor(request.query.cursor)
      const sql = deps.sql
      const rows = await sql<{ id: string; event_type: string; status: string; response_status: number | null; attempt: number; attempted_at: Date; created_at: Date }[]>`
        SELECT id, event_type, status, response_status, attempt, attempted_at, created_at FROM deliveries
        WHERE project_id = ${projectId} AND webhook_id = ${request.params.id}
          ${after ? sql`AND (created_at, id) < (${after.created_at}, ${after.id})` : sql``}
        ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`
      const page = rows.slice(0, limit)
      const data = page.map((r) => ({ id: r.id, event_type: r.event_type, status: r.status, response_status: r.response_status, attempt: Math.max(r.attempt, 1), attempted_at: isoOrNull(r.attempted_at) }))
      const last = page.at(-1)
      // Spec, Webhooks 4: next_cursor is omitted when there is nothing more.
      return rows.length > limit && last ? { data, has_more: true, next_cursor: encodeCursor({ created_at: last.created_at.toISOString(), id: last.id }) } : { data, has_more: false }
    })

    app.delete('/:id', { schema: { params: idParams } }, async (request, reply) => {
      const result = await hooks.delete(request.principal.projectId, request.params.id)
      jobs.noteWritten(request.principal.projectId, result.seq)
      return reply.code(204).send()
    })
  }
}
