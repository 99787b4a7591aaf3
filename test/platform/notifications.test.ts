import t, { type Test } from 'tap'
import { resolvePlans } from '../../domain/plans.ts'
import { signPayload } from '../../services/use-cases/metering/provider-signature.ts'
import { eventually, httpRequest, type HttpResponse } from '../support/harness.ts'
import { freshEmail, freshIp, newVerifiedUser, sessionFrom, startPlatformHarness, totpCode, type VerifiedUser } from '../support/platform.ts'
import { tokenFromMail } from '../support/smtp-sink.ts'

// Notification preferences, security notices and the e-mail provider's webhook, over HTTP against
// the whole service (docs/api-notes.md, "Notifications"). Every e-mail here is sent inside the request that
// causes it, so once the answer is in, a mail that was going to be sent is in the sink: a mail
// that is not there was not sent. The starter allowance is cut to 5 so its 80 % mark is 4 jobs.
const emailWebhookSecret = 'email-provider-secret-0123456789'
const h = await startPlatformHarness(t, import.meta.filename, {
  config: { emailWebhookSecret, plans: resolvePlans({ starter: { monthly_jobs: 5 } }) },
})

const preferencesPath = '/platform/v1/account/notifications'
const defaults = { security_notices: true, allowance_warnings: true, overage_charges: true, alert_emails: true, product_news: false }

