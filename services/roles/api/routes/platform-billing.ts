import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { boundedString } from '../text-fields.ts'
import { ProjectNotFound } from '../../../../domain/errors.ts'
import { billingOf, billingStates, plans } from '../../../../domain/project/index.ts'
import { promoKinds } from '../../../../domain/promo-code.ts'
import { projectHandler } from '../../../../streams/aggregates.ts'
import type { ApiContext } from '../context.ts'
import { billingDisabled, invalidRequest } from '../errors.ts'
import { bodyCodes, instant, noSecurity, publicErrorResponses, sessionErrorResponses } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { readJsonAsText, verifiedJson } from '../signed-webhook.ts'

const projectParams = z.object({ projectId: boundedString(100, 1) })
const billingChanges = z
  .object({
    plan: z.enum(plans).optional(),
    overage_enabled: z.boolean().optional(),
    spend_cap_cents: z.number().int().min(0).max(1_000_000_000).nullable().optional(),
  })
  .strict()

/** The provider's event: which project, and the billing state it is in now. */
const providerEvent = z.object({
  id: boundedString(200, 1),
  type: z.literal('billing_state.updated'),
  data: z.object({ project_id: boundedString(100, 1), state: z.enum(billingStates) }),
})

export const billingView = z
  .strictObject({
    plan: z.enum(plans),
    billing_state: z.enum(billingStates),
    overage_enabled: z.boolean(),
    overage_available: z.boolean().describe('whether the plan has an overage rate'),
    spend_cap_cents: z.number().int().nullable(),
    period_start: instant,
    period_end: instant,
    allowance: z.number().int().describe('jobs per billing period'),
    used: z.number().int(),
    overage: z.number().int(),
    overage_cost_cents: z.number().int(),
    overage_cents_per_10k: z.number().nullable().describe("the plan's rate, before any promotion's discount"),
    requests_per_hour: z.number().int().describe("the hourly request limit now: a staff override while it lasts, else the plan's"),
    allowance_bonus: z.number().int().describe('extra jobs this period from promotion codes, included in `allowance`'),
    overage_discount_percent: z.number().int().describe("percent off this period's overage from promotion codes, included in `overage_cost_cents`"),
    promotions: z.array(
      z.strictObject({
        code: z.string(),
        kind: z.enum(promoKinds),
        amount: z.number().int().describe('jobs per period for a bonus, percent for a discount'),
        first_period: z.string().describe('first billing period it counts in, `YYYY-MM-01`'),
        periods: z.number().int(),
        last_period: z.string().describe('last billing period it counts in, `YYYY-MM-01`'),
      }),
    ),
  })
  .meta({ id: 'Billing' })

const readSchema = {
  summary: "A project's plan, billing state and usage this period",
  description: 'Any member may read it.',
  tags: ['Billing'],
  params: projectParams,
  response: { 200: billingView, ...sessionErrorResponses('project_not_found') },
}

const updateSchema = {
  summary: 'Change the plan, overage or spend cap',
  description: 'Applied in the order plan, overage, cap, all or nothing. `plan` needs the owner; overage and cap need admin.',
  tags: ['Billing'],
  params: projectParams,
  body: billingChanges,
  response: { 200: billingView, ...sessionErrorResponses(...bodyCodes, 'project_not_found', 'forbidden', 'overage_unavailable') },
}

const applyPromoSchema = {
  summary: 'Apply a promotion code to the project',
  description:
    "Owner only. The code's bonus (extra jobs per period) or discount (percent off overage) counts from the current billing period for the code's number of periods; records `promo_code_applied`. An unknown, expired or used-up code, or one this project already applied, is 422 `invalid_token`, with one message for the four; a refused apply uses nothing up. Codes are case-insensitive. After 10 refused codes in an hour by the user, or on the project, 429 `rate_limit_exceeded` with `Retry-After`.",
  tags: ['Billing'],
  params: projectParams,
  body: z.object({ code: boundedString(100, 1) }).strict(),
  response: { 200: billingView, ...sessionErrorResponses(...bodyCodes, 'project_not_found', 'forbidden', 'invalid_token', 'rate_limit_exceeded') },
}

