import { randomBytes } from 'node:crypto'
import { SignJWT } from 'jose'
import t, { type Test } from 'tap'
import { userHandler } from '../../streams/aggregates.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, type HttpResponse } from '../support/harness.ts'
import { newVerifiedUser, sessionFrom, startPlatformHarness, totpCode, type PlatformHarness, type VerifiedUser } from '../support/platform.ts'

/**
 * Session routes (logout, me, profile, change-password) and the four two-factor routes of the
 * spec's Authentication section, over HTTP against the real NATS and Postgres. TOTP codes come
 * from the tests' own RFC 6238 implementation; clock-dependent cases freeze the service clock in
 * the middle of a 30-second step, so a step boundary never falls between computing a code and
 * the service checking it.
 */

const h: PlatformHarness = await startPlatformHarness(t, import.meta.filename)

const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/
const isoPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/
const stepMs = 30_000

function expectError(t: Test, res: HttpResponse, status: number, code: string, what = code): void {
  t.equal(res.status, status, `${what}: status (${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code`)
  t.type(res.body?.error?.message, 'string', `${what}: message`)
  t.match(res.body?.error?.request_id, ulidPattern, `${what}: request_id`)
}

const me = (jwt: string) => h.platform('GET', '/platform/v1/auth/me', undefined, { jwt })
/** The same read with the session in the `sv_jwt` cookie, as a browser sends it. */
const meByCookie = (jwt: string) => h.platform('GET', '/platform/v1/auth/me', undefined, { cookie: `sv_jwt=${jwt}` })
const renameAs = (jwt: string, displayName: string) => h.platform('PATCH', '/platform/v1/auth/profile', { display_name: displayName }, { jwt })
const login = (body: Record<string, unknown>) => h.platform('POST', '/platform/v1/auth/login', body)
const twoFactor = (route: string, jwt: string | undefined, body?: unknown) =>
  h.platform('POST', `/platform/v1/auth/2fa/${route}`, body, jwt === undefined ? {} : { jwt })

/** A six-digit code that matches none of the steps within ±2 of `at` (so it is wrong, not replayed). */
function wrongCode(secret: string, at: Date): string {
  const near = new Set([-2, -1, 0, 1, 2].map((k) => totpCode(secret, at, k)))
  for (let n = 123_456; ; n = (n + 7919) % 1_000_000) {
    const code = String(n).padStart(6, '0')
    if (!near.has(code)) return code
  }
}

/**
 * Freezes the service clock `k` steps after a mid-step instant chosen now (just ahead of the
 * real time), and restores the real clock when the test ends.
 */
function frozenClock(t: Test): { at(k: number): Date; set(k: number): Date } {
  const original = h.runtime.now
  t.teardown(() => {
    h.runtime.now = original
  })
  const base = (Math.floor(Date.now() / stepMs) + 1) * stepMs + stepMs / 2
  const at = (k: number) => new Date(base + k * stepMs)
  return {
    at,
    set(k: number) {
      const instant = at(k)
      h.runtime.now = () => new Date(instant.getTime())
      return instant
    },
  }
}

/** Sets up and enables 2FA at the frozen clock's step 0; returns the secret. */
async function enableTwoFactor(t: Test, u: VerifiedUser, clock: { set(k: number): Date }): Promise<string> {
  const setup = await twoFactor('setup', u.jwt)
  t.equal(setup.status, 200, `setup: ${JSON.stringify(setup.body)}`)
  const secret = setup.body.secret as string
  const at = clock.set(0)
  const verify = await twoFactor('verify', u.jwt, { code: totpCode(secret, at) })
  t.equal(verify.status, 200, `verify: ${JSON.stringify(verify.body)}`)
  return secret
}

function flipChar(s: string, index: number): string {
  const c = s[index]!
  return s.slice(0, index) + (c === 'A' ? 'B' : 'A') + s.slice(index + 1)
}

