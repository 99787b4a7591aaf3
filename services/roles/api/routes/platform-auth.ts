import type { FastifyPluginAsync, FastifyReply } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { isIanaTimezone } from '../../../../domain/cron.ts'
import { expiredSessionCookie, sessionCookie, sessionTokenOf } from '../../../use-cases/platform/sessions.ts'
import { recoveryCodePattern } from '../../../use-cases/platform/totp.ts'
import type { ApiContext } from '../context.ts'
import { displayNameTooLong, invalidEmail, invalidLocale, rateLimitExceeded, validationError } from '../errors.ts'
import { bodyCodes, instant, noContent, noSecurity, publicErrorResponses, sessionErrorResponses, sessionSecurity } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { boundedString, patternText, storableText } from '../text-fields.ts'
import { isEmailAddress, maxEmailLength } from '../../../../domain/email-address.ts'
import { signupPlans } from '../../../../domain/project/index.ts'
import { InvalidTimezone } from '../../../../domain/errors.ts'

/** Shape is checked by the route: the spec's 422 `invalid_email` is for a string that is present but malformed. */
const emailText = boundedString(maxEmailLength).trim().min(1)
const newPassword = boundedString(128, 10)
// Examples for the API description: a generated one would not match the pattern.
const sixDigits = patternText(6, /^\d{6}$/, 'must be a 6-digit string').meta({ examples: ['492039'] })

const signupBody = z.object({
  email: emailText,
  password: boundedString(128, 8),
  accept_terms: z.literal(true, 'accept_terms must be true'),
  plan: z.enum(signupPlans).default('free'),
})
const tokenBody = z.object({ token: boundedString(1000, 1) })
const emailBody = z.object({ email: emailText })
const loginBody = z.object({
  email: emailText,
  password: boundedString(1024, 1),
  totp_code: sixDigits.optional(),
  recovery_code: patternText(9, recoveryCodePattern, 'must be in the form xxxx-xxxx')
    .meta({ examples: ['k3f9-2mzq'] })
    .optional(),
})
const resetBody = z.object({ token: boundedString(1000, 1), new_password: newPassword })
const changePasswordBody = z.object({ current_password: boundedString(1024, 1), new_password: newPassword })
/** Generous bounds: within them the route answers the spec's own codes (`display_name_too_long`, `invalid_timezone`, `invalid_locale`). */
const profileBody = z.object({
  // Kept on the user's log, which cannot hold an unpaired surrogate (projections/storable-values.ts).
  display_name: storableText(0, 10_000).nullable().optional(),
  timezone: boundedString(1000).optional(),
  locale: boundedString(1000).optional(),
})

/** The 2FA routes validate these themselves (twoFactorBody): their spec'd code is `validation_error`. */
const totpCodeBody = z.object({ code: boundedString(1024) })
const disableTotpBody = z.object({ password: boundedString(1024), code: boundedString(1024) })

const message = z.strictObject({ message: z.string() })

const projectSummary = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    plan: z.string(),
    api_key_prefix: z.string().nullable().describe('the first 24 characters of the key; null once the keys are revoked'),
  })
  .meta({ id: 'ProjectSummary' })

export const profileSchema = z
  .strictObject({
    user_id: z.string(),
    email: z.string(),
    email_verified: z.boolean(),
    created_at: instant,
    is_admin: z.boolean().describe('true only for service staff'),
    display_name: z.string().nullable(),
    timezone: z.string().describe('IANA name'),
    locale: z.string().describe('BCP-47'),
    totp_enabled: z.boolean(),
    email_undeliverable: z
      .strictObject({ reason: z.enum(['hard_bounce', 'complaint']), reported_at: instant })
      .nullable()
      .describe('set while the e-mail provider reports the address undeliverable: nothing is sent to it until it is verified again'),
    account: z.strictObject({ id: z.string(), name: z.string() }).describe('a placeholder with an empty id while no account exists'),
    products: z.array(z.strictObject({ product_slug: z.string(), enabled: z.boolean(), plan: z.string() })),
    projects: z.array(projectSummary).describe('the projects the user owns, oldest first'),
  })
  .meta({ id: 'Profile' })

/**
 * Anonymous routes: no credentials, and every POST counts against the per-IP limit (20 per 15
 * minutes) before anything else, so each can answer 429 `rate_limit_exceeded`.
 */
const anonymous = { tags: ['Auth'], security: noSecurity }
const anonymousErrors = (...codes: string[]) => publicErrorResponses('invalid_request', ...bodyCodes, 'rate_limit_exceeded', ...codes)

