import { randomBytes, scryptSync } from 'node:crypto'
import t, { type Test } from 'tap'
import type { UserCommand } from '../../domain/user.ts'
import { decoyPasswordHash } from '../../services/use-cases/platform/passwords.ts'
import { userHandler } from '../../streams/aggregates.ts'
import { httpRequest, type HttpResponse, withClockShifted } from '../support/harness.ts'
import { freshEmail, freshIp, newVerifiedUser, sessionFrom, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'
import { tokenFromMail, type ReceivedMail } from '../support/smtp-sink.ts'

// The anonymous routes of the spec's Authentication section (signup, verify, login, resend,
// forgot, reset) over HTTP: body rules, success shapes, error codes, the per-account lockout and
// the per-IP window. One harness for the file (its namespace is the file's own); subtests run in
// order, so a shifted clock never overlaps another subtest.
const h = await startPlatformHarness(t, import.meta.filename)

const auth = '/platform/v1/auth'
const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/
const apiKeyPattern = /^sv_live_sk_[0-9a-f]{32}$/
const jwtPattern = /eyJ[\w-]+\.[\w-]+\.[\w-]+/
const publicLink = /https:\/\/dash\.example\.test\/\S*[?&]token=\S+/
const verifySubject = /^Verify your e-mail address$/
const resetSubject = /^Reset your password$/
const minute = 60_000
const windowMs = 15 * minute

type Options = { ip?: string; jwt?: string; cookie?: string }
const post = (route: string, body?: unknown, options: Options = {}) => h.platform('POST', `${auth}/${route}`, body, options)
const me = (jwt: string) => h.platform('GET', `${auth}/me`, undefined, { jwt })
const password = () => `pw-${randomBytes(8).toString('hex')}`

/** The error envelope of the spec: exactly `{error: {code, message, request_id}}`. */
function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status ${status} (${JSON.stringify(res.body)})`)
  t.strictSame(Object.keys(res.body ?? {}), ['error'], `${what}: only the envelope`)
  t.equal(res.body?.error?.code, code, `${what}: code ${code}`)
  t.type(res.body?.error?.message, 'string', `${what}: message`)
  t.match(res.body?.error?.request_id ?? '', ulidPattern, `${what}: request_id is a ULID`)
}

/** A Retry-After of whole seconds, at least 1 and no more than the 15-minute window. */
function retryAfterOf(t: Test, res: HttpResponse, what: string): number {
  const header = res.headers.get('retry-after') ?? ''
  t.match(header, /^\d+$/, `${what}: Retry-After is whole seconds (${header})`)
  const seconds = Number(header)
  t.ok(seconds >= 1 && seconds <= windowMs / 1000, `${what}: 1 <= Retry-After (${seconds}) <= 900`)
  return seconds
}

/** The clock of every service role moved by `ms` for the duration of `fn`, then restored. */
const withClockShiftedBy = <T>(ms: number, fn: () => Promise<T>): Promise<T> => withClockShifted(h.runtime, ms, fn)

async function timed<T>(fn: () => Promise<T>): Promise<{ res: T; ms: number }> {
  const started = performance.now()
  const res = await fn()
  return { res, ms: performance.now() - started }
}

/** Each answer (by what it answers) is a 200 holding only a `message`, none sooner than 300 ms. */
function checkVagueAnswers(t: Test, answers: Record<string, { res: HttpResponse; ms: number }>): void {
  for (const [what, { res, ms }] of Object.entries(answers)) {
    t.equal(res.status, 200, `${what}: ${JSON.stringify(res.body)}`)
    t.strictSame(Object.keys(res.body), ['message'], `${what}: only a message`)
    t.ok(ms >= 300, `${what}: answered after ${ms.toFixed(1)} ms, at least 300`)
  }
}

function mailsTo(email: string, subject: RegExp): ReceivedMail[] {
  return h.smtp.mails.filter((m) => m.to.includes(email.toLowerCase()) && subject.test(m.subject))
}

async function signUp(
  t: Test,
  body: { email: string; password: string; plan?: string },
): Promise<{ userId: string; token: string; mail: ReceivedMail }> {
  const res = await post('signup', { accept_terms: true, ...body })
  t.equal(res.status, 201, `signup ${body.email}: ${JSON.stringify(res.body)}`)
  const mail = await h.smtp.next(body.email, verifySubject)
  return { userId: res.body.user_id, token: tokenFromMail(mail), mail }
}

/** An address of exactly `length` characters: local part up to 64, labels up to 63. */
function emailOfLength(length: number): string {
  const local = `len-${randomBytes(6).toString('hex')}`.padEnd(64, 'x')
  let domain = ''
  while (local.length + 1 + domain.length + 4 < length) {
    const room = length - (local.length + 1 + domain.length + 4) - (domain === '' ? 0 : 1)
    domain += (domain === '' ? '' : '.') + 'd'.repeat(Math.min(63, Math.max(1, room)))
  }
  return `${local}@${domain}.com`
}

// Users several subtests share: one verified on the free plan, one that never verifies.
let free: { email: string; password: string; userId: string; token: string; projectId: string; projectName: string; apiKey: string }
let unverified: { email: string; password: string; userId: string }

t.test('signup answers 201 {user_id, email, message} and mails a verification link under PUBLIC_URL', async (t) => {
  const email = freshEmail('free')
  const pw = password()
  const res = await post('signup', { email, password: pw, accept_terms: true })
  t.equal(res.status, 201, JSON.stringify(res.body))
  t.strictSame(Object.keys(res.body).sort(), ['email', 'message', 'user_id'])
  t.match(res.body.user_id, /^usr_\S+$/)
  t.equal(res.body.email, email)
  t.type(res.body.message, 'string')
  t.ok(res.body.message.length > 0, 'a message')

  const mail = await h.smtp.next(email, verifySubject)
  t.strictSame(mail.to, [email])
  t.match(mail.text, publicLink, 'the link is under PUBLIC_URL and carries token=')
  const token = tokenFromMail(mail)
  t.ok(token.length >= 16, 'a token of some length')

  const verified = await post('verify', { token })
  t.equal(verified.status, 200, JSON.stringify(verified.body))
  free = {
    email,
    password: pw,
    userId: res.body.user_id,
    token,
    projectId: verified.body.project_id,
    projectName: verified.body.project_name,
    apiKey: verified.body.api_key,
  }
})

t.test('signup without a plan gets free: on GET me products[0].plan and on the first project', async (t) => {
  const login = await post('login', { email: free.email, password: free.password })
  t.equal(login.status, 200, JSON.stringify(login.body))
  t.equal(login.body.projects[0]?.plan, 'free')
  const profile = await me(sessionFrom(login))
  t.equal(profile.status, 200, JSON.stringify(profile.body))
  t.equal(profile.body.products[0]?.plan, 'free')
  t.equal(profile.body.projects[0]?.plan, 'free')
  t.equal(profile.body.projects[0]?.id, free.projectId)
})

t.test('signup with plan pro carries it to the first project (and a 128-character password works)', async (t) => {
  const email = freshEmail('pro')
  const pw = 'p'.repeat(120) + randomBytes(4).toString('hex')
  t.equal(pw.length, 128)
  const { token } = await signUp(t, { email, password: pw, plan: 'pro' })
  const verified = await post('verify', { token })
  t.equal(verified.status, 200, JSON.stringify(verified.body))
  const login = await post('login', { email, password: pw })
  t.equal(login.status, 200, JSON.stringify(login.body))
  t.strictSame(
    login.body.projects.map((p: { plan: string }) => p.plan),
    ['pro'],
  )
  const profile = await me(sessionFrom(login))
  t.equal(profile.body.products[0]?.plan, 'pro')
  t.equal(profile.body.projects[0]?.plan, 'pro')
})

t.test('signup accepts the boundaries: an 8-character password and a 320-character address', async (t) => {
  const email = emailOfLength(320)
  t.equal(email.length, 320)
  const res = await post('signup', { email, password: 'eight-ch', accept_terms: true })
  t.equal(res.status, 201, JSON.stringify(res.body))
  t.equal(res.body.email, email)
})

t.test('signup body rules: 400 invalid_request', async (t) => {
  const email = freshEmail('rules')
  const ok = { email, password: password(), accept_terms: true }
  const { email: _e, ...noEmail } = ok
  const { password: _p, ...noPassword } = ok
  const { accept_terms: _a, ...noTerms } = ok
  const cases: Array<[string, unknown]> = [
    ['no body', undefined],
    ['empty object', {}],
    ['email missing', noEmail],
    ['password missing', noPassword],
    ['accept_terms missing', noTerms],
    ['accept_terms false', { ...ok, accept_terms: false }],
    ['accept_terms the string "true"', { ...ok, accept_terms: 'true' }],
    ['accept_terms 1', { ...ok, accept_terms: 1 }],
    ['password of 7 characters', { ...ok, password: 'seven-c' }],
    ['password of 129 characters', { ...ok, password: 'x'.repeat(129) }],
    ['email of 321 characters', { ...ok, email: emailOfLength(321) }],
    ['email a number', { ...ok, email: 42 }],
    ['email null', { ...ok, email: null }],
    ['password a number', { ...ok, password: 12345678 }],
    ['plan a number', { ...ok, plan: 3 }],
    ['unknown plan', { ...ok, plan: 'platinum' }],
    ['plan enterprise (not self-serve)', { ...ok, plan: 'enterprise' }],
    ['body an array', [ok]],
  ]
  t.equal(emailOfLength(321).length, 321)
  for (const [what, body] of cases) isError(t, await post('signup', body), 400, 'invalid_request', what)
  // None of them created the account: the address is still free.
  const created = await post('signup', ok)
  t.equal(created.status, 201, `the address was not taken by a refused signup: ${JSON.stringify(created.body)}`)
  await h.smtp.next(email, verifySubject)
})

t.test('signup with a present but malformed address: 422 invalid_email', async (t) => {
  for (const email of ['not-an-email', 'user@', '@example.com', 'two@@example.com', 'sp ace@example.com']) {
    isError(t, await post('signup', { email, password: password(), accept_terms: true }), 422, 'invalid_email', JSON.stringify(email))
  }
})

t.test('signup with a registered address, also differently cased: 409 email_already_registered', async (t) => {
  isError(t, await post('signup', { email: free.email, password: password(), accept_terms: true }), 409, 'email_already_registered', 'same address')
  isError(
    t,
    await post('signup', { email: free.email.toUpperCase(), password: password(), accept_terms: true }),
    409,
    'email_already_registered',
    'upper-cased',
  )
  const [local, domain] = free.email.split('@')
  isError(
    t,
    await post('signup', { email: `${local}@${domain!.toUpperCase()}`, password: password(), accept_terms: true }),
    409,
    'email_already_registered',
    'domain upper-cased',
  )
  // The original account is untouched.
  const login = await post('login', { email: free.email, password: free.password })
  t.equal(login.status, 200, JSON.stringify(login.body))
})

t.test('verify answers {user_id, project_id, project_name, api_key, message}; the key works', async (t) => {
  const email = freshEmail('verify')
  const pw = password()
  const { userId, token } = await signUp(t, { email, password: pw })
  const res = await post('verify', { token })
  t.equal(res.status, 200, JSON.stringify(res.body))
  t.strictSame(Object.keys(res.body).sort(), ['api_key', 'message', 'project_id', 'project_name', 'user_id'])
  t.equal(res.body.user_id, userId)
  t.match(res.body.project_id, /^prj_\S+$/)
  t.type(res.body.project_name, 'string')
  t.ok(res.body.project_name.length > 0, 'a project name')
  t.match(res.body.api_key, apiKeyPattern)
  t.equal(res.body.api_key.length, 43)
  t.type(res.body.message, 'string')

  const jobs = await httpRequest(h.url, res.body.api_key, 'GET', '/jobsvc/v1/jobs')
  t.equal(jobs.status, 200, `the new key reads jobs: ${JSON.stringify(jobs.body)}`)
  t.strictSame(jobs.body.data, [], 'a new project has no jobs')

  isError(t, await post('verify', { token }), 400, 'invalid_verification_token', 'second use')
  // The first verification's key is still the project's key.
  t.equal((await httpRequest(h.url, res.body.api_key, 'GET', '/jobsvc/v1/jobs')).status, 200)
  const login = await post('login', { email, password: pw })
  t.strictSame(
    login.body.projects.map((p: { id: string }) => p.id),
    [res.body.project_id],
    'one project, not two',
  )
})

t.test('verify refuses bad tokens: 400 invalid_verification_token; a missing one is invalid_request', async (t) => {
  const last = free.token.at(-1)!
  const tampered = free.token.slice(0, -1) + (last === 'a' ? 'b' : 'a')
  const bad: Array<[string, string]> = [
    ['garbage', 'garbage'],
    ['random hex', randomBytes(32).toString('hex')],
    ['a user id with a wrong secret', `${free.userId}.${randomBytes(24).toString('base64url')}`],
    ['the used token with its last character changed', tampered],
    ['the token already used by the free user', free.token],
  ]
  for (const [what, token] of bad) isError(t, await post('verify', { token }), 400, 'invalid_verification_token', what)
  isError(t, await post('verify', {}), 400, 'invalid_request', 'token missing')
  isError(t, await post('verify', { token: 12345 }), 400, 'invalid_request', 'token a number')
})

t.test('a verification token older than 24 h is refused; resend issues a new token that works', async (t) => {
  const email = freshEmail('expired')
  const pw = password()
  const { token } = await signUp(t, { email, password: pw })
  const refused = await withClockShiftedBy(24 * 60 * minute + minute, () => post('verify', { token }))
  isError(t, refused, 400, 'invalid_verification_token', '24 h + 1 min later')
  isError(t, await post('login', { email, password: pw }), 403, 'email_not_verified', 'still unverified')

  const resent = await post('resend', { email })
  t.equal(resent.status, 200, JSON.stringify(resent.body))
  const mail = await h.smtp.next(email, verifySubject)
  t.match(mail.text, publicLink)
  const fresh = tokenFromMail(mail)
  t.not(fresh, token, 'a new token')
  const verified = await post('verify', { token: fresh })
  t.equal(verified.status, 200, JSON.stringify(verified.body))
  t.match(verified.body.api_key, apiKeyPattern)
  const login = await post('login', { email, password: pw })
  t.equal(login.status, 200, JSON.stringify(login.body))
})

t.test('a resent verification token lives 24 h from the resend, not from the signup', async (t) => {
  const email = freshEmail('resent')
  const pw = password()
  const { token: first } = await signUp(t, { email, password: pw })
  const hour = 60 * minute
  const resent = await withClockShiftedBy(23 * hour, () => post('resend', { email }))
  t.equal(resent.status, 200, JSON.stringify(resent.body))
  const second = tokenFromMail(await h.smtp.next(email, verifySubject))
  t.not(second, first)
  // 46 h after the signup: the first token would be long expired, the resent one is 23 h old.
  const verified = await withClockShiftedBy(46 * hour, () => post('verify', { token: second }))
  t.equal(verified.status, 200, `23 h after the resend: ${JSON.stringify(verified.body)}`)
  t.match(verified.body.api_key, apiKeyPattern)
})

t.test('login answers the spec shape, no JWT in the body, and the sv_jwt cookie with its attributes', async (t) => {
  const res = await post('login', { email: free.email, password: free.password })
  t.equal(res.status, 200, JSON.stringify(res.body))
  t.strictSame(Object.keys(res.body).sort(), ['email', 'email_verified', 'projects', 'recovery_code_used', 'user_id'])
  t.equal(res.body.user_id, free.userId)
  t.equal(res.body.email, free.email)
  t.equal(res.body.email_verified, true)
  t.equal(res.body.recovery_code_used, false)
  t.strictSame(res.body.projects, [{ id: free.projectId, name: free.projectName, plan: 'free', api_key_prefix: free.apiKey.slice(0, 24) }])
  t.equal(res.body.projects[0].api_key_prefix.length, 24)

  const cookie = res.headers.get('set-cookie') ?? ''
  const jwt = sessionFrom(res)
  t.match(jwt, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'the cookie holds a JWT')
  const text = JSON.stringify(res.body)
  t.notOk(text.includes(jwt), 'the JWT is not in the body')
  t.notOk(jwtPattern.test(text), 'nothing JWT-like in the body')
  t.notOk(text.includes(free.apiKey), 'the plaintext key is not in the body')

  const [first, ...attributes] = cookie.split(';').map((p) => p.trim())
  t.equal(first, `sv_jwt=${jwt}`)
  const lower = attributes.map((a) => a.toLowerCase())
  t.ok(lower.includes('httponly'), `HttpOnly in ${cookie}`)
  t.ok(lower.includes('secure'), `Secure in ${cookie}`)
  t.ok(lower.includes('samesite=strict'), `SameSite=Strict in ${cookie}`)
  t.ok(lower.includes('path=/'), `Path=/ in ${cookie}`)

  const viaCookie = await h.platform('GET', `${auth}/me`, undefined, { cookie: `sv_jwt=${jwt}` })
  t.equal(viaCookie.status, 200, 'the cookie opens a session')
  t.equal(viaCookie.body.user_id, free.userId)
})

t.test('login with a wrong password or an unknown address: 401 invalid_credentials, alike', async (t) => {
  const wrong = await post('login', { email: free.email, password: `${free.password}-wrong` })
  const unknown = await post('login', { email: freshEmail('nobody'), password: free.password })
  isError(t, wrong, 401, 'invalid_credentials', 'wrong password')
  isError(t, unknown, 401, 'invalid_credentials', 'unknown address')
  t.equal(wrong.body.error.message, unknown.body.error.message, 'the same message: nothing tells which')
  t.notOk(wrong.headers.get('set-cookie')?.includes('sv_jwt=ey'), 'no session on failure')
})

t.test("passwords: scrypt at OWASP's minimum; an older hash is upgraded at the next successful login", async (t) => {
  const owasp = /^scrypt\$131072\$8\$1\$[\w-]{22}\$[\w-]{43}$/
  const u = await newVerifiedUser(h)
  const stored = async () => (await userHandler.load(h.runtime.store, userHandler.ref(u.userId))).state!
  t.match((await stored()).password_hash, owasp, 'a new hash is scrypt N=2^17, r=8, p=1 (OWASP Password Storage Cheat Sheet)')
  t.match(await decoyPasswordHash(), owasp, 'the decoy hash for unknown addresses has the same parameters')

  // A hash from before the change (N = 2^15), written as a password change would have written it.
  const salt = randomBytes(16)
  const weak = [
    'scrypt',
    2 ** 15,
    8,
    1,
    salt.toString('base64url'),
    scryptSync(u.password.normalize('NFKC'), salt, 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 }).toString('base64url'),
  ].join('$')
  const command: UserCommand = { type: 'change_password', data: { password_hash: weak }, meta: { now: new Date().toISOString() } }
  await userHandler.decide(h.runtime, userHandler.ref(u.userId), command)
  const before = await stored()
  t.equal(before.password_hash, weak, 'the user now has an N=2^15 hash')

  isError(
    t,
    await post('login', { email: u.email, password: `${u.password}-wrong` }),
    401,
    'invalid_credentials',
    'a wrong password against the old hash',
  )
  t.equal((await stored()).password_hash, weak, 'a failed login upgrades nothing')

  const login = await post('login', { email: u.email, password: u.password })
  t.equal(login.status, 200, `the old hash still verifies: ${JSON.stringify(login.body)}`)
  const after = await stored()
  t.match(after.password_hash, owasp, 'the successful login replaced it with an N=2^17 hash')
  t.equal(after.password_changed_at, before.password_changed_at, 'the upgrade is not a password change')
  t.equal((await me(sessionFrom(login))).status, 200, 'so the session just issued stays valid')
  const history = await userHandler.history(h.runtime.store, userHandler.ref(u.userId))
  t.equal(history.flatMap((r) => r.message.events).filter((e) => e.type === 'password_rehashed').length, 1, 'one password_rehashed event on the user')

  const again = await post('login', { email: u.email, password: u.password })
  t.equal(again.status, 200, 'the upgraded hash verifies')
  t.equal((await stored()).password_hash, after.password_hash, 'and is not hashed again')
})

t.test('login of an unverified account: 403 email_not_verified only with the right password', async (t) => {
  const email = freshEmail('unverified')
  const pw = password()
  const { userId } = await signUp(t, { email, password: pw })
  unverified = { email, password: pw, userId }
  isError(t, await post('login', { email, password: pw }), 403, 'email_not_verified', 'right password')
  isError(t, await post('login', { email, password: `${pw}-wrong` }), 401, 'invalid_credentials', 'wrong password')
})

t.test('login body rules: 400 invalid_request', async (t) => {
  const ok = { email: free.email, password: free.password }
  const cases: Array<[string, unknown]> = [
    ['no body', undefined],
    ['email missing', { password: ok.password }],
    ['password missing', { email: ok.email }],
    ['email a number', { ...ok, email: 7 }],
    ['password a number', { ...ok, password: 12345678 }],
    ['totp_code of 5 digits', { ...ok, totp_code: '12345' }],
    ['totp_code of 7 digits', { ...ok, totp_code: '1234567' }],
    ['totp_code not digits', { ...ok, totp_code: 'abcdef' }],
    ['totp_code a number', { ...ok, totp_code: 123456 }],
    ['recovery_code not xxxx-xxxx', { ...ok, recovery_code: 'abc' }],
  ]
  for (const [what, body] of cases) isError(t, await post('login', body), 400, 'invalid_request', what)
})

t.test('10 failed logins lock the account: 429 account_locked with Retry-After, even with the right password', async (t) => {
  const u = await newVerifiedUser(h)
  const wrong = { email: u.email, password: `${u.password}-wrong` }
  for (let i = 1; i <= 10; i++) isError(t, await post('login', wrong), 401, 'invalid_credentials', `failure ${i}`)

  const locked = await post('login', { email: u.email, password: u.password })
  isError(t, locked, 429, 'account_locked', '11th attempt, right password')
  retryAfterOf(t, locked, 'account_locked')
  t.notOk(locked.headers.get('set-cookie')?.includes('sv_jwt=ey'), 'no session while locked')
  isError(t, await post('login', wrong), 429, 'account_locked', 'a wrong password while locked')
  isError(t, await post('login', { email: u.email, password: u.password }, { ip: freshIp() }), 429, 'account_locked', 'from yet another address')

  // The window is 15 minutes: past it the account logs in again.
  const later = await withClockShiftedBy(windowMs + minute, () => post('login', { email: u.email, password: u.password }))
  t.equal(later.status, 200, `15 min later: ${JSON.stringify(later.body)}`)
  sessionFrom(later)
})

t.test('100 parallel wrong passwords: at most 10 are checked, the rest are 429 account_locked', async (t) => {
  const u = await newVerifiedUser(h)
  // Each from its own address (TEST-NET-1), so only the per-account lockout can refuse them.
  const answers = await Promise.all(
    Array.from({ length: 100 }, (_, i) => post('login', { email: u.email, password: `${u.password}-wrong-${i}` }, { ip: `192.0.2.${i + 1}` })),
  )
  const tally = new Map<string, number>()
  for (const res of answers) tally.set(`${res.status} ${res.body?.error?.code}`, (tally.get(`${res.status} ${res.body?.error?.code}`) ?? 0) + 1)
  const checked = tally.get('401 invalid_credentials') ?? 0
  const locked = tally.get('429 account_locked') ?? 0
  t.ok(checked >= 1 && checked <= 10, `at most 10 passwords were verified (401 invalid_credentials: ${checked}; all: ${JSON.stringify([...tally])})`)
  t.equal(checked + locked, 100, 'every other attempt was refused as locked, none with another answer')
  for (const res of answers.filter((r) => r.status === 429)) retryAfterOf(t, res, 'a parallel account_locked')
  isError(t, await post('login', { email: u.email, password: u.password }), 429, 'account_locked', 'then the right password')
})

t.test('a successful login before the 10th failure resets the count', async (t) => {
  const u = await newVerifiedUser(h)
  const wrong = { email: u.email, password: `${u.password}-wrong` }
  for (let i = 1; i <= 9; i++) isError(t, await post('login', wrong), 401, 'invalid_credentials', `first round, failure ${i}`)
  const between = await post('login', { email: u.email, password: u.password })
  t.equal(between.status, 200, `after 9 failures: ${JSON.stringify(between.body)}`)
  for (let i = 1; i <= 9; i++) isError(t, await post('login', wrong), 401, 'invalid_credentials', `second round, failure ${i}`)
  const after = await post('login', { email: u.email, password: u.password })
  t.equal(after.status, 200, `18 failures in the window, but never 10 in a row: ${JSON.stringify(after.body)}`)
})

t.test('a password reset clears the lock', async (t) => {
  const u = await newVerifiedUser(h)
  for (let i = 1; i <= 10; i++) {
    isError(t, await post('login', { email: u.email, password: `${u.password}-wrong` }), 401, 'invalid_credentials', `failure ${i}`)
  }
  isError(t, await post('login', { email: u.email, password: u.password }), 429, 'account_locked', 'locked')
  t.equal((await post('forgot', { email: u.email })).status, 200)
  const token = tokenFromMail(await h.smtp.next(u.email, resetSubject))
  const newPassword = `reset-${randomBytes(6).toString('hex')}`
  const reset = await post('reset', { token, new_password: newPassword })
  t.equal(reset.status, 200, JSON.stringify(reset.body))
  const login = await post('login', { email: u.email, password: newPassword })
  t.equal(login.status, 200, `after the reset: ${JSON.stringify(login.body)}`)
})

t.test('per IP: 20 anonymous POSTs are answered, the 21st on any of the six routes is 429 rate_limit_exceeded', async (t) => {
  // An address outside freshIp's range, so no other request of this file shares its window.
  const ip = '203.0.113.77'
  const email = freshEmail('perip')
  const pw = password()
  const newPw = `newpw-${randomBytes(6).toString('hex')}`
  const steps: Array<[string, () => Promise<HttpResponse>, number]> = []
  let verifyToken = ''
  let resetToken = ''
  const step = (what: string, status: number, send: () => Promise<HttpResponse>) => steps.push([what, send, status])
  step('signup, email missing', 400, () => post('signup', { password: pw, accept_terms: true }, { ip }))
  step('signup, malformed email', 422, () => post('signup', { email: 'nope', password: pw, accept_terms: true }, { ip }))
  step('signup', 201, () => post('signup', { email, password: pw, accept_terms: true }, { ip }))
  step('signup again', 409, () => post('signup', { email, password: pw, accept_terms: true }, { ip }))
  step('verify garbage', 400, () => post('verify', { token: 'garbage' }, { ip }))
  step('verify', 200, async () => {
    verifyToken = tokenFromMail(await h.smtp.next(email, verifySubject))
    return post('verify', { token: verifyToken }, { ip })
  })
  step('verify again', 400, () => post('verify', { token: verifyToken }, { ip }))
  step('login', 200, () => post('login', { email, password: pw }, { ip }))
  step('login, wrong password', 401, () => post('login', { email, password: `${pw}-x` }, { ip }))
  step('login, unknown address', 401, () => post('login', { email: freshEmail('ghost'), password: pw }, { ip }))
  step('login, no body', 400, () => post('login', undefined, { ip }))
  step('resend, unknown address', 200, () => post('resend', { email: freshEmail('ghost') }, { ip }))
  step('resend, verified address', 200, () => post('resend', { email }, { ip }))
  step('resend, empty body', 400, () => post('resend', {}, { ip }))
  step('forgot', 200, () => post('forgot', { email }, { ip }))
  step('forgot, email a number', 400, () => post('forgot', { email: 5 }, { ip }))
  step('reset, garbage token', 400, () => post('reset', { token: 'garbage', new_password: newPw }, { ip }))
  step('reset, short password', 400, () => post('reset', { token: 'garbage', new_password: 'short' }, { ip }))
  step('reset', 200, async () => {
    resetToken = tokenFromMail(await h.smtp.next(email, resetSubject))
    return post('reset', { token: resetToken, new_password: newPw }, { ip })
  })
  step('login with the new password', 200, () => post('login', { email, password: newPw }, { ip }))
  t.equal(steps.length, 20)
  for (const [what, send, status] of steps) {
    const res = await send()
    t.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`)
  }

  const overLimit: Array<[string, unknown]> = [
    ['signup', { email: freshEmail('late'), password: pw, accept_terms: true }],
    ['verify', { token: 'garbage' }],
    ['login', { email, password: newPw }],
    ['resend', { email }],
    ['forgot', { email }],
    ['reset', { token: 'garbage', new_password: newPw }],
  ]
  for (const [route, body] of overLimit) {
    const res = await post(route, body, { ip })
    isError(t, res, 429, 'rate_limit_exceeded', `21st+ POST: ${route}`)
    retryAfterOf(t, res, `rate_limit_exceeded on ${route}`)
  }
  isError(t, await post('signup', 'not json', { ip }), 429, 'rate_limit_exceeded', 'even an unreadable body')
  t.equal(mailsTo(email, resetSubject).length, 1, 'the refused forgot sent no mail')

  // The window slides: 15 minutes later the address is admitted again.
  const later = await withClockShiftedBy(windowMs + minute, () => post('resend', { email: freshEmail('later') }, { ip }))
  t.equal(later.status, 200, `15 min later: ${JSON.stringify(later.body)}`)

  const elsewhere = await post('login', { email, password: newPw }, { ip: '203.0.113.78' })
  t.equal(elsewhere.status, 200, `another address still logs in: ${JSON.stringify(elsewhere.body)}`)
  const logout = await post('logout', undefined, { ip })
  t.equal(logout.status, 204, 'logout is not one of the six anonymous routes')
})