t.test('sessions: the JWT as Bearer or as the sv_jwt cookie; anything else is 401 unauthorized', async (t) => {
  const u = await newVerifiedUser(h)

  const bearer = await me(u.jwt)
  t.equal(bearer.status, 200, JSON.stringify(bearer.body))
  t.equal(bearer.body.user_id, u.userId)
  const cookie = await meByCookie(u.jwt)
  t.equal(cookie.status, 200, JSON.stringify(cookie.body))
  t.equal(cookie.body.user_id, u.userId)
  const amongOthers = await h.platform('GET', '/platform/v1/auth/me', undefined, { cookie: `theme=dark; sv_jwt=${u.jwt}; lang=en` })
  t.equal(amongOthers.status, 200, 'the session cookie is found among other cookies')
  t.equal(amongOthers.body.user_id, u.userId)

  expectError(t, await h.platform('GET', '/platform/v1/auth/me'), 401, 'unauthorized', 'no credentials')
  expectError(t, await me('garbage'), 401, 'unauthorized', 'garbage Bearer')
  expectError(t, await me('a.b.c'), 401, 'unauthorized', 'three garbage segments')
  expectError(t, await h.platform('GET', '/platform/v1/auth/me', undefined, { cookie: 'sv_jwt=garbage' }), 401, 'unauthorized', 'garbage cookie')
  expectError(t, await h.platform('GET', '/platform/v1/auth/me', undefined, { cookie: 'sv_jwt=' }), 401, 'unauthorized', 'empty cookie')
  expectError(
    t,
    await h.platform('GET', '/platform/v1/auth/me', undefined, { cookie: `other_jwt=${u.jwt}` }),
    401,
    'unauthorized',
    'a cookie of another name',
  )
  expectError(
    t,
    await h.platform('GET', '/platform/v1/auth/me', undefined, { headers: { authorization: `Basic ${u.jwt}` } }),
    401,
    'unauthorized',
    'not a Bearer scheme',
  )

  const [header, payload, signature] = u.jwt.split('.') as [string, string, string]
  t.ok(signature.length > 10, 'the JWT has a signature part')
  const tampered = `${header}.${payload}.${flipChar(signature, Math.floor(signature.length / 2))}`
  t.not(tampered, u.jwt)
  expectError(t, await me(tampered), 401, 'unauthorized', 'tampered signature (Bearer)')
  expectError(t, await meByCookie(tampered), 401, 'unauthorized', 'tampered signature (cookie)')

  const other = await newVerifiedUser(h)
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>
  t.equal(claims.sub, u.userId, 'the session names its user in sub')
  const swappedPayload = Buffer.from(JSON.stringify({ ...claims, sub: other.userId })).toString('base64url')
  expectError(t, await me(`${header}.${swappedPayload}.${signature}`), 401, 'unauthorized', 'payload changed under the same signature')

  const foreignKey = randomBytes(32)
  const foreign = await new SignJWT({ ...claims })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(u.userId)
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(foreignKey)
  expectError(t, await me(foreign), 401, 'unauthorized', 'same claims signed with another key')
  expectError(t, await meByCookie(foreign), 401, 'unauthorized', 'foreign-key JWT as cookie')

  const unsignedHeader = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')
  expectError(t, await me(`${unsignedHeader}.${payload}.`), 401, 'unauthorized', 'alg none')

  t.equal((await me(u.jwt)).status, 200, 'the genuine session still works after the attempts')
})

