import t from 'tap'
import { httpRequest } from '../support/harness.ts'
import { newVerifiedUser, startPlatformHarness, totpCode } from '../support/platform.ts'

t.test('a new customer signs up, verifies, logs in, enables 2FA, rotates and revokes', async (t) => {
  const h = await startPlatformHarness(t, import.meta.filename)
  const u = await newVerifiedUser(h)
  t.match(u.apiKey, /^sv_live_sk_[0-9a-f]{32}$/)
  const me = await h.platform('GET', '/platform/v1/auth/me', undefined, { jwt: u.jwt })
  t.equal(me.status, 200, JSON.stringify(me.body))
  t.equal(me.body.projects[0].api_key_prefix, u.apiKey.slice(0, 24))
  const jobs = await httpRequest(h.url, u.apiKey, 'GET', '/jobsvc/v1/jobs')
  t.equal(jobs.status, 200)

  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt: u.jwt })
  t.equal(setup.status, 200, JSON.stringify(setup.body))
  const verify = await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(setup.body.secret) }, { jwt: u.jwt })
  t.equal(verify.status, 200, JSON.stringify(verify.body))
  const noCode = await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: u.password })
  t.equal(noCode.body.error?.code, 'totp_required')

  const rotated = await h.platform('POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, undefined, { jwt: u.jwt })
  t.equal(rotated.status, 200, JSON.stringify(rotated.body))
  t.equal((await httpRequest(h.url, rotated.body.api_key, 'GET', '/jobsvc/v1/jobs')).status, 200)
  t.equal((await httpRequest(h.url, u.apiKey, 'GET', '/jobsvc/v1/jobs')).status, 200, 'old key in grace')
  const revoked = await h.platform('DELETE', `/platform/v1/projects/${u.projectId}/keys/revoke`, undefined, { jwt: u.jwt })
  t.equal(revoked.status, 200, JSON.stringify(revoked.body))
  t.equal((await httpRequest(h.url, rotated.body.api_key, 'GET', '/jobsvc/v1/jobs')).status, 401)
  t.equal((await httpRequest(h.url, u.apiKey, 'GET', '/jobsvc/v1/jobs')).status, 401)
})

t.test('the dashboard origin (PUBLIC_URL) may call the platform routes with credentials', async (t) => {
  const h = await startPlatformHarness(t, import.meta.filename, { suffix: '_cors' })
  const preflight = await h.platform('OPTIONS', '/platform/v1/auth/me', undefined, {
    headers: { origin: 'https://dash.example.test', 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
  })
  t.equal(preflight.status, 204)
  t.equal(preflight.headers.get('access-control-allow-origin'), 'https://dash.example.test')
  t.equal(preflight.headers.get('access-control-allow-credentials'), 'true')
  const actual = await h.platform('GET', '/platform/v1/auth/me', undefined, { headers: { origin: 'https://dash.example.test' } })
  t.equal(actual.status, 401)
  t.equal(actual.headers.get('access-control-allow-origin'), 'https://dash.example.test', 'errors too, so the client can read them')
  t.match(actual.headers.get('access-control-expose-headers'), /X-Request-Id/)
  const foreign = await h.platform('GET', '/platform/v1/auth/me', undefined, { headers: { origin: 'https://evil.example' } })
  t.equal(foreign.headers.get('access-control-allow-origin'), null, 'any other origin gets no CORS grant')
})