function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status ${status} (got ${res.status} ${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code ${code}`)
}

/** Changes the password; resolves to the fresh session the answer sets. */
async function changePassword(t: Test, jwt: string, current: string, next: string): Promise<string> {
  const res = await h.platform('POST', '/platform/v1/auth/change-password', { current_password: current, new_password: next }, { jwt })
  t.equal(res.status, 200, `change-password: ${JSON.stringify(res.body)}`)
  return sessionFrom(res)
}

const mailsTo = (email: string, subject: RegExp) => h.smtp.mails.filter((m) => m.to.includes(email.toLowerCase()) && subject.test(m.subject))

async function userActivityKinds(userId: string): Promise<string[]> {
  const rows = await h.runtime.sql<{ kind: string }[]>`SELECT kind FROM activity WHERE user_id = ${userId} ORDER BY seq, id`
  return rows.map((r) => r.kind)
}

function providerEvent(type: string, address: string, at = new Date()) {
  return JSON.stringify({ id: `pe_${Math.random().toString(36).slice(2)}`, type, address, timestamp: at.toISOString() })
}

const sendProviderEvent = (body: string, signature?: string, ip?: string) =>
  h.platform('POST', '/platform/v1/email/webhook', body, { ip, headers: signature === undefined ? {} : { 'jobsvc-signature': signature } })
const signedProviderEvent = (body: string) => sendProviderEvent(body, signPayload(emailWebhookSecret, body, new Date()))

t.test('preferences: the defaults, a partial update, and security notices that cannot be turned off', async (t) => {
  const u = await newVerifiedUser(h)
  const read = await h.platform('GET', preferencesPath, undefined, { jwt: u.jwt })
  t.equal(read.status, 200)
  t.strictSame(read.body, defaults, 'every notice on, product news off')

  const updated = await h.platform('PATCH', preferencesPath, { allowance_warnings: false, product_news: true }, { jwt: u.jwt })
  t.equal(updated.status, 200, JSON.stringify(updated.body))
  const expected = { ...defaults, allowance_warnings: false, product_news: true }
  t.strictSame(updated.body, expected, 'the answer is the whole set')
  t.strictSame((await h.platform('GET', preferencesPath, undefined, { jwt: u.jwt })).body, expected, 'read back')
  t.strictSame((await h.platform('PATCH', preferencesPath, { security_notices: true }, { jwt: u.jwt })).body, expected, 'keeping them on is fine')

  isError(
    t,
    await h.platform('PATCH', preferencesPath, { security_notices: false, alert_emails: false }, { jwt: u.jwt }),
    400,
    'security_notices_required',
    'turning security notices off',
  )
  t.strictSame((await h.platform('GET', preferencesPath, undefined, { jwt: u.jwt })).body, expected, 'a refused update changes nothing')
  isError(t, await h.platform('PATCH', preferencesPath, { newsletter: false }, { jwt: u.jwt }), 400, 'invalid_request', 'an unknown topic')
  isError(t, await h.platform('PATCH', preferencesPath, { alert_emails: 'no' }, { jwt: u.jwt }), 400, 'invalid_request', 'not a boolean')
  isError(t, await h.platform('GET', preferencesPath), 401, 'unauthorized', 'without a session')

  const kinds = await eventually(async () => {
    const k = await userActivityKinds(u.userId)
    return k.includes('notification_preferences_updated') && k
  })
  t.equal(kinds.filter((k) => k === 'notification_preferences_updated').length, 1, 'one activity row: the no-op and the refusal wrote none')
})

t.test('a turned-off allowance warning is not sent, while other owners get theirs and the same owner gets other e-mails', async (t) => {
  const quiet = await newVerifiedUser(h, { plan: 'starter' })
  const mailed = await newVerifiedUser(h, { plan: 'starter' })
  t.equal((await h.platform('PATCH', preferencesPath, { allowance_warnings: false }, { jwt: quiet.jwt })).status, 200)
  for (const owner of [quiet, mailed]) {
    for (let i = 0; i < 4; i++) {
      const res = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'notify.test', payload: { i } })
      t.equal(res.status, 201, JSON.stringify(res.body))
    }
  }
  await h.smtp.next(mailed.email, /80% of this month's job allowance used/)
  await eventually(
    async () => (await h.runtime.sql`SELECT 1 FROM activity WHERE project_id = ${quiet.projectId} AND kind = 'allowance_warning_80'`).length > 0,
    15_000,
    "the quiet owner's 80 % warning is recorded",
  )
  t.equal(mailsTo(quiet.email, /allowance/).length, 0, 'the owner who turned allowance warnings off got none')

  await changePassword(t, quiet.jwt, quiet.password, 'a-new-password-1')
  await h.smtp.next(quiet.email, /^Security notice: Your password was changed$/)
})

t.test('security notices: password changed and reset, 2FA on and off, a recovery code, key rotation and revocation, a new sign-in', async (t) => {
  const u = await newVerifiedUser(h)
  const notice = (subject: RegExp) => h.smtp.next(u.email, subject)
  const ip = freshIp()
  let jwt = sessionFrom(await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: u.password }, { ip }))
  const signIn = await notice(/^Security notice: A sign-in from a new device$/)
  t.match(signIn.text, ip, 'the notice names where the sign-in came from')
  t.match(signIn.text, 'cannot be turned off')
  t.equal((await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: u.password }, { ip })).status, 200)
  t.equal(mailsTo(u.email, /new device/).length, 1, 'a second sign-in from the same device is not new')

  let password = 'changed-password-1'
  jwt = await changePassword(t, jwt, u.password, password)
  await notice(/^Security notice: Your password was changed$/)

  t.equal((await h.platform('POST', '/platform/v1/auth/forgot', { email: u.email })).status, 200)
  const token = tokenFromMail(await h.smtp.next(u.email, /reset your password/i))
  password = 'reset-password-22'
  t.equal((await h.platform('POST', '/platform/v1/auth/reset', { token, new_password: password })).status, 200)
  await notice(/^Security notice: Your password was reset/)
  jwt = sessionFrom(await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password }, { ip }))

  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt })
  const secret = setup.body.secret as string
  t.equal((await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(secret) }, { jwt })).status, 200)
  await notice(/^Security notice: Two-factor authentication was enabled$/)

  const codes = (await h.platform('POST', '/platform/v1/auth/2fa/recovery/regenerate', undefined, { jwt })).body.codes as string[]
  const recovered = await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password, recovery_code: codes[0] }, { ip })
  t.equal(recovered.status, 200)
  await notice(/^Security notice: A recovery code was used to sign in$/)

  const disabled = await h.platform('POST', '/platform/v1/auth/2fa/disable', { password, code: totpCode(secret, new Date(), 1) }, { jwt })
  t.equal(disabled.status, 200, JSON.stringify(disabled.body))
  await notice(/^Security notice: Two-factor authentication was disabled$/)

  t.equal((await h.platform('POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, undefined, { jwt })).status, 200)
  t.match((await notice(/^Security notice: The API key of project .* was rotated/)).subject, u.projectId)
  t.equal((await h.platform('DELETE', `/platform/v1/projects/${u.projectId}/keys/revoke`, undefined, { jwt })).status, 200)
  await notice(/^Security notice: Every API key of project .* was revoked$/)

  const kinds = await eventually(async () => {
    const k = await userActivityKinds(u.userId)
    return k.includes('new_device_signed_in') && k
  })
  t.equal(kinds.filter((k) => k === 'new_device_signed_in').length, 1, 'the first sign-in ever is not a new device; the second one is')
})

t.test('e-mail provider webhook: missing and bad signatures, a bad body, and no anonymous limit', async (t) => {
  const body = providerEvent('hard_bounce', freshEmail('nobody'))
  const sign = (payload: string, at: Date, secret = emailWebhookSecret) => signPayload(secret, payload, at)
  isError(t, await sendProviderEvent(body), 400, 'missing_signature', 'no signature header')
  isError(t, await sendProviderEvent(body, ''), 400, 'missing_signature', 'an empty signature header')
  isError(t, await sendProviderEvent(body, sign(body, new Date(), 'another-secret-0123456789')), 400, 'invalid_signature', 'a wrong secret')
  isError(t, await sendProviderEvent(body.replace('hard_bounce', 'complaint'), sign(body, new Date())), 400, 'invalid_signature', 'a tampered body')
  isError(t, await sendProviderEvent(body, sign(body, new Date(Date.now() - 6 * 60_000))), 400, 'invalid_signature', 'a timestamp 6 minutes old')
  isError(t, await sendProviderEvent(body, sign(body, new Date(Date.now() + 6 * 60_000))), 400, 'invalid_signature', 'a timestamp 6 minutes ahead')
  const fourOld = await sendProviderEvent(body, sign(body, new Date(Date.now() - 4 * 60_000)))
  t.equal(fourOld.status, 200, `4 minutes old is inside the window (${JSON.stringify(fourOld.body)})`)
  t.equal(fourOld.body.action, 'ignored', 'an address no user has')
  isError(t, await sendProviderEvent('{"type": ', sign('{"type": ', new Date())), 400, 'invalid_request', 'malformed JSON, validly signed')
  const noAddress = JSON.stringify({ type: 'hard_bounce', timestamp: new Date().toISOString() })
  isError(t, await sendProviderEvent(noAddress, sign(noAddress, new Date())), 400, 'invalid_request', 'no address')

  const ip = freshIp()
  const answers = await Promise.all(Array.from({ length: 25 }, () => sendProviderEvent(body, sign(body, new Date()), ip)))
  t.strictSame(
    answers.map((a) => a.status),
    Array(25).fill(200),
    'more than the 20 anonymous POSTs per IP, none refused',
  )
  t.equal((await h.platform('POST', '/platform/v1/auth/resend', { email: freshEmail() }, { ip })).status, 200, 'nor counted against the auth routes')
})

t.test('a hard bounce stops every e-mail to the address, security notices included, until it is confirmed again', async (t) => {
  const u: VerifiedUser = await newVerifiedUser(h)
  const marked = await signedProviderEvent(providerEvent('hard_bounce', u.email.toUpperCase()))
  t.equal(marked.status, 200, JSON.stringify(marked.body))
  t.equal(marked.body.action, 'marked_undeliverable')
  t.equal((await signedProviderEvent(providerEvent('complaint', u.email))).body.action, 'ignored', 'already marked')
  const me = await h.platform('GET', '/platform/v1/auth/me', undefined, { jwt: u.jwt })
  t.equal(me.body.email_undeliverable?.reason, 'hard_bounce', 'the profile shows the state')

  const before = h.smtp.mails.length
  let jwt = await changePassword(t, u.jwt, u.password, 'bounced-password-1')
  t.equal((await h.platform('POST', '/platform/v1/auth/forgot', { email: u.email })).status, 200)
  t.equal((await h.platform('POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, undefined, { jwt })).status, 200)
  t.equal(h.smtp.mails.length, before, 'no security notice, reset link or key notice went to the address')

  t.equal((await h.platform('POST', '/platform/v1/account/email/reverify', undefined, { jwt })).status, 200)
  const link = await h.smtp.next(u.email, /^Confirm your e-mail address$/)
  t.match(link.text, 'https://dash.example.test/reverify?token=', 'the one e-mail that still goes out: the link that clears the mark')
  isError(
    t,
    await h.platform('POST', '/platform/v1/account/email/reverify', undefined, { jwt }),
    429,
    'rate_limit_exceeded',
    'a second link within 60 s',
  )
  isError(
    t,
    await h.platform('POST', '/platform/v1/auth/reverify', { token: `${u.userId}.wrong` }),
    400,
    'invalid_verification_token',
    'a wrong token',
  )
  const confirmed = await h.platform('POST', '/platform/v1/auth/reverify', { token: tokenFromMail(link) })
  t.equal(confirmed.status, 200, JSON.stringify(confirmed.body))
  t.equal((await h.platform('GET', '/platform/v1/auth/me', undefined, { jwt })).body.email_undeliverable, null, 'the mark is lifted')
  isError(
    t,
    await h.platform('POST', '/platform/v1/auth/reverify', { token: tokenFromMail(link) }),
    400,
    'invalid_verification_token',
    'the token is single use',
  )

  jwt = await changePassword(t, jwt, 'bounced-password-1', 'resumed-password-1')
  await h.smtp.next(u.email, /^Security notice: Your password was changed$/)

  const stale = await signedProviderEvent(providerEvent('hard_bounce', u.email, new Date(Date.now() - 60_000)))
  t.equal(stale.body.action, 'ignored', 'a bounce from before the confirmation does not mark the address again')
  t.equal((await signedProviderEvent(providerEvent('soft_bounce', u.email))).body.action, 'ignored', 'a soft bounce is transient')
  const complaint = await signedProviderEvent(providerEvent('complaint', u.email))
  t.equal(complaint.body.action, 'marked_undeliverable', 'a later complaint marks it again')
  t.equal((await h.platform('GET', '/platform/v1/auth/me', undefined, { jwt })).body.email_undeliverable?.reason, 'complaint')

  const kinds = await eventually(async () => {
    const k = await userActivityKinds(u.userId)
    return k.filter((x) => x === 'email_marked_undeliverable').length === 2 && k
  })
  t.ok(kinds.indexOf('email_reverified') > kinds.indexOf('email_marked_undeliverable'), 'marked, confirmed, marked again in the activity')
})