t.test('logout: 204 with an expired sv_jwt cookie, idempotent, with or without a session', async (t) => {
  const u = await newVerifiedUser(h)
  const checkExpired = (res: HttpResponse, what: string) => {
    t.equal(res.status, 204, `${what}: status`)
    t.equal(res.body, null, `${what}: no body`)
    const cookie = res.headers.get('set-cookie') ?? ''
    t.match(cookie, /(^|,\s*)sv_jwt=;/, `${what}: sv_jwt emptied`)
    t.match(cookie, /Max-Age=0(;|$)/i, `${what}: Max-Age=0`)
    t.match(cookie, /HttpOnly/i, `${what}: HttpOnly`)
    t.match(cookie, /Path=\//i, `${what}: Path=/`)
  }
  checkExpired(await h.platform('POST', '/platform/v1/auth/logout', undefined, { jwt: u.jwt }), 'logout with Bearer')
  checkExpired(await h.platform('POST', '/platform/v1/auth/logout', undefined, { jwt: u.jwt }), 'logout again')
  checkExpired(await h.platform('POST', '/platform/v1/auth/logout', undefined, { cookie: `sv_jwt=${u.jwt}` }), 'logout with the cookie')
  checkExpired(await h.platform('POST', '/platform/v1/auth/logout'), 'logout without any session')
  checkExpired(await h.platform('POST', '/platform/v1/auth/logout', undefined, { cookie: 'sv_jwt=garbage' }), 'logout with a garbage cookie')
})

t.test('logout ends its session in the service, not only in the browser; other sessions go on', async (t) => {
  const u = await newVerifiedUser(h)
  const second = sessionFrom(await login({ email: u.email, password: u.password }))
  const third = sessionFrom(await login({ email: u.email, password: u.password }))
  t.not(second, u.jwt, 'each login is its own session')
  t.equal((await me(u.jwt)).status, 200, 'the first session works before logout')

  t.equal((await h.platform('POST', '/platform/v1/auth/logout', undefined, { jwt: u.jwt })).status, 204)
  expectError(t, await me(u.jwt), 401, 'unauthorized', 'the logged-out token, as Bearer')
  expectError(t, await meByCookie(u.jwt), 401, 'unauthorized', 'the logged-out token, as the cookie')
  expectError(t, await renameAs(u.jwt, 'x'), 401, 'unauthorized', 'a write with the logged-out token')
  t.equal((await me(second)).status, 200, 'another session of the same user still works')

  t.equal((await h.platform('POST', '/platform/v1/auth/logout', undefined, { cookie: `sv_jwt=${third}` })).status, 204, 'logout through the cookie')
  expectError(t, await me(third), 401, 'unauthorized', 'the session logged out through its cookie')
  t.equal((await me(second)).status, 200, 'the second session is still untouched')
  t.equal((await h.platform('POST', '/platform/v1/auth/logout', undefined, { jwt: u.jwt })).status, 204, 'logging out an ended session again')

  const fresh = sessionFrom(await login({ email: u.email, password: u.password }))
  t.equal((await me(fresh)).status, 200, 'logging in again gives a working session')
})

t.test('GET me: the spec profile object with the right types', async (t) => {
  const u = await newVerifiedUser(h, { plan: 'pro' })
  const started = Date.now()
  const res = await me(u.jwt)
  t.equal(res.status, 200, JSON.stringify(res.body))
  const p = res.body
  t.equal(p.user_id, u.userId)
  t.equal(p.email, u.email)
  t.equal(p.email_verified, true)
  t.match(p.created_at, isoPattern, 'created_at is ISO 8601')
  t.ok(Date.parse(p.created_at) <= started && Date.parse(p.created_at) > started - 5 * 60_000, 'created_at is the sign-up time')
  t.equal(p.is_admin, false)
  t.equal(p.display_name, null)
  t.equal(p.timezone, 'UTC')
  t.type(p.locale, 'string')
  t.ok(Intl.getCanonicalLocales(p.locale).length === 1, `locale ${p.locale} is BCP-47`)
  t.equal(p.totp_enabled, false)

  t.type(p.account, 'object')
  t.match(p.account.id, /^acct_/, 'account id')
  t.type(p.account.name, 'string')
  t.ok(p.account.name.length > 0, 'account name is set')

  t.ok(Array.isArray(p.products) && p.products.length >= 1, 'products is a non-empty array')
  for (const product of p.products) {
    t.type(product.product_slug, 'string')
    t.ok(product.product_slug.length > 0, 'product_slug is set')
    t.type(product.enabled, 'boolean')
    t.type(product.plan, 'string')
  }

  t.ok(Array.isArray(p.projects), 'projects is an array')
  t.equal(p.projects.length, 1, 'one project after verification')
  t.same(Object.keys(p.projects[0]).sort(), ['api_key_prefix', 'id', 'name', 'plan'], 'project summary fields')
  t.equal(p.projects[0].id, u.projectId)
  t.type(p.projects[0].name, 'string')
  t.equal(p.projects[0].plan, 'pro', 'the sign-up plan is the first project plan')
  t.equal(p.projects[0].api_key_prefix, u.apiKey.slice(0, 24), 'prefix is the first 24 characters of the key')

  for (const field of [
    'user_id',
    'email',
    'email_verified',
    'created_at',
    'is_admin',
    'display_name',
    'timezone',
    'locale',
    'totp_enabled',
    'account',
    'products',
    'projects',
  ]) {
    t.ok(field in p, `profile has ${field}`)
  }
  const text = JSON.stringify(p)
  t.notOk(text.includes(u.apiKey), 'the plaintext key is never listed')
  t.notOk(text.includes(u.password), 'the password is not in the profile')
  t.notOk(/password|hash|secret/i.test(Object.keys(p).join(',')), 'no credential fields in the profile')

  const second = await h.platform('POST', '/platform/v1/projects', { name: 'Second' }, { jwt: u.jwt })
  t.equal(second.status, 201, JSON.stringify(second.body))
  const after = await me(u.jwt)
  t.same(
    after.body.projects.map((x: { id: string }) => x.id),
    [u.projectId, second.body.id],
    'owned projects ordered by creation time',
  )
})

t.test('PATCH profile: display_name, timezone and locale', async (t) => {
  const u = await newVerifiedUser(h)
  const patch = (body: unknown, o: { jwt?: string; cookie?: string } = { jwt: u.jwt }) => h.platform('PATCH', '/platform/v1/auth/profile', body, o)
  const profile = async () => (await me(u.jwt)).body

  const ok = await patch({ display_name: '  Ada  ' })
  t.equal(ok.status, 200, JSON.stringify(ok.body))
  t.type(ok.body.message, 'string')
  t.equal((await profile()).display_name, 'Ada', 'trimmed')

  const hundred = 'x'.repeat(100)
  t.equal((await patch({ display_name: hundred })).status, 200, '100 characters are allowed')
  t.equal((await profile()).display_name, hundred)
  t.equal((await patch({ display_name: `   ${'y'.repeat(100)}   ` })).status, 200, '100 characters after trimming are allowed')
  t.equal((await profile()).display_name, 'y'.repeat(100))
  expectError(t, await patch({ display_name: 'z'.repeat(101) }), 400, 'display_name_too_long', '101 characters')
  t.equal((await profile()).display_name, 'y'.repeat(100), 'a refused change changes nothing')

  t.equal((await patch({ display_name: '' })).status, 200)
  t.equal((await profile()).display_name, null, 'empty string clears')
  t.equal((await patch({ display_name: 'Ada' })).status, 200)
  t.equal((await patch({ display_name: '   ' })).status, 200)
  t.equal((await profile()).display_name, null, 'white space only clears')
  t.equal((await patch({ display_name: 'Ada' })).status, 200)
  t.equal((await patch({ display_name: null })).status, 200)
  t.equal((await profile()).display_name, null, 'null clears')

  t.equal((await patch({ timezone: 'Europe/Berlin' })).status, 200)
  t.equal((await profile()).timezone, 'Europe/Berlin')
  expectError(t, await patch({ timezone: 'Mars/Olympus' }), 400, 'invalid_timezone', 'unknown timezone')
  expectError(t, await patch({ timezone: '' }), 400, 'invalid_timezone', 'empty timezone')
  t.equal((await profile()).timezone, 'Europe/Berlin', 'a refused timezone changes nothing')

  t.equal((await patch({ locale: 'de-DE' })).status, 200)
  t.equal((await profile()).locale, 'de-DE')
  expectError(t, await patch({ locale: 'xx-notalocale' }), 400, 'invalid_locale', 'malformed locale')
  expectError(t, await patch({ locale: 'zz' }), 400, 'invalid_locale', 'well-formed locale not in the catalogue')
  t.equal((await profile()).locale, 'de-DE', 'a refused locale changes nothing')

  const all = await patch({ display_name: 'Grace', timezone: 'America/New_York', locale: 'fr-FR' })
  t.equal(all.status, 200, JSON.stringify(all.body))
  const p = await profile()
  t.same(
    { display_name: p.display_name, timezone: p.timezone, locale: p.locale },
    { display_name: 'Grace', timezone: 'America/New_York', locale: 'fr-FR' },
  )

  const mixed = await patch({ display_name: 'Hopper', timezone: 'Mars/Olympus' })
  expectError(t, mixed, 400, 'invalid_timezone', 'one bad field in a valid set')
  t.equal((await profile()).display_name, 'Grace', 'a refused request applies none of its fields')

  t.equal((await patch({})).status, 200, 'an empty patch is accepted')
  t.equal((await profile()).display_name, 'Grace', 'an empty patch changes nothing')

  expectError(t, await patch({ display_name: 42 }), 400, 'invalid_request', 'display_name a number')
  expectError(t, await patch({ display_name: true }), 400, 'invalid_request', 'display_name a boolean')
  expectError(t, await patch({ timezone: 5 }), 400, 'invalid_request', 'timezone a number')
  expectError(t, await patch({ timezone: null }), 400, 'invalid_request', 'timezone null')
  expectError(t, await patch({ locale: ['de-DE'] }), 400, 'invalid_request', 'locale an array')

  expectError(t, await h.platform('PATCH', '/platform/v1/auth/profile', { display_name: 'Eve' }), 401, 'unauthorized', 'no session')
  expectError(t, await patch({ display_name: 'Eve' }, { jwt: 'garbage' }), 401, 'unauthorized', 'garbage session')
  const viaCookie = await patch({ display_name: 'Cookie' }, { cookie: `sv_jwt=${u.jwt}` })
  t.equal(viaCookie.status, 200, 'the cookie session works for PATCH')
  t.equal((await profile()).display_name, 'Cookie')
})

t.test('change-password: checks the current password, ends earlier sessions, issues a fresh one', async (t) => {
  const u = await newVerifiedUser(h)
  const secondLogin = await login({ email: u.email, password: u.password })
  t.equal(secondLogin.status, 200)
  const otherSession = sessionFrom(secondLogin)
  const change = (body: unknown, jwt: string | null = u.jwt) =>
    h.platform('POST', '/platform/v1/auth/change-password', body, jwt === null ? {} : { jwt })
  const newPassword = `new-${randomBytes(8).toString('hex')}`

  expectError(
    t,
    await change({ current_password: 'not-the-password', new_password: newPassword }),
    401,
    'invalid_credentials',
    'wrong current password',
  )
  expectError(t, await change({ current_password: u.password, new_password: '123456789' }), 400, 'invalid_request', 'new password of 9 characters')
  expectError(
    t,
    await change({ current_password: u.password, new_password: 'p'.repeat(129) }),
    400,
    'invalid_request',
    'new password of 129 characters',
  )
  expectError(t, await change({ current_password: u.password }), 400, 'invalid_request', 'new_password missing')
  expectError(t, await change({ new_password: newPassword }), 400, 'invalid_request', 'current_password missing')
  expectError(t, await change({ current_password: u.password, new_password: newPassword }, null), 401, 'unauthorized', 'no session')
  t.equal((await me(u.jwt)).status, 200, 'refused changes leave the session alive')
  t.equal((await login({ email: u.email, password: u.password })).status, 200, 'refused changes leave the password as it was')

  const changed = await change({ current_password: u.password, new_password: newPassword })
  t.equal(changed.status, 200, JSON.stringify(changed.body))
  t.type(changed.body.message, 'string')
  const cookie = changed.headers.get('set-cookie') ?? ''
  t.match(cookie, /HttpOnly/i)
  t.match(cookie, /Secure/i)
  t.match(cookie, /SameSite=Strict/i)
  t.match(cookie, /Path=\//)
  const fresh = sessionFrom(changed)
  t.not(fresh, u.jwt, 'a new session token')
  t.notOk(JSON.stringify(changed.body).includes(fresh), 'the JWT is not in the body')
  const withFresh = await me(fresh)
  t.equal(withFresh.status, 200, 'the fresh session works')
  t.equal(withFresh.body.user_id, u.userId)
  t.equal((await meByCookie(fresh)).status, 200, 'as a cookie too')

  expectError(t, await me(u.jwt), 401, 'unauthorized', 'the session that changed the password')
  expectError(t, await me(otherSession), 401, 'unauthorized', 'another earlier session')
  expectError(t, await meByCookie(u.jwt), 401, 'unauthorized', 'earlier session as cookie')
  expectError(
    t,
    await change({ current_password: newPassword, new_password: `${newPassword}x` }),
    401,
    'unauthorized',
    'change with an ended session',
  )

  expectError(t, await login({ email: u.email, password: u.password }), 401, 'invalid_credentials', 'login with the old password')
  const relogin = await login({ email: u.email, password: newPassword })
  t.equal(relogin.status, 200, 'login with the new password')
  t.equal((await me(sessionFrom(relogin))).status, 200, 'and its session works')
})

t.test('2FA setup and verify', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  clock.set(0)

  expectError(t, await twoFactor('setup', undefined), 401, 'unauthorized', 'setup without session')
  expectError(t, await twoFactor('verify', undefined, { code: '123456' }), 401, 'unauthorized', 'verify without session')
  expectError(t, await twoFactor('verify', u.jwt, { code: '123456' }), 400, 'totp_not_initialized', 'verify before setup')

  const setup = await twoFactor('setup', u.jwt)
  t.equal(setup.status, 200, JSON.stringify(setup.body))
  const secret = setup.body.secret as string
  t.match(secret, /^[A-Z2-7]+=*$/, 'secret is base32')
  t.ok(secret.replace(/=+$/, '').length >= 16, 'secret has at least 80 bits')
  const uri = setup.body.otpauth_uri as string
  t.ok(uri.startsWith('otpauth://totp/'), `otpauth_uri ${uri}`)
  const parsed = new URL(uri)
  t.equal(parsed.searchParams.get('secret'), secret, 'the URI carries the secret')
  t.ok((parsed.searchParams.get('issuer') ?? '').length > 0, 'the URI names an issuer')
  t.ok(decodeURIComponent(parsed.pathname).includes(u.email), 'the URI label names the account')
  const algorithm = parsed.searchParams.get('algorithm')
  if (algorithm !== null) t.equal(algorithm.toUpperCase(), 'SHA1')
  const digits = parsed.searchParams.get('digits')
  if (digits !== null) t.equal(digits, '6')
  const period = parsed.searchParams.get('period')
  if (period !== null) t.equal(period, '30')
  t.equal((await me(u.jwt)).body.totp_enabled, false, 'setup alone does not turn 2FA on')
  const plainLogin = await login({ email: u.email, password: u.password })
  t.equal(plainLogin.status, 200, 'login still needs no code after setup only')

  expectError(t, await twoFactor('verify', u.jwt, {}), 400, 'validation_error', 'code missing')
  expectError(t, await twoFactor('verify', u.jwt), 400, 'validation_error', 'no body')
  expectError(t, await twoFactor('verify', u.jwt, { code: 123456 }), 400, 'validation_error', 'code a number')
  const at = clock.at(0)
  expectError(t, await twoFactor('verify', u.jwt, { code: wrongCode(secret, at) }), 400, 'invalid_totp_code', 'wrong code')
  expectError(t, await twoFactor('verify', u.jwt, { code: totpCode(secret, at, 3) }), 400, 'invalid_totp_code', 'code three steps ahead')
  t.equal((await me(u.jwt)).body.totp_enabled, false, 'wrong codes do not enable')

  const verify = await twoFactor('verify', u.jwt, { code: totpCode(secret, at) })
  t.equal(verify.status, 200, JSON.stringify(verify.body))
  t.equal(verify.body.enabled, true)
  t.match(verify.body.enabled_at, isoPattern, 'enabled_at is ISO 8601')
  t.equal((await me(u.jwt)).body.totp_enabled, true, 'me shows 2FA on')
  t.equal((await me(u.jwt)).status, 200, 'the session that enabled 2FA stays valid')

  expectError(t, await twoFactor('setup', u.jwt), 409, 'totp_already_enabled', 'setup again')
  expectError(t, await twoFactor('verify', u.jwt, { code: totpCode(secret, clock.set(1)) }), 409, 'totp_already_enabled', 'verify again')
  const check = await login({ email: u.email, password: u.password, totp_code: totpCode(secret, clock.set(2)) })
  t.equal(check.status, 200, `the original secret still logs in: ${JSON.stringify(check.body)}`)
})

t.test('2FA: a second setup before verify replaces the staged secret', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  const at = clock.set(0)
  const first = (await twoFactor('setup', u.jwt)).body.secret as string
  const second = await twoFactor('setup', u.jwt)
  t.equal(second.status, 200)
  t.not(second.body.secret, first, 'a new secret')
  if (totpCode(first, at) !== totpCode(second.body.secret, at)) {
    expectError(t, await twoFactor('verify', u.jwt, { code: totpCode(first, at) }), 400, 'invalid_totp_code', 'code of the replaced secret')
  }
  const enabled = await twoFactor('verify', u.jwt, { code: totpCode(second.body.secret, at, -1) })
  t.equal(enabled.status, 200, `code of the new secret, previous step: ${JSON.stringify(enabled.body)}`)

  const v = await newVerifiedUser(h)
  const secret = (await twoFactor('setup', v.jwt)).body.secret as string
  const ahead = await twoFactor('verify', v.jwt, { code: totpCode(secret, at, 1) })
  t.equal(ahead.status, 200, `verify accepts the next step too: ${JSON.stringify(ahead.body)}`)
  expectError(
    t,
    await login({ email: v.email, password: v.password, totp_code: totpCode(secret, clock.set(1)) }),
    401,
    'invalid_totp_code',
    'the step used to enable, reached by the clock',
  )
  t.equal((await login({ email: v.email, password: v.password, totp_code: totpCode(secret, clock.at(1), 1) })).status, 200, 'the step after it works')
})