const providerWebhookSchema = {
  summary: "The payment provider's billing-state webhook",
  description:
    'Signed, not authenticated: `Jobsvc-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, within 5 minutes. Not counted by the anonymous per-IP limit. Each event `id` is applied once: a replay or retry of an applied event (within 24 hours) changes nothing and answers 200 with `duplicate: true` and the current state.',
  tags: ['Billing'],
  security: noSecurity,
  response: {
    200: z.strictObject({
      received: z.literal(true),
      duplicate: z.literal(true).optional().describe('present when this event id was applied before: nothing changed'),
      project_id: z.string(),
      billing_state: z.enum(billingStates).describe("the project's billing state now"),
    }),
    ...publicErrorResponses(...bodyCodes, 'invalid_request', 'missing_signature', 'invalid_signature', 'project_not_found', 'billing_disabled'),
  },
}

/**
 * `GET`/`PATCH /platform/v1/projects/{id}/billing` (session) — docs/api-notes.md, "Billing routes".
 *
 * @noProjectRole under `/platform/v1`: the billing use case checks the member's role
 */
export function platformBillingRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts' | 'team' | 'billing' | 'promoCodes'>): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>()
    const userOf = (request: { headers: { authorization?: string | undefined; cookie?: string | undefined } }) =>
      authenticateSession(ctx.accounts, request.headers, ctx.deps.now())

    r.get('/projects/:projectId/billing', { schema: readSchema }, async (request) => {
      const { project } = await ctx.team.load(await userOf(request), request.params.projectId)
      return ctx.billing.view(project)
    })

    r.patch('/projects/:projectId/billing', { schema: updateSchema }, async (request) => {
      const user = await userOf(request)
      const { project } = await ctx.team.load(user, request.params.projectId)
      const updated = await ctx.billing.update(user, project, request.body)
      return ctx.billing.view(updated)
    })

    r.post('/projects/:projectId/billing/promo-code', { schema: applyPromoSchema }, async (request) => {
      const user = await userOf(request)
      const { project, role } = await ctx.team.load(user, request.params.projectId)
      return ctx.billing.view(await ctx.promoCodes.apply(user, project, role, request.body.code))
    })
  }
}

/**
 * The payment provider's webhook: signed, not authenticated, outside the anonymous limit. Its
 * body is checked as the raw bytes the signature covers, so this scope reads JSON as text.
 *
 * @noProjectRole the provider signs; no session
 */
export function providerWebhookRoutes(ctx: Pick<ApiContext, 'deps' | 'billing'>): FastifyPluginAsync {
  return async (app) => {
    readJsonAsText(app)

    app
      .withTypeProvider<ZodTypeProvider>()
      .post('/billing/webhook', { schema: providerWebhookSchema, config: { documentedBody: providerEvent } }, async (request) => {
        const secret = ctx.deps.config.billingWebhookSecret
        if (secret === null) throw billingDisabled()
        const event = providerEvent.safeParse(verifiedJson(secret, request, ctx.deps.now()))
        if (!event.success) throw invalidRequest(`body: ${event.error.issues[0]!.message}`)
        const { project_id: projectId, state } = event.data.data
        const project = /^prj_[0-9a-z]{26}$/.test(projectId) ? (await projectHandler.load(ctx.deps.store, projectHandler.ref(projectId))).state : null
        if (project === null || project.status !== 'active') throw new ProjectNotFound(projectId)
        const { project: updated, duplicate } = await ctx.billing.setBillingState(projectId, state, event.data.id)
        return {
          received: true as const,
          ...(duplicate ? { duplicate: true as const } : {}),
          project_id: projectId,
          billing_state: billingOf(updated).state,
        }
      })
  }
}
