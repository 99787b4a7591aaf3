import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { alertKinds, type Alert, type AlertKind } from '../../../domain/alert.ts'
import { commandAlert, createAlert, loadAlert } from '../../alerts/alert-service.ts'
import type { ApiContext } from '../app.ts'
import { isStorableText, unstorableTextMessage } from '../storable.ts'
import { isoOrNull } from '../read-your-writes.ts'

const text = (min: number, max: number) => z.string().min(min).max(max).refine(isStorableText, unstorableTextMessage)
const emailAddress = z.string().max(320).regex(/^[^\s@<>()[\]\\,;:"]+@[^\s@<>()[\]\\,;:"]+\.[^\s@<>()[\]\\,;:"]+$/, 'must be an e-mail address')

/** The settings of an alert; POST and PUT take the same body (PUT replaces every setting). */
const alertBody = z.object({
  name: text(1, 100),
  kind: z.enum(alertKinds as [AlertKind, ...AlertKind[]]),
  queue: text(1, 100).nullish(),
  threshold: z.number().int().min(0).max(1_000_000_000),
  window_minutes: z.number().int().min(1).max(1440).nullish(),
  email: z.array(emailAddress).max(10).nullish(),
  webhook: z.boolean().nullish(),
  enabled: z.boolean().nullish(),
})

const idParams = z.object({ id: z.string().min(1) })

function settingsOf(body: z.infer<typeof alertBody>) {
  return {
    name: body.name,
    kind: body.kind,
    queue: body.queue ?? null,
    threshold: body.threshold,
    window_minutes: body.window_minutes ?? 60,
    email: body.email ?? [],
    webhook: body.webhook ?? false,
    enabled: body.enabled ?? true,
  }
}

export function alertView(a: Alert | Record<string, unknown>) {
  const r = a as Record<string, unknown>
  const iso = isoOrNull
  return {
    id: r.id,
    name: r.name,
    kind: r.kind,
    queue: r.queue ?? null,
    threshold: Number(r.threshold),
    window_minutes: r.window_minutes,
    email: r.email,
    webhook: r.webhook,
    enabled: r.enabled,
    status: r.status,
    last_value: r.last_value ?? null,
    last_triggered_at: iso(r.last_triggered_at),
    last_resolved_at: iso(r.last_resolved_at),
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
  }
}

/** `/jobsvc/v1/alerts` and `/alerts/{id}` (README, "Alerts"). */
export function alertRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get('/', async (request) => {
      const rows = await deps.sql`SELECT * FROM alerts WHERE project_id = ${request.principal.projectId} AND NOT deleted ORDER BY created_at, id LIMIT 1000`
      return { data: rows.map(alertView) }
    })

    app.post('/', { schema: { body: alertBody } }, async (request, reply) => {
      const result = await createAlert(deps, request.principal.projectId, settingsOf(request.body))
      return reply.code(201).header('Location', `/jobsvc/v1/alerts/${result.state!.id}`).header('X-Event-Seq', String(result.seq)).send(alertView(result.state!))
    })

    app.get('/:id', { schema: { params: idParams } }, async (request) => alertView(await loadAlert(deps, request.principal.projectId, request.params.id)))

    app.put('/:id', { schema: { params: idParams, body: alertBody } }, async (request, reply) => {
      const result = await commandAlert(deps, request.principal.projectId, request.params.id, {
        type: 'update_alert',
        data: settingsOf(request.body),
        meta: { now: deps.now().toISOString() },
      })
      return reply.header('X-Event-Seq', String(result.seq)).send(alertView(result.state!))
    })

    app.delete('/:id', { schema: { params: idParams } }, async (request, reply) => {
      const result = await commandAlert(deps, request.principal.projectId, request.params.id, { type: 'delete_alert', data: {}, meta: { now: deps.now().toISOString() } })
      return reply.code(204).header('X-Event-Seq', String(result.seq)).send()
    })
  }
}