t.test('login with 2FA: required, ±1 step window, no replay', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  const secret = await enableTwoFactor(t, u, clock)

  expectError(t, await login({ email: u.email, password: u.password }), 403, 'totp_required', 'no second factor')
  expectError(
    t,
    await login({ email: u.email, password: 'wrong-password', totp_code: totpCode(secret, clock.at(0), 1) }),
    401,
    'invalid_credentials',
    'wrong password with a valid code',
  )
  expectError(
    t,
    await login({ email: u.email, password: u.password, totp_code: wrongCode(secret, clock.at(0)) }),
    401,
    'invalid_totp_code',
    'wrong code',
  )
  expectError(
    t,
    await login({ email: u.email, password: u.password, totp_code: totpCode(secret, clock.at(0)) }),
    401,
    'invalid_totp_code',
    'the step used to enable is not reusable',
  )

  let at = clock.set(2)
  const previous = await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at, -1) })
  t.equal(previous.status, 200, `code of the previous step: ${JSON.stringify(previous.body)}`)
  t.notOk(JSON.stringify(previous.body).includes(sessionFrom(previous)), 'the JWT is only in the cookie, never in the body')
  t.equal(previous.body.recovery_code_used, false)
  t.equal((await me(sessionFrom(previous))).status, 200, 'the 2FA login session works')
  expectError(
    t,
    await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at, -1) }),
    401,
    'invalid_totp_code',
    'the same code again (replay)',
  )

  at = clock.set(3)
  const next = await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at, 1) })
  t.equal(next.status, 200, `code of the next step: ${JSON.stringify(next.body)}`)

  at = clock.set(10)
  expectError(
    t,
    await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at, 2) }),
    401,
    'invalid_totp_code',
    'two steps ahead',
  )
  expectError(
    t,
    await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at, -2) }),
    401,
    'invalid_totp_code',
    'two steps behind',
  )
  const current = await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at) })
  t.equal(current.status, 200, `code of the current step: ${JSON.stringify(current.body)}`)
  expectError(
    t,
    await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at) }),
    401,
    'invalid_totp_code',
    'the current code used twice',
  )

  const malformed = await login({ email: u.email, password: u.password, totp_code: 'abcdef' })
  t.ok(malformed.status === 400 || malformed.status === 401, `a code that is not 6 digits is refused (${malformed.status})`)
  t.ok(['invalid_request', 'invalid_totp_code'].includes(malformed.body?.error?.code), 'with a documented code')
  at = clock.set(11)
  const later = await login({ email: u.email, password: u.password, totp_code: totpCode(secret, at) })
  t.equal(later.status, 200, 'a fresh step works after the refusals')
})

