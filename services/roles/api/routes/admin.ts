import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { maxRateLimitOverrideDays, plans, projectRoles } from '../../../../domain/project/index.ts'
import { maxPromoUses, promoCodePattern, promoKinds } from '../../../../domain/promo-code.ts'
import type { User } from '../../../../domain/user.ts'
import type { ApiContext } from '../context.ts'
import { renderError, routeNotFound } from '../errors.ts'
import { bodyCodes, instant, openApiDocument, sessionErrorResponses } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { boundedString, patternText, storableText } from '../text-fields.ts'
import { billingView } from './platform-billing.ts'

const staffOnly =
  'Staff only (`is_admin` users, made by the operator command line). Any other caller, signed in or not, gets 404 `route_not_found`, as for a path that does not exist.'

const projectParams = z.object({ projectId: boundedString(100, 1) })
const userParams = z.object({ user: boundedString(320, 1).describe('a user id (`usr_…`) or e-mail address') })

const staffProject = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    status: z.enum(['active', 'deleted']),
    owner_email: z.string().nullable(),
    created_at: instant,
    updated_at: instant,
    keys_revoked_at: instant.nullable(),
    members: z.array(z.strictObject({ user_id: z.string(), email: z.string(), role: z.enum(projectRoles) })),
    rate_limit_override: z
      .strictObject({ requests_per_hour: z.number().int(), expires_at: instant, reason: z.string(), set_by: z.string(), set_at: instant })
      .nullable()
      .describe('as last set, also once lapsed; `billing.requests_per_hour` is the limit that applies now'),
    billing: billingView,
  })
  .meta({ id: 'StaffProject' })

const staffUser = z
  .strictObject({
    user_id: z.string(),
    email: z.string(),
    status: z.enum(['active', 'suspended', 'deleted']),
    is_admin: z.boolean(),
    email_verified: z.boolean(),
    totp_enabled: z.boolean(),
    created_at: instant,
    updated_at: instant,
    projects: z.array(z.strictObject({ id: z.string(), name: z.string(), role: z.enum(projectRoles).nullable() })),
  })
  .meta({ id: 'StaffUser' })

const promoCodeFields = {
  code: patternText(40, /^[A-Za-z0-9][A-Za-z0-9_-]*$/, 'must be 3 to 40 of A-Z a-z 0-9 _ - (compared upper-cased)', 3),
  periods: z.number().int().min(1).max(36).describe('billing periods it lasts, from the one it is applied in'),
  expires_at: boundedString(64)
    .pipe(z.iso.datetime({ offset: true }))
    .describe('no apply is accepted from this instant on'),
  max_uses: z.number().int().min(1).max(maxPromoUses).describe('projects that may apply it'),
}
const newPromoCode = z.discriminatedUnion('kind', [
  z
    .object({
      kind: z.literal('allowance_bonus'),
      amount: z.number().int().min(1).max(1_000_000_000).describe('extra jobs per period'),
      ...promoCodeFields,
    })
    .strict(),
  z
    .object({
      kind: z.literal('overage_discount'),
      amount: z.number().int().min(1).max(100).describe('percent off the overage charge'),
      ...promoCodeFields,
    })
    .strict(),
])

const promoCode = z
  .strictObject({
    code: z
      .string()
      .regex(promoCodePattern)
      .meta({ examples: ['SPRING25'] }),
    kind: z.enum(promoKinds),
    amount: z.number().int(),
    periods: z.number().int(),
    expires_at: instant,
    max_uses: z.number().int(),
    uses: z.number().int(),
    project_ids: z.array(z.string()),
    created_by: z.string(),
    created_at: instant,
  })
  .meta({ id: 'PromoCode' })

const tags = ['Staff']

const projectSchema = {
  summary: 'Look a project up',
  description: `${staffOnly} Deleted projects are shown too.`,
  tags,
  params: projectParams,
  response: { 200: staffProject, ...sessionErrorResponses('route_not_found', 'project_not_found') },
}

const wholeDocumentSchema = {
  summary: 'The whole API description, staff routes included',
  description: `${staffOnly} The public document (\`GET /jobsvc/v1/openapi.json\`) leaves the staff routes out.`,
  tags,
  response: { 200: openApiDocument, ...sessionErrorResponses('route_not_found') },
}

const userSchema = {
  summary: 'Look a user up by id or e-mail address',
  description: staffOnly,
  tags,
  params: userParams,
  response: { 200: staffUser, ...sessionErrorResponses('route_not_found', 'user_not_found') },
}

const suspensionSchema = (suspend: boolean) => ({
  summary: suspend ? 'Suspend a user (by id or e-mail address)' : 'Reinstate a user (by id or e-mail address)',
  description: suspend
    ? `${staffOnly} The user's sessions stop at once and login answers 403 \`account_suspended\`. Each project the user belongs to records \`admin_user_suspended\`. Staff cannot suspend themselves (409 \`invalid_state\`). Suspending a suspended user changes nothing.`
    : `${staffOnly} The user can log in again (earlier sessions too, unless expired). Each project the user belongs to records \`admin_user_reinstated\`.`,
  tags,
  params: userParams,
  response: { 200: staffUser, ...sessionErrorResponses('route_not_found', 'user_not_found', ...(suspend ? ['invalid_state'] : [])) },
})

