import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { maxEmailLength } from '../../../../domain/email-address.ts'
import { notificationPreferencesOf, notificationTopics, type NotificationTopic } from '../../../../domain/user.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest, rateLimitExceeded } from '../errors.ts'
import { bodyCodes, instant, noSecurity, publicErrorResponses, sessionErrorResponses } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { readJsonAsText, verifiedJson } from '../signed-webhook.ts'
import { boundedString } from '../text-fields.ts'

const topicDescriptions: Record<NotificationTopic, string> = {
  security_notices:
    'password changed or reset, 2FA enabled or disabled, a recovery code used, an API key rotated or revoked, a sign-in from a new device; always true',
  allowance_warnings: "80 % and 100 % of a project's monthly job allowance used (projects you own)",
  overage_charges: 'overage charged at the end of a billing period (projects you own)',
  alert_emails: 'alert e-mails of projects you are a member of, when an alert lists your address',
  product_news: 'news about the product; off until turned on',
}

const preferencesSchema = z
  .strictObject(
    Object.fromEntries(notificationTopics.map((topic) => [topic, z.boolean().describe(topicDescriptions[topic])])) as Record<
      NotificationTopic,
      z.ZodBoolean
    >,
  )
  .meta({ id: 'NotificationPreferences' })

const preferenceChanges = z.strictObject(
  Object.fromEntries(notificationTopics.map((topic) => [topic, z.boolean().optional()])) as Record<NotificationTopic, z.ZodOptional<z.ZodBoolean>>,
)

/**
 * The e-mail provider's report, provider-neutral: an adapter maps the provider's own events
 * (SES, Postmark, SendGrid, …) onto it. Only `hard_bounce` and `complaint` act; any other type is
 * acknowledged and ignored, so a provider's new event types never make it retry.
 */
const emailProviderEvent = z.object({
  id: boundedString(200, 1).optional().describe("the provider's event id, for the log"),
  type: boundedString(100, 1).describe(
    '`hard_bounce` or `complaint` mark the address undeliverable; anything else (`soft_bounce`, `delivered`, …) is ignored',
  ),
  address: boundedString(maxEmailLength, 1),
  timestamp: boundedString(64)
    .pipe(z.iso.datetime({ offset: true }))
    .describe('when the provider saw it (ISO 8601 with an offset)'),
})

/** The account's own settings sit with the account routes (export, deletion). */
const account = { tags: ['Projects'] }

/** What each account route does, for its OpenAPI description. */
const about = {
  read: 'Which e-mails you get. Security notices are always on.',
  update: 'Any of the topics; the others keep their value. `security_notices: false` is refused (400 `security_notices_required`).',
  reverify:
    'For an address the e-mail provider reported undeliverable: the link (valid 24 hours, `PUBLIC_URL/reverify?token=…`) is sent anyway, and `POST /platform/v1/auth/reverify` with its token lifts the mark. One per 60 s.',
}
const answers = {
  read: { 200: preferencesSchema, ...sessionErrorResponses() },
  update: { 200: preferencesSchema, ...sessionErrorResponses(...bodyCodes, 'security_notices_required') },
  reverify: { 200: z.strictObject({ message: z.string() }), ...sessionErrorResponses('rate_limit_exceeded') },
}

const readSchema = { ...account, summary: 'Your notification preferences', description: about.read, response: answers.read }
const updateSchema = {
  ...account,
  summary: 'Change your notification preferences',
  description: about.update,
  body: preferenceChanges,
  response: answers.update,
}
const reverifySchema = {
  ...account,
  summary: 'E-mail a link that confirms your address again',
  description: about.reverify,
  response: answers.reverify,
}

const emailWebhookSchema = {
  summary: "The e-mail provider's bounce and complaint webhook",
  description:
    'Signed like the payment provider\'s: `Jobsvc-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` with `email.webhook_secret`, within 5 minutes; without a configured secret nothing verifies. Not counted by the anonymous per-IP limit. A `hard_bounce` or `complaint` for a user\'s current address marks it undeliverable: nothing more is sent to it until the user verifies it again.',
  tags: ['Auth'],
  security: noSecurity,
  response: {
    200: z.strictObject({
      received: z.literal(true),
      action: z
        .enum(['marked_undeliverable', 'ignored'])
        .describe('`ignored`: another event type, an address no user has, one already marked, or a report older than its re-verification'),
      at: instant.describe('when the service handled it'),
    }),
    ...publicErrorResponses(...bodyCodes, 'invalid_request', 'missing_signature', 'invalid_signature'),
  },
}

/** One re-verification link per user per 60 s: each is an e-mail the user makes the service send. */
const reverificationCooldownMs = 60_000

const sessionUser = (ctx: Pick<ApiContext, 'deps' | 'accounts'>, request: FastifyRequest) =>
  authenticateSession(ctx.accounts, request.headers, ctx.deps.now())

/**
 * `GET`/`PATCH /platform/v1/account/notifications` and the re-verification link (session) — docs/api-notes.md, "Notifications".
 *
 * @noProjectRole under `/platform/v1`: a session acts on its own account
 */
export function notificationRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts'>): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>()

    r.get('/account/notifications', { schema: readSchema }, async (request) => notificationPreferencesOf(await sessionUser(ctx, request)))

    r.patch('/account/notifications', { schema: updateSchema }, async (request) => {
      const user = await sessionUser(ctx, request)
      const changes = Object.fromEntries(Object.entries(request.body).filter(([, on]) => on !== undefined))
      return notificationPreferencesOf(await ctx.accounts.updateNotificationPreferences(user, changes))
    })

    r.post('/account/email/reverify', { schema: reverifySchema }, async (request) => {
      const user = await sessionUser(ctx, request)
      const verdict = await ctx.accounts.limits.takeCooldown('email-reverify', user.id, reverificationCooldownMs, ctx.deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'one re-verification link per 60 seconds')
      await ctx.accounts.requestReverification(user)
      return { message: 'A link that confirms your address (valid 24 hours) is on its way.' }
    })
  }
}

/**
 * The e-mail provider's report: a hard bounce or a complaint about a user's current address marks
 * it undeliverable; everything else is acknowledged and ignored.
 */
async function receiveProviderReport(ctx: Pick<ApiContext, 'deps' | 'accounts'>, request: FastifyRequest) {
  const now = ctx.deps.now()
  const event = emailProviderEvent.safeParse(verifiedJson(ctx.deps.config.emailWebhookSecret, request, now))
  if (!event.success) throw invalidRequest(`body: ${event.error.issues[0]!.message}`)
  const { id, type, address, timestamp } = event.data
  const reason = type === 'hard_bounce' || type === 'complaint' ? type : null
  const marked = reason !== null && (await ctx.accounts.markUndeliverable(address, { reason, reported_at: new Date(timestamp).toISOString() }))
  ctx.deps.log.info({ provider_event_id: id, type, marked }, 'e-mail provider event received')
  return { received: true as const, action: marked ? ('marked_undeliverable' as const) : ('ignored' as const), at: now.toISOString() }
}

/**
 * The e-mail provider's webhook: signed, not authenticated, outside the anonymous limit (signed-webhook.ts).
 *
 * @noProjectRole the provider signs; no session
 */
export function emailProviderWebhookRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts'>): FastifyPluginAsync {
  const routeOptions = { schema: emailWebhookSchema, config: { documentedBody: emailProviderEvent } }
  return async (app) => {
    readJsonAsText(app)
    app.withTypeProvider<ZodTypeProvider>().post('/email/webhook', routeOptions, (request) => receiveProviderReport(ctx, request))
  }
}