t.test('recovery codes: regenerate, single use, invalidated by regeneration', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  clock.set(0)
  expectError(t, await twoFactor('recovery/regenerate', u.jwt), 409, 'totp_not_enabled', 'regenerate with 2FA off')
  expectError(t, await twoFactor('recovery/regenerate', undefined), 401, 'unauthorized', 'regenerate without session')
  const secret = await enableTwoFactor(t, u, clock)

  const first = await twoFactor('recovery/regenerate', u.jwt)
  t.equal(first.status, 200, JSON.stringify(first.body))
  t.type(first.body.message, 'string')
  const codes = first.body.codes as string[]
  t.equal(codes.length, 10, 'ten codes')
  t.equal(new Set(codes).size, 10, 'all distinct')
  for (const code of codes) t.match(code, /^[a-z0-9]{4}-[a-z0-9]{4}$/, `code ${code} is xxxx-xxxx`)

  const used = await login({ email: u.email, password: u.password, recovery_code: codes[0] })
  t.equal(used.status, 200, JSON.stringify(used.body))
  t.equal(used.body.recovery_code_used, true)
  t.equal((await me(sessionFrom(used))).status, 200, 'the recovery login session works')
  expectError(
    t,
    await login({ email: u.email, password: u.password, recovery_code: codes[0] }),
    401,
    'invalid_totp_code',
    'the same recovery code again',
  )
  const unknown = codes.includes('aaaa-aaaa') ? 'bbbb-bbbb' : 'aaaa-aaaa'
  expectError(t, await login({ email: u.email, password: u.password, recovery_code: unknown }), 401, 'invalid_totp_code', 'an unknown recovery code')
  const another = await login({ email: u.email, password: u.password, recovery_code: codes[1] })
  t.equal(another.status, 200, 'another code of the set works')
  t.equal(another.body.recovery_code_used, true)

  const totp = await login({ email: u.email, password: u.password, totp_code: totpCode(secret, clock.set(1)) })
  t.equal(totp.status, 200)
  t.equal(totp.body.recovery_code_used, false, 'a TOTP login does not use a recovery code')

  const second = await twoFactor('recovery/regenerate', u.jwt)
  t.equal(second.status, 200)
  const fresh = second.body.codes as string[]
  t.equal(fresh.length, 10)
  t.equal(fresh.filter((c) => codes.includes(c)).length, 0, 'a new set')
  for (const old of [codes[2], codes[9]]) {
    expectError(
      t,
      await login({ email: u.email, password: u.password, recovery_code: old }),
      401,
      'invalid_totp_code',
      `unused old code ${old} after regeneration`,
    )
  }
  const withNew = await login({ email: u.email, password: u.password, recovery_code: fresh[0] })
  t.equal(withNew.status, 200, 'a new code works')
  t.equal(withNew.body.recovery_code_used, true)
})