const signupSchema = {
  ...anonymous,
  summary: 'Sign up',
  description: 'Sends a verification link (valid 24 hours) to the address.',
  body: signupBody,
  response: {
    201: z.strictObject({ user_id: z.string(), email: z.string(), message: z.string() }),
    ...anonymousErrors('invalid_email', 'email_already_registered'),
  },
}

const verifySchema = {
  ...anonymous,
  summary: 'Verify the e-mail address',
  description: "Opens the account and its first project; the project's API key is shown once, here.",
  body: tokenBody,
  response: {
    200: z.strictObject({ user_id: z.string(), project_id: z.string(), project_name: z.string(), api_key: z.string(), message: z.string() }),
    ...anonymousErrors('invalid_verification_token'),
  },
}

const loginSchema = {
  ...anonymous,
  summary: 'Log in',
  description:
    'Sets the session cookie `sv_jwt` (HttpOnly, Secure, SameSite=Strict); the JWT is never in the body. With 2FA on, send `totp_code` or `recovery_code`.',
  body: loginBody,
  response: {
    200: z.strictObject({
      user_id: z.string(),
      email: z.string(),
      email_verified: z.boolean(),
      recovery_code_used: z.boolean(),
      projects: z.array(projectSummary),
    }),
    ...anonymousErrors(
      'invalid_credentials',
      '401:invalid_totp_code',
      'email_not_verified',
      'totp_required',
      'account_suspended',
      'account_locked',
      'totp_secret_unreadable',
    ),
  },
}

const resendSchema = {
  ...anonymous,
  summary: 'Send a new verification link',
  description: 'The same answer whether or not the address has an unverified account; never sooner than 300 ms.',
  body: emailBody,
  response: { 200: message, ...anonymousErrors() },
}

const reverifySchema = {
  ...anonymous,
  summary: 'Confirm an address again with its e-mailed token',
  description: 'The token of the link `POST /platform/v1/account/email/reverify` sent. Lifts an undeliverable mark: e-mails to the address resume.',
  body: tokenBody,
  response: { 200: message, ...anonymousErrors('invalid_verification_token') },
}

const forgotSchema = {
  ...anonymous,
  summary: 'Ask for a password reset link',
  description: 'The same answer whether or not the address is registered; never sooner than 300 ms. The link is valid 1 hour.',
  body: emailBody,
  response: { 200: message, ...anonymousErrors() },
}

const resetSchema = {
  ...anonymous,
  summary: 'Set a new password with a reset token',
  body: resetBody,
  response: { 200: message, ...anonymousErrors('invalid_reset_token') },
}

const session = { tags: ['Auth'] }

const logoutSchema = {
  ...session,
  summary: 'Log out',
  description:
    'Ends the session: its token (Bearer or cookie) is refused from then on, in every process, and the cookie is expired. Idempotent, and answers the same without a valid session.',
  security: [{}, ...sessionSecurity],
  response: { 204: noContent('The session is ended and the cookie expired'), ...publicErrorResponses(...bodyCodes) },
}

const meSchema = { ...session, summary: 'The signed-in user', response: { 200: profileSchema, ...sessionErrorResponses() } }

const profileUpdateSchema = {
  ...session,
  summary: 'Change the display name, timezone or locale',
  body: profileBody,
  response: { 200: message, ...sessionErrorResponses(...bodyCodes, 'display_name_too_long', 'invalid_timezone', 'invalid_locale') },
}

const changePasswordSchema = {
  ...session,
  summary: 'Change the password',
  description:
    "Every other session ends; this one gets a fresh cookie. The current password is checked in a slot of the account's failed-login window: a wrong one counts as a failed login, and past 10 in 15 minutes the answer is 429 `account_locked` with `Retry-After`. With too many password checks running on this server, 429 `rate_limit_exceeded` (`Retry-After: 1`).",
  body: changePasswordBody,
  response: { 200: message, ...sessionErrorResponses(...bodyCodes, 'invalid_credentials', 'account_locked', 'rate_limit_exceeded') },
}

const totpSetupSchema = {
  ...session,
  summary: 'Start enabling two-factor authentication',
  description: 'Not active until `2fa/verify` accepts a code. Calling it again replaces the pending secret.',
  response: {
    200: z.strictObject({ secret: z.string().describe('base32'), otpauth_uri: z.string() }),
    ...sessionErrorResponses(...bodyCodes, 'totp_already_enabled'),
  },
}

const totpVerifySchema = {
  ...session,
  summary: 'Enable two-factor authentication with a first code',
  body: totpCodeBody,
  response: {
    200: z.strictObject({ enabled: z.literal(true), enabled_at: instant }),
    ...sessionErrorResponses(
      ...bodyCodes,
      'validation_error',
      'invalid_totp_code',
      'totp_not_initialized',
      'totp_already_enabled',
      'totp_secret_unreadable',
    ),
  },
}