t.test('resend answers the same {message} for unknown, unverified and verified addresses, no sooner than 300 ms', async (t) => {
  const verifiedMailsBefore = mailsTo(free.email, verifySubject).length
  const unknown = await timed(() => post('resend', { email: freshEmail('unknown') }))
  const pending = await timed(() => post('resend', { email: unverified.email }))
  const done = await timed(() => post('resend', { email: free.email }))
  checkVagueAnswers(t, { unknown, unverified: pending, verified: done })
  t.equal(pending.res.body.message, unknown.res.body.message, 'unverified and unknown alike')
  t.equal(done.res.body.message, unknown.res.body.message, 'verified and unknown alike')

  const mail = await h.smtp.next(unverified.email, verifySubject)
  t.match(mail.text, publicLink, 'the unverified address gets a new link')
  t.equal(mailsTo(free.email, verifySubject).length, verifiedMailsBefore, 'a verified address gets nothing')
  const verified = await post('verify', { token: tokenFromMail(mail) })
  t.equal(verified.status, 200, `the resent token verifies: ${JSON.stringify(verified.body)}`)
  t.equal(verified.body.user_id, unverified.userId)

  isError(t, await post('resend', {}), 400, 'invalid_request', 'email missing')
  isError(t, await post('resend', { email: `${'a'.repeat(310)}@example.com` }), 400, 'invalid_request', 'email over 320')
})