t.test('2FA disable', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  clock.set(0)
  expectError(t, await twoFactor('disable', u.jwt, { password: u.password, code: '123456' }), 409, 'totp_not_enabled', 'disable with 2FA off')
  const secret = await enableTwoFactor(t, u, clock)
  t.equal((await twoFactor('recovery/regenerate', u.jwt)).status, 200)
  const recovery = (await twoFactor('recovery/regenerate', u.jwt)).body.codes as string[]

  let at = clock.set(1)
  const good = () => totpCode(secret, at)
  expectError(t, await twoFactor('disable', undefined, { password: u.password, code: good() }), 401, 'unauthorized', 'no session')
  expectError(t, await twoFactor('disable', u.jwt, {}), 400, 'validation_error', 'both missing')
  expectError(t, await twoFactor('disable', u.jwt), 400, 'validation_error', 'no body')
  expectError(t, await twoFactor('disable', u.jwt, { password: u.password }), 400, 'validation_error', 'code missing')
  expectError(t, await twoFactor('disable', u.jwt, { code: good() }), 400, 'validation_error', 'password missing')
  expectError(t, await twoFactor('disable', u.jwt, { password: u.password, code: Number(good()) }), 400, 'validation_error', 'code a number')
  expectError(t, await twoFactor('disable', u.jwt, { password: 'not-the-password', code: good() }), 401, 'invalid_credentials', 'wrong password')
  expectError(t, await twoFactor('disable', u.jwt, { password: u.password, code: wrongCode(secret, at) }), 400, 'invalid_totp_code', 'wrong code')
  expectError(
    t,
    await twoFactor('disable', u.jwt, { password: u.password, code: totpCode(secret, clock.at(0)) }),
    400,
    'invalid_totp_code',
    'the step used to enable',
  )
  t.equal((await me(u.jwt)).body.totp_enabled, true, 'refused disables leave 2FA on')

  const login1 = await login({ email: u.email, password: u.password, totp_code: good() })
  t.equal(login1.status, 200)
  expectError(t, await twoFactor('disable', u.jwt, { password: u.password, code: good() }), 400, 'invalid_totp_code', 'a code already used to log in')

  at = clock.set(2)
  const disabled = await twoFactor('disable', u.jwt, { password: u.password, code: good() })
  t.equal(disabled.status, 200, JSON.stringify(disabled.body))
  t.type(disabled.body.message, 'string')
  t.equal((await me(u.jwt)).body.totp_enabled, false, 'me shows 2FA off')
  const plain = await login({ email: u.email, password: u.password })
  t.equal(plain.status, 200, `login without a code: ${JSON.stringify(plain.body)}`)
  t.equal(plain.body.recovery_code_used, false)

  expectError(
    t,
    await twoFactor('disable', u.jwt, { password: u.password, code: totpCode(secret, clock.set(3)) }),
    409,
    'totp_not_enabled',
    'disable again',
  )
  expectError(t, await twoFactor('recovery/regenerate', u.jwt), 409, 'totp_not_enabled', 'regenerate after disable')
  expectError(
    t,
    await twoFactor('verify', u.jwt, { code: totpCode(secret, clock.at(3), 1) }),
    400,
    'totp_not_initialized',
    'the secret was deleted: verify needs a new setup',
  )

  const again = await twoFactor('setup', u.jwt)
  t.equal(again.status, 200, 'setup works again')
  t.not(again.body.secret, secret, 'a new secret')
  at = clock.set(4)
  t.equal((await twoFactor('verify', u.jwt, { code: totpCode(again.body.secret, at) })).status, 200, 'and enables again')
  expectError(
    t,
    await login({ email: u.email, password: u.password, recovery_code: recovery[0] }),
    401,
    'invalid_totp_code',
    'recovery codes from before the disable are deleted',
  )
  if (totpCode(secret, clock.at(5)) !== totpCode(again.body.secret, clock.at(5))) {
    expectError(
      t,
      await login({ email: u.email, password: u.password, totp_code: totpCode(secret, clock.set(5)) }),
      401,
      'invalid_totp_code',
      'the old secret is gone',
    )
  }
})

