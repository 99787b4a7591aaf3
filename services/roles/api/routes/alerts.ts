import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { alertKinds, alertStatuses, type Alert, type AlertKind } from '../../../../domain/alert.ts'
import { alertSettings } from '../../../../projections/alerts.ts'
import { nonMemberAddresses } from '../../../use-cases/alerts/alert-recipients.ts'
import { CappedAlertCreation, commandAlert, loadAlert } from '../../../use-cases/alerts/alert-service.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest } from '../errors.ts'
import { errorResponses, instant, noContent, writeCodes } from '../openapi.ts'
import { boundedString, emailAddress, storableText } from '../text-fields.ts'
import { queueNameText } from '../job-fields.ts'
import { isoOrNull } from '../read-your-writes.ts'

/** Addresses one alert e-mails at most. */
const maxRecipients = 10

/** The settings of an alert; POST and PUT take the same body (PUT replaces every setting). */
const alertBody = z.object({
  name: storableText(1, 100),
  kind: z.enum(alertKinds),
  queue: queueNameText.nullish(),
  threshold: z.number().int().min(0).max(1_000_000_000),
  window_minutes: z.number().int().min(1).max(1440).nullish(),
  email: z.array(emailAddress).max(maxRecipients).nullish(),
  webhook: z.boolean().nullish(),
  enabled: z.boolean().nullish(),
})

const idParams = z.object({ id: boundedString(200, 1) })

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

/** An alert as the routes show it: its settings, and what the scheduler last found. */
export const alertSchema = z
  .strictObject({
    id: z.string().describe('`alr_…`'),
    name: z.string(),
    kind: z.enum(alertKinds),
    queue: z.string().nullable().describe('null: every queue'),
    threshold: z.number().int(),
    window_minutes: z.number().int(),
    email: z.array(z.string()),
    webhook: z.boolean(),
    enabled: z.boolean(),
    status: z.enum(alertStatuses),
    last_value: z.number().nullable().describe('the value measured at the last trigger or resolution'),
    last_triggered_at: instant.nullable(),
    last_resolved_at: instant.nullable(),
    created_at: instant,
    updated_at: instant,
  })
  .meta({ id: 'Alert' })

/** From the aggregate's state or a read-model row, which hold the same fields. */
export function alertView(a: Alert | Record<string, unknown>): z.output<typeof alertSchema> {
  const r = a as Record<string, unknown>
  const iso = isoOrNull
  return {
    id: r.id as string,
    name: r.name as string,
    kind: r.kind as AlertKind,
    queue: (r.queue ?? null) as string | null,
    threshold: Number(r.threshold),
    window_minutes: r.window_minutes as number,
    email: r.email as string[],
    webhook: r.webhook as boolean,
    enabled: r.enabled as boolean,
    status: r.status as Alert['status'],
    last_value: (r.last_value ?? null) as number | null,
    last_triggered_at: iso(r.last_triggered_at),
    last_resolved_at: iso(r.last_resolved_at),
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  }
}

const tags = ['Alerts']

const listSchema = { summary: 'List alerts', tags, response: { 200: z.strictObject({ data: z.array(alertSchema) }), ...errorResponses() } }

/** What the alert routes say about `email` (docs/api-notes.md, "Alerts"). */
const recipientRule = `Each \`email\` address (at most ${maxRecipients}) must be the current address of a member of the project, or the answer is 400 \`invalid_request\` naming it.`

const createSchema = {
  summary: 'Create an alert',
  description: `The answer carries \`Location\` and \`X-Event-Seq\`. ${recipientRule} A project has at most \`max_alerts_per_project\` alerts (default 100); one more is 400 \`invalid_request\`.`,
  tags,
  body: alertBody,
  response: { 201: alertSchema, ...errorResponses(...writeCodes) },
}

const readSchema = { summary: 'Read an alert', tags, params: idParams, response: { 200: alertSchema, ...errorResponses('alert_not_found') } }

const replaceSchema = {
  summary: "Replace an alert's settings",
  description: `Every setting is replaced; omitted optional ones take their defaults. The answer carries \`X-Event-Seq\`. ${recipientRule}`,
  tags,
  params: idParams,
  body: alertBody,
  response: { 200: alertSchema, ...errorResponses(...writeCodes, 'alert_not_found') },
}

const deleteSchema = {
  summary: 'Delete an alert',
  tags,
  params: idParams,
  response: { 204: noContent('Deleted; the answer carries `X-Event-Seq`'), ...errorResponses(...writeCodes, 'alert_not_found') },
}

/** `/jobsvc/v1/alerts` and `/alerts/{id}` (docs/api-notes.md, "Alerts"). */
export function alertRoutes(ctx: Pick<ApiContext, 'deps'>): FastifyPluginAsync {
  const { deps } = ctx
  const creation = new CappedAlertCreation(deps)

  /** Refuses the first address that is not a member's (alert-recipients.ts: the alert routes are no open relay). */
  async function assertRecipients(projectId: string, emails: readonly string[]): Promise<void> {
    const [refused] = await nonMemberAddresses(deps, projectId, emails)
    if (refused === undefined) return
    throw invalidRequest(
      `body.email[${emails.indexOf(refused)}]: ${refused} is not the address of a member of this project; alerts e-mail only the project's members`,
    )
  }

  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get('/', { schema: listSchema, config: { role: 'viewer' } }, async (request) => {
      const rows = await alertSettings.ofProject(deps.sql, request.principal.projectId)
      return { data: rows.map(alertView) }
    })

    app.post('/', { schema: createSchema, config: { role: 'member' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const settings = settingsOf(request.body)
      await assertRecipients(projectId, settings.email)
      const max = deps.config.tunables.max_alerts_per_project
      const result = await creation.create(projectId, settings, max, request.principal.actor)
      if (result === null) throw invalidRequest(`the project has ${max} alerts, the most it may have; delete one before creating another`)
      return reply
        .code(201)
        .header('Location', `/jobsvc/v1/alerts/${result.state!.id}`)
        .header('X-Event-Seq', String(result.seq))
        .send(alertView(result.state!))
    })

    app.get('/:id', { schema: readSchema, config: { role: 'viewer' } }, async (request) =>
      alertView(await loadAlert(deps, request.principal.projectId, request.params.id)),
    )

    app.put('/:id', { schema: replaceSchema, config: { role: 'member' } }, async (request, reply) => {
      const settings = settingsOf(request.body)
      await assertRecipients(request.principal.projectId, settings.email)
      const result = await commandAlert(deps, request.principal.projectId, request.params.id, {
        type: 'update_alert',
        data: settings,
        meta: { now: deps.now().toISOString(), actor: request.principal.actor },
      })
      return reply.header('X-Event-Seq', String(result.seq)).send(alertView(result.state!))
    })

    app.delete('/:id', { schema: deleteSchema, config: { role: 'member' } }, async (request, reply) => {
      const result = await commandAlert(deps, request.principal.projectId, request.params.id, {
        type: 'delete_alert',
        data: {},
        meta: { now: deps.now().toISOString(), actor: request.principal.actor },
      })
      return reply.code(204).header('X-Event-Seq', String(result.seq)).send()
    })
  }
}