const overrideSchema = {
  summary: "Raise a project's request limit above its plan for a while",
  description: `${staffOnly} Until \`expires_at\` the project's hourly request limit (\`X-RateLimit-Limit\`) is \`requests_per_hour\`; then the plan's again. A new override replaces the previous one (an \`expires_at\` a minute away ends it soon). \`requests_per_hour\` must be above the plan's limit and \`expires_at\` in the future, within ${maxRateLimitOverrideDays} days (400 \`invalid_request\`). Records \`admin_rate_limit_override\` with the reason.`,
  tags,
  params: projectParams,
  body: z
    .object({
      requests_per_hour: z.number().int().min(1).max(1_000_000_000),
      expires_at: boundedString(64).pipe(z.iso.datetime({ offset: true })),
      reason: storableText(1, 500),
    })
    .strict(),
  response: { 200: staffProject, ...sessionErrorResponses(...bodyCodes, 'route_not_found', 'project_not_found') },
}

const planSchema = {
  summary: "Change a project's plan",
  description: `${staffOnly} Any plan, \`enterprise\` included, whoever owns the project; a plan without an overage rate turns overage off. Records \`admin_plan_changed\`. The same plan changes nothing.`,
  tags,
  params: projectParams,
  body: z.object({ plan: z.enum(plans) }).strict(),
  response: { 200: staffProject, ...sessionErrorResponses(...bodyCodes, 'route_not_found', 'project_not_found') },
}

const createPromoSchema = {
  summary: 'Create a promotion code',
  description: `${staffOnly} An \`allowance_bonus\` adds \`amount\` jobs to each of \`periods\` billing periods; an \`overage_discount\` takes \`amount\` percent off their overage charge (several discounts: the largest applies). Owners apply it with \`POST /platform/v1/projects/{id}/billing/promo-code\` until \`expires_at\`, at most \`max_uses\` projects, each once. A code that exists is 409 \`invalid_state\`.`,
  tags,
  body: newPromoCode,
  response: { 201: promoCode, ...sessionErrorResponses(...bodyCodes, 'route_not_found', 'invalid_state') },
}

/**
 * `/platform/v1/admin/...`: staff administration (docs/api-notes.md, "Staff administration"). The session
 * is checked in `onRequest`, before the body is parsed or validated, so that a caller who is not
 * staff learns nothing, not even that the route exists: every refusal of theirs is the 404 of
 * an unknown path.
 *
 * @noProjectRole staff routes under `/platform/v1/admin`: `is_admin` decides, not a project role
 */
export function adminRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts' | 'staff' | 'promoCodes'>): FastifyPluginAsync {
  return async (app) => {
    const staffOf = new WeakMap<FastifyRequest, User>()
    app.addHook('onRequest', async (request) => {
      const user = await authenticateSession(ctx.accounts, request.headers, ctx.deps.now()).catch((err: unknown) => {
        // An outage is still a 503: only a refused session reads as "no such route".
        if (renderError(err).status >= 500) throw err
        return null
      })
      if (user === null || !user.is_admin) throw routeNotFound(request.method, request.url.split('?')[0]!)
      staffOf.set(request, user)
    })
    const r = app.withTypeProvider<ZodTypeProvider>()
    const staff = (request: FastifyRequest) => staffOf.get(request)!

    r.get('/openapi.json', { schema: wholeDocumentSchema }, async () => app.swagger() as unknown as z.output<typeof openApiDocument>)

    r.get('/projects/:projectId', { schema: projectSchema }, async (request) => ctx.staff.project(request.params.projectId))

    r.get('/users/:user', { schema: userSchema }, async (request) => ctx.staff.user(request.params.user))

    r.post('/users/:user/suspend', { schema: suspensionSchema(true) }, async (request) =>
      ctx.staff.setSuspended(staff(request), request.params.user, true),
    )

    r.post('/users/:user/reinstate', { schema: suspensionSchema(false) }, async (request) =>
      ctx.staff.setSuspended(staff(request), request.params.user, false),
    )

    r.put('/projects/:projectId/rate-limit-override', { schema: overrideSchema }, async (request) =>
      ctx.staff.overrideRateLimit(staff(request), request.params.projectId, request.body),
    )

    r.put('/projects/:projectId/plan', { schema: planSchema }, async (request) =>
      ctx.staff.changePlan(staff(request), request.params.projectId, request.body.plan),
    )

    r.post('/promo-codes', { schema: createPromoSchema }, async (request, reply) => {
      const created = await ctx.promoCodes.create(staff(request), { ...request.body, expires_at: new Date(request.body.expires_at).toISOString() })
      return reply.code(201).send(created)
    })
  }
}