t.test('the TOTP secret and recovery codes are not stored in plaintext', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  const secret = await enableTwoFactor(t, u, clock)
  const codes = (await twoFactor('recovery/regenerate', u.jwt)).body.codes as string[]
  t.equal(codes.length, 10)
  const used = await login({ email: u.email, password: u.password, recovery_code: codes[3] })
  t.equal(used.status, 200)

  const loaded = await userHandler.load(h.runtime.store, userHandler.ref(u.userId))
  t.ok(loaded.state, 'the user aggregate is in the log')
  t.equal(Boolean(loaded.state?.totp?.enabled_at), true, 'the loaded state has 2FA on')

  const stream = eventsStreamName(h.config.namespace)
  const info = await h.runtime.nats.jsm.streams.info(stream)
  const secretBytes = Buffer.from(secret, 'latin1')
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'
  const bits = [...secret.replace(/=+$/, '')].map((c) => alphabet.indexOf(c).toString(2).padStart(5, '0')).join('')
  const rawKey = Buffer.from((bits.match(/.{8}/g) ?? []).map((b) => parseInt(b, 2)))
  const needles: [string, Buffer][] = [
    ['base32 secret', secretBytes],
    ['lower-case base32 secret', Buffer.from(secret.toLowerCase(), 'latin1')],
    ['raw key bytes', rawKey],
    ...codes.map((c): [string, Buffer] => [`recovery code ${c}`, Buffer.from(c, 'latin1')]),
  ]
  let scanned = 0
  let userMessages = 0
  const found: string[] = []
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const msg = await h.runtime.nats.jsm.streams.getMessage(stream, { seq })
    if (msg === null) continue
    scanned++
    const data = Buffer.from(msg.data)
    if (msg.subject.endsWith(`.user.${u.userId}`)) userMessages++
    for (const [name, needle] of needles) if (data.includes(needle)) found.push(`${name} in seq ${seq} (${msg.subject})`)
    const headers = msg.header ? [...msg.header.keys()].map((k) => msg.header!.values(k).join(',')).join('\n') : ''
    for (const [name, needle] of needles) if (headers.includes(needle.toString('latin1'))) found.push(`${name} in the headers of seq ${seq}`)
  }
  t.ok(scanned > 0, `scanned ${scanned} messages`)
  t.ok(userMessages >= 4, `the user's messages were among them (${userMessages})`)
  t.same(found, [], 'no plaintext secret or recovery code in any message of the event stream')

  const rows = await eventually(
    async () => {
      const r = await h.runtime.sql<
        { kind: string; j: string }[]
      >`select kind, row_to_json(a)::text as j from activity a where a.user_id = ${u.userId}`
      return r.some((row) => row.kind === 'recovery_code_used') ? r : null
    },
    15_000,
    'the 2FA activity rows',
  )
  t.ok(
    rows.some((row) => row.kind === 'two_factor_enabled'),
    'two_factor_enabled is in the activity',
  )
  t.ok(
    rows.some((row) => row.kind === 'recovery_codes_regenerated'),
    'recovery_codes_regenerated is in the activity',
  )
  const leaks = rows.filter((row) => row.j.includes(secret) || codes.some((c) => row.j.includes(c)))
  t.same(leaks, [], 'no secret or recovery code in the activity rows')
  const profile = JSON.stringify((await me(u.jwt)).body)
  t.notOk(profile.includes(secret), 'me does not echo the secret')
})