t.test('forgot answers the same {message} for registered and unknown addresses, no sooner than 300 ms', async (t) => {
  const known = await timed(() => post('forgot', { email: free.email }))
  const unknownEmail = freshEmail('unknown')
  const unknown = await timed(() => post('forgot', { email: unknownEmail }))
  checkVagueAnswers(t, { registered: known, unknown })
  t.strictSame(known.res.body, unknown.res.body, 'identical answers')
  const mail = await h.smtp.next(free.email, resetSubject)
  t.match(mail.text, publicLink)
  t.equal(mailsTo(unknownEmail, /./).length, 0, 'nothing sent to an unknown address')

  isError(t, await post('forgot', {}), 400, 'invalid_request', 'email missing')
  isError(t, await post('forgot', { email: `${'a'.repeat(310)}@example.com` }), 400, 'invalid_request', 'email over 320')
})

t.test('reset: body rules, success, single use, and every earlier session ends', async (t) => {
  const u: VerifiedUser = await newVerifiedUser(h)
  t.equal((await me(u.jwt)).status, 200, 'the session works before the reset')
  t.equal((await post('forgot', { email: u.email })).status, 200)
  const mail = await h.smtp.next(u.email, resetSubject)
  t.match(mail.text, publicLink, 'the reset link is under PUBLIC_URL and carries token=')
  const token = tokenFromMail(mail)

  isError(t, await post('reset', { token, new_password: 'nine-char' }), 400, 'invalid_request', 'new_password of 9')
  isError(t, await post('reset', { token, new_password: 'x'.repeat(129) }), 400, 'invalid_request', 'new_password of 129')
  isError(t, await post('reset', { token }), 400, 'invalid_request', 'new_password missing')
  isError(t, await post('reset', { new_password: 'long-enough-pw' }), 400, 'invalid_request', 'token missing')
  isError(t, await post('reset', { token, new_password: 1234567890 }), 400, 'invalid_request', 'new_password a number')
  isError(t, await post('reset', { token: 'garbage', new_password: 'long-enough-pw' }), 400, 'invalid_reset_token', 'garbage token')
  isError(
    t,
    await post('reset', { token: `${u.userId}.${randomBytes(24).toString('base64url')}`, new_password: 'long-enough-pw' }),
    400,
    'invalid_reset_token',
    'wrong secret',
  )

  const newPassword = `r-${randomBytes(4).toString('hex')}`
  t.equal(newPassword.length, 10)
  const reset = await post('reset', { token, new_password: newPassword })
  t.equal(reset.status, 200, `a 10-character password after refused attempts: ${JSON.stringify(reset.body)}`)
  t.strictSame(Object.keys(reset.body), ['message'])
  t.type(reset.body.message, 'string')

  isError(t, await me(u.jwt), 401, 'unauthorized', 'a JWT issued before the reset')
  isError(t, await h.platform('GET', `${auth}/me`, undefined, { cookie: `sv_jwt=${u.jwt}` }), 401, 'unauthorized', 'the same JWT as a cookie')
  isError(t, await post('login', { email: u.email, password: u.password }), 401, 'invalid_credentials', 'the old password')
  const login = await post('login', { email: u.email, password: newPassword })
  t.equal(login.status, 200, `the new password: ${JSON.stringify(login.body)}`)
  t.equal((await me(sessionFrom(login))).status, 200, 'a session issued after the reset works')

  isError(t, await post('reset', { token, new_password: `again-${randomBytes(4).toString('hex')}` }), 400, 'invalid_reset_token', 'the token again')
  t.equal((await post('login', { email: u.email, password: newPassword })).status, 200, 'the reused token changed nothing')
})