const totpDisableSchema = {
  ...session,
  summary: 'Disable two-factor authentication',
  description:
    "Checks, in order: 2FA on (409), the account's failed-login window (429 `account_locked`), the password (401), the code (400); a wrong password or code counts as a failed login. With too many password checks running on this server, 429 `rate_limit_exceeded`. The secret and recovery codes are deleted.",
  body: disableTotpBody,
  response: {
    200: message,
    ...sessionErrorResponses(
      ...bodyCodes,
      'validation_error',
      'invalid_totp_code',
      'invalid_credentials',
      'totp_not_enabled',
      'totp_secret_unreadable',
      'account_locked',
      'rate_limit_exceeded',
    ),
  },
}

const recoveryCodesSchema = {
  ...session,
  summary: 'Issue new recovery codes',
  description: 'Ten single-use codes, shown once; earlier ones stop working.',
  response: {
    200: z.strictObject({ codes: z.array(z.string()).describe('`xxxx-xxxx`'), message: z.string() }),
    ...sessionErrorResponses(...bodyCodes, 'totp_not_enabled'),
  },
}

/** The fixed answers of the routes that must not reveal whether an address is registered. */
export const messages = {
  signup: 'Account created. Check your e-mail for a verification link (valid 24 hours).',
  verify: 'E-mail verified. Your first project and its API key are ready; the key is shown only once.',
  reverify: 'E-mail address confirmed. E-mails to it resume.',
  resend: 'If that address has an unverified account, a new verification link (valid 24 hours) is on its way.',
  forgot: 'If an account exists for that address, a password reset link (valid 1 hour) is on its way.',
  reset: 'Password changed. Log in with the new password.',
  changePassword: 'Password changed. Other sessions have been signed out.',
  profile: 'Profile updated.',
  disable: 'Two-factor authentication is disabled; its secret and recovery codes are deleted.',
  recovery: 'Store these codes somewhere safe: each works once, and they are not shown again.',
}

/** Forgot (and resend) answer no sooner than this, whatever the address, so timing tells nothing. */
const minimumAnswerMs = 300

async function answerNoSoonerThan<T>(ms: number, work: () => Promise<T>): Promise<T> {
  const started = performance.now()
  try {
    return await work()
  } finally {
    const left = ms - (performance.now() - started)
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left))
  }
}

function requireEmailShape(email: string): string {
  if (!isEmailAddress(email)) throw invalidEmail()
  return email
}

/** A body the 2FA routes validate themselves: their spec'd code is `validation_error`. */
function twoFactorBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body ?? {})
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    throw validationError(`${['body', ...issue.path].join('.')}: ${issue.message}`)
  }
  return parsed.data
}

function isKnownLocale(locale: string): string | null {
  try {
    const [canonical] = Intl.getCanonicalLocales(locale)
    return canonical !== undefined && Intl.DateTimeFormat.supportedLocalesOf([canonical]).length === 1 ? canonical : null
  } catch {
    return null
  }
}

function setSession(reply: FastifyReply, token: string): void {
  void reply.header('Set-Cookie', sessionCookie(token))
}

/**
 * The anonymous routes: every POST counts against the per-IP window first, valid or not.
 *
 * @noProjectRole under `/platform/v1/auth`, before any session
 */
export function anonymousAuthRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts'>): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>()
    r.addHook('onRequest', async (request) => {
      if (request.method !== 'POST') return
      const verdict = await ctx.accounts.limits.admitAnonymousPost(request.ip, ctx.deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'too many requests from this address; retry later')
    })

    r.post('/signup', { schema: signupSchema }, async (request, reply) => {
      const email = requireEmailShape(request.body.email)
      const user = await ctx.accounts.signUp({ email, password: request.body.password, plan: request.body.plan })
      return reply.code(201).send({ user_id: user.id, email: user.email, message: messages.signup })
    })

    r.post('/verify', { schema: verifySchema }, async (request) => {
      const { user, project, apiKey } = await ctx.accounts.verifyEmail(request.body.token)
      return { user_id: user.id, project_id: project.id, project_name: project.name, api_key: apiKey, message: messages.verify }
    })

    r.post('/reverify', { schema: reverifySchema }, async (request) => {
      await ctx.accounts.reverifyEmail(request.body.token)
      return { message: messages.reverify }
    })

    r.post('/login', { schema: loginSchema }, async (request, reply) => {
      const b = request.body
      const result = await ctx.accounts.login({
        email: b.email,
        password: b.password,
        totpCode: b.totp_code,
        recoveryCode: b.recovery_code,
        device: { ip: request.ip, userAgent: request.headers['user-agent'] ?? '' },
      })
      setSession(reply, result.session)
      return {
        user_id: result.user.id,
        email: result.user.email,
        email_verified: result.user.email_verified_at !== null,
        recovery_code_used: result.recoveryCodeUsed,
        projects: result.projects,
      }
    })

    r.post('/resend', { schema: resendSchema }, async (request) => {
      await answerNoSoonerThan(minimumAnswerMs, () => ctx.accounts.resendVerification(request.body.email))
      return { message: messages.resend }
    })

    r.post('/forgot', { schema: forgotSchema }, async (request) => {
      await answerNoSoonerThan(minimumAnswerMs, () => ctx.accounts.requestPasswordReset(request.body.email))
      return { message: messages.forgot }
    })

    r.post('/reset', { schema: resetSchema }, async (request) => {
      await ctx.accounts.resetPassword(request.body.token, request.body.new_password)
      return { message: messages.reset }
    })
  }
}