t.test('concurrent logins with one TOTP code or one recovery code: exactly one wins', async (t) => {
  const u = await newVerifiedUser(h)
  const clock = frozenClock(t)
  const secret = await enableTwoFactor(t, u, clock)
  const codes = (await twoFactor('recovery/regenerate', u.jwt)).body.codes as string[]

  const at = clock.set(1)
  const code = totpCode(secret, at)
  const totpRace = await Promise.all(Array.from({ length: 4 }, () => login({ email: u.email, password: u.password, totp_code: code })))
  t.same(totpRace.map((r) => r.status).sort(), [200, 401, 401, 401], 'one TOTP login wins the race')
  t.same(
    totpRace.filter((r) => r.status === 401).map((r) => r.body?.error?.code),
    ['invalid_totp_code', 'invalid_totp_code', 'invalid_totp_code'],
    'the others are replays',
  )

  const recoveryRace = await Promise.all(Array.from({ length: 4 }, () => login({ email: u.email, password: u.password, recovery_code: codes[0] })))
  t.same(recoveryRace.map((r) => r.status).sort(), [200, 401, 401, 401], 'one recovery-code login wins the race')
  t.equal(recoveryRace.find((r) => r.status === 200)?.body.recovery_code_used, true)
  t.equal((await login({ email: u.email, password: u.password, recovery_code: codes[1] })).status, 200, 'the rest of the set is intact')
})

t.test('GET me and PATCH profile for a deleted account: 404 user_not_found', async (t) => {
  const u = await newVerifiedUser(h)
  const deleted = await h.platform('DELETE', `/platform/v1/account?confirm=${encodeURIComponent(u.email)}`, undefined, { jwt: u.jwt })
  t.equal(deleted.status, 200, JSON.stringify(deleted.body))
  expectError(t, await me(u.jwt), 404, 'user_not_found', 'me after deletion')
  expectError(t, await renameAs(u.jwt, 'Gone'), 404, 'user_not_found', 'profile after deletion')
})