t.test('a reset token older than 1 hour is refused', async (t) => {
  const u = await newVerifiedUser(h)
  t.equal((await post('forgot', { email: u.email })).status, 200)
  const token = tokenFromMail(await h.smtp.next(u.email, resetSubject))
  const late = await withClockShiftedBy(60 * minute + minute, () => post('reset', { token, new_password: `late-${randomBytes(4).toString('hex')}` }))
  isError(t, late, 400, 'invalid_reset_token', '1 h + 1 min later')
  const login = await post('login', { email: u.email, password: u.password })
  t.equal(login.status, 200, `the password is unchanged: ${JSON.stringify(login.body)}`)
  t.equal((await me(u.jwt)).status, 200, 'and the earlier session still works')

  // Within the hour a token works. Last in this file: the reset is recorded at the shifted
  // instant, so sessions issued at the real time afterwards would count as earlier ones.
  t.equal((await post('forgot', { email: u.email })).status, 200)
  const timely = tokenFromMail(await h.smtp.next(u.email, resetSubject))
  const newPassword = `timely-${randomBytes(4).toString('hex')}`
  const reset = await withClockShiftedBy(58 * minute, () => post('reset', { token: timely, new_password: newPassword }))
  t.equal(reset.status, 200, `58 min later: ${JSON.stringify(reset.body)}`)
  t.equal((await post('login', { email: u.email, password: newPassword })).status, 200, 'the new password works')
})