/**
 * Routes that need a session (Bearer JWT or the `sv_jwt` cookie), and logout, which does not.
 *
 * @noProjectRole under `/platform/v1/auth`: a session acts on its own account
 */
export function sessionAuthRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts'>): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>()
    const userOf = (request: { headers: { authorization?: string | undefined; cookie?: string | undefined } }) =>
      authenticateSession(ctx.accounts, request.headers, ctx.deps.now())

    // Idempotent and harmless without a session: then it only tells the browser to drop the cookie.
    r.post('/logout', { schema: logoutSchema }, async (request, reply) => {
      await ctx.accounts.endSession(sessionTokenOf(request.headers))
      return reply.code(204).header('Set-Cookie', expiredSessionCookie).send()
    })

    r.get('/me', { schema: meSchema }, async (request) => ctx.accounts.profile(await userOf(request)))

    r.patch('/profile', { schema: profileUpdateSchema }, async (request) => {
      const user = await userOf(request)
      const b = request.body
      const changes: { display_name?: string | null; timezone?: string; locale?: string } = {}
      if (b.display_name !== undefined) {
        const trimmed = b.display_name?.trim() ?? ''
        // Characters as a person counts them (code points), not UTF-16 units.
        if ([...trimmed].length > 100) throw displayNameTooLong()
        changes.display_name = trimmed === '' ? null : trimmed
      }
      if (b.timezone !== undefined) {
        if (!isIanaTimezone(b.timezone)) throw new InvalidTimezone(`${JSON.stringify(b.timezone)} is not an IANA timezone`)
        changes.timezone = b.timezone
      }
      if (b.locale !== undefined) {
        const locale = isKnownLocale(b.locale)
        if (locale === null) throw invalidLocale(b.locale)
        changes.locale = locale
      }
      await ctx.accounts.updateProfile(user, changes)
      return { message: messages.profile }
    })

    r.post('/change-password', { schema: changePasswordSchema }, async (request, reply) => {
      const user = await userOf(request)
      const changed = await ctx.accounts.changePassword(user, request.body.current_password, request.body.new_password)
      // Every earlier session ends, this one included; the caller gets a fresh one.
      setSession(reply, await ctx.accounts.sessions.issue(changed.id, ctx.deps.now()))
      return { message: messages.changePassword }
    })

    r.post('/2fa/setup', { schema: totpSetupSchema }, async (request) => {
      const { secret, uri } = await ctx.accounts.setUpTotp(await userOf(request))
      return { secret, otpauth_uri: uri }
    })

    // attachValidation: the handler refuses a bad body itself, after the session check, with the
    // spec's `validation_error` rather than the schema's `invalid_request`.
    r.post('/2fa/verify', { schema: totpVerifySchema, attachValidation: true }, async (request) => {
      const user = await userOf(request)
      const { code } = twoFactorBody(totpCodeBody, request.body)
      const enabled = await ctx.accounts.enableTotp(user, code)
      return { enabled: true as const, enabled_at: enabled.totp!.enabled_at! }
    })

    r.post('/2fa/disable', { schema: totpDisableSchema, attachValidation: true }, async (request) => {
      const user = await userOf(request)
      const { password, code } = twoFactorBody(disableTotpBody, request.body)
      await ctx.accounts.disableTotp(user, password, code)
      return { message: messages.disable }
    })

    r.post('/2fa/recovery/regenerate', { schema: recoveryCodesSchema }, async (request) => {
      const codes = await ctx.accounts.regenerateRecoveryCodes(await userOf(request))
      return { codes, message: messages.recovery }
    })
  }
}
