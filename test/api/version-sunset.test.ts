import t from 'tap'
import { ConfigError, loadConfig } from '../../services/infrastructure/config.ts'
import * as api from '../../services/roles/api/index.ts'
import { httpRequest, startHarness, withClockShifted, type HttpResponse } from '../support/harness.ts'

// The end of v1 (spec, Versioning 3 and 7): one install announces none, one announces a sunset an
// hour ahead; moving the second one's clock past it shows the same routes answering 410, and an
// API process started on its log with a past sunset answers 410 from the start.
const migrationUrl = 'https://docs.example.com/jobsvc/migrating-to-v2'
const hourMs = 60 * 60 * 1000
// Whole seconds: the Sunset header is an HTTP-date, which has no milliseconds.
const sunsetAt = new Date(Math.ceil((Date.now() + hourMs) / 1000) * 1000)
const deprecatedAt = new Date('2026-04-14T00:00:00Z')

const plain = await startHarness(t, import.meta.filename, { roles: ['api'], suffix: '_plain' })
const announced = await startHarness(t, import.meta.filename, { roles: ['api'], config: { v1Sunset: { sunsetAt, deprecatedAt, migrationUrl } } })

const versionHeaders = (res: HttpResponse) => ({
  deprecation: res.headers.get('deprecation'),
  sunset: res.headers.get('sunset'),
  link: res.headers.get('link'),
})
const announcedHeaders = {
  deprecation: '@1776124800',
  sunset: sunsetAt.toUTCString(),
  link: `<${migrationUrl}>; rel="deprecation", <${migrationUrl}>; rel="sunset"`,
}
const noHeaders = { deprecation: null, sunset: null, link: null }

/** One answer of each kind under both prefixes: successes, refusals of a route, and of the edge (no credentials, no route). */
const v1Requests: Array<{ name: string; send: (h: typeof plain) => Promise<HttpResponse>; status: number }> = [
  { name: 'GET /jobsvc/v1/activity', send: (h) => h.request('GET', '/jobsvc/v1/activity'), status: 200 },
  { name: 'GET /jobsvc/v1/jobs/{unknown}', send: (h) => h.request('GET', '/jobsvc/v1/jobs/job_01J00000000000000000000000'), status: 404 },
  { name: 'GET /jobsvc/v1/activity without a key', send: (h) => httpRequest(h.url, null, 'GET', '/jobsvc/v1/activity'), status: 401 },
  { name: 'GET /jobsvc/v1/no-such-route', send: (h) => h.request('GET', '/jobsvc/v1/no-such-route'), status: 404 },
  {
    name: 'POST /jobsvc/v1/jobs with a bad body',
    send: (h) => h.request('POST', '/jobsvc/v1/jobs', { job_type: '', payload: {} }),
    status: 400,
  },
  {
    name: 'POST /platform/v1/auth/resend',
    send: (h) => httpRequest(h.url, null, 'POST', '/platform/v1/auth/resend', { email: 'nobody@example.com' }),
    status: 200,
  },
  { name: 'GET /platform/v1/auth/me without a session', send: (h) => httpRequest(h.url, null, 'GET', '/platform/v1/auth/me'), status: 401 },
  {
    name: 'POST /platform/v1/auth/login with unknown credentials',
    send: (h) => httpRequest(h.url, null, 'POST', '/platform/v1/auth/login', { email: 'nobody@example.com', password: 'wrong-password' }),
    status: 401,
  },
]

t.test('without a sunset, v1 answers carry no Deprecation, Sunset or Link', async (t) => {
  for (const { name, send, status } of v1Requests) {
    const res = await send(plain)
    t.equal(res.status, status, name)
    t.same(versionHeaders(res), noHeaders, `${name}: no version headers`)
  }
})

t.test('with a sunset ahead, every v1 answer, successes and errors of both prefixes, announces it', async (t) => {
  for (const { name, send, status } of v1Requests) {
    const res = await send(announced)
    t.equal(res.status, status, name)
    t.same(versionHeaders(res), announcedHeaders, `${name}: Deprecation, Sunset and Link`)
    if (status >= 400) t.equal(res.body.error.request_id, res.headers.get('x-request-id'), `${name}: still the envelope`)
  }
})

t.test('the health probes are outside the version; the API description carries the headers', async (t) => {
  for (const path of ['/jobsvc/health/live', '/jobsvc/health/ready']) {
    const res = await httpRequest(announced.url, null, 'GET', path)
    t.equal(res.status, 200, path)
    t.same(versionHeaders(res), noHeaders, `${path}: no version headers`)
  }
  const description = await httpRequest(announced.url, null, 'GET', '/jobsvc/v1/openapi.json')
  t.equal(description.status, 200)
  t.same(versionHeaders(description), announcedHeaders)
})

t.test('after the sunset every v1 route answers 410 version_sunset in the envelope, with the headers', async (t) => {
  await withClockShifted(announced.runtime, 2 * hourMs, async () => {
    for (const { name, send } of v1Requests) {
      const res = await send(announced)
      t.equal(res.status, 410, name)
      t.equal(res.body.error.code, 'version_sunset', name)
      t.equal(res.body.error.request_id, res.headers.get('x-request-id'), `${name}: request id`)
      t.same(versionHeaders(res), announcedHeaders, `${name}: the headers still point to the migration notes`)
    }
    const wrapper = await httpRequest(announced.url, null, 'POST', '/jobsvc/v1/auth/login', {})
    t.equal(wrapper.body.error.code, 'version_sunset', 'a removed wrapper is gone with the version')
    const description = await httpRequest(announced.url, null, 'GET', '/jobsvc/v1/openapi.json')
    t.equal(description.status, 200, 'the API description still answers, for clients migrating away')
    const live = await httpRequest(announced.url, null, 'GET', '/jobsvc/health/live')
    t.equal(live.status, 200, 'the probes are not part of the version')
  })
  const before = await announced.request('GET', '/jobsvc/v1/activity')
  t.equal(before.status, 200, 'the clock back before the sunset, v1 answers again')
})

t.test('an install started with a sunset already past answers 410 from its first request', async (t) => {
  const config = { ...announced.config, v1Sunset: { sunsetAt: new Date('2020-01-01T00:00:00Z'), deprecatedAt, migrationUrl } }
  const role = await api.start({ ...announced.runtime, config })
  t.teardown(() => role.stop())
  const res = await httpRequest(role.address, announced.apiKey, 'GET', '/jobsvc/v1/activity')
  t.equal(res.status, 410)
  t.equal(res.body.error.code, 'version_sunset')
  t.equal(res.headers.get('sunset'), 'Wed, 01 Jan 2020 00:00:00 GMT')

  // The router decodes percent-escapes before it matches a route, so these reach v1 routes.
  for (const [method, path] of [
    ['GET', '/jobsvc/%761/activity'],
    ['POST', '/jobsvc/%761/jobs'],
    ['GET', '/jobsvc/v%31/jobs/job_01J00000000000000000000000'],
    ['GET', '/%70latform/v1/auth/me'],
    ['GET', '/jobsvc/%76%31/no-such-route'],
  ] as const) {
    const encoded = await httpRequest(
      role.address,
      announced.apiKey,
      method,
      path,
      method === 'POST' ? { job_type: 'after-sunset', payload: {} } : undefined,
    )
    t.equal(encoded.status, 410, `${method} ${path}: the version is read from the route, not the raw URL`)
    t.equal(encoded.body?.error?.code, 'version_sunset', `${method} ${path}`)
    t.equal(encoded.headers.get('sunset'), 'Wed, 01 Jan 2020 00:00:00 GMT', `${method} ${path}: the headers`)
  }
})

t.test('the removed wrappers answer 410 route_removed with a Link to the canonical route, without credentials', async (t) => {
  for (const [method, removed, canonical] of [
    ['POST', '/jobsvc/v1/auth/login', '/platform/v1/auth/login'],
    ['GET', '/jobsvc/v1/auth/me', '/platform/v1/auth/me'],
    ['POST', '/jobsvc/v1/auth/2fa/recovery/regenerate', '/platform/v1/auth/2fa/recovery/regenerate'],
    ['POST', '/jobsvc/v1/billing/webhook', '/platform/v1/billing/webhook'],
  ] as const) {
    const res = await httpRequest(plain.url, null, method, removed, method === 'POST' ? {} : undefined)
    t.equal(res.status, 410, `${method} ${removed}`)
    t.equal(res.body.error.code, 'route_removed')
    t.equal(res.body.error.request_id, res.headers.get('x-request-id'))
    t.match(res.body.error.message, `${method} ${canonical}`)
    t.equal(res.headers.get('link'), `<${canonical}>; rel="canonical"`)
  }
  const withSunset = await httpRequest(announced.url, null, 'POST', '/jobsvc/v1/auth/login', {})
  t.equal(withSunset.status, 410)
  t.equal(
    withSunset.headers.get('link'),
    `${announcedHeaders.link}, </platform/v1/auth/login>; rel="canonical"`,
    'the canonical link joins the version’s',
  )
  const unknown = await httpRequest(plain.url, null, 'POST', '/jobsvc/v1/auth/no-such-route', {})
  t.equal(unknown.status, 404, 'a path no canonical route had was never a wrapper')
  t.equal(unknown.body.error.code, 'route_not_found')
})

t.test('every /platform/v1 auth and billing route has its removed wrapper', async (t) => {
  const document = await httpRequest<{ paths: Record<string, Record<string, unknown>> }>(plain.url, null, 'GET', '/jobsvc/v1/openapi.json')
  const canonical = Object.entries(document.body.paths)
    .filter(([path]) => /^\/platform\/v1\/(auth|billing)\//.test(path))
    .flatMap(([path, operations]) => Object.keys(operations).map((method) => ({ method: method.toUpperCase(), path })))
  t.ok(canonical.length >= 15, `${canonical.length} canonical routes`)
  t.notOk(
    Object.keys(document.body.paths).some((path) => /^\/jobsvc\/v1\/(auth|billing)\//.test(path)),
    'the wrappers are not in the description',
  )
  for (const { method, path } of canonical) {
    const concrete = path.replace(/\{\w+\}/g, 'x')
    const res = await httpRequest(plain.url, null, method, concrete.replace('/platform/', '/jobsvc/'))
    t.equal(res.status, 410, `${method} ${path}`)
    t.equal(res.headers.get('link'), `<${concrete}>; rel="canonical"`, `${method} ${path}: links to it`)
  }
})

t.test('JOBSVC_V1_SUNSET and its companions are parsed at start', async (t) => {
  const env = { JOBSVC_SECRET: 'sunset-test-secret-sunset-test-secret' }
  t.equal(loadConfig(env).v1Sunset, null, 'unset by default')
  const parsed = loadConfig({ ...env, JOBSVC_V1_SUNSET: '2027-06-30T00:00:00Z', JOBSVC_V1_MIGRATION_URL: migrationUrl }).v1Sunset
  t.same(parsed, { sunsetAt: new Date('2027-06-30T00:00:00Z'), deprecatedAt: new Date('2026-06-30T00:00:00Z'), migrationUrl })
  const past = loadConfig({ ...env, JOBSVC_V1_SUNSET: '2020-01-01T00:00:00+02:00', JOBSVC_V1_MIGRATION_URL: migrationUrl }).v1Sunset
  t.same(past?.sunsetAt, new Date('2019-12-31T22:00:00Z'), 'a past sunset is allowed: v1 is then gone from the start')
  const explicit = loadConfig({
    ...env,
    JOBSVC_V1_SUNSET: '2027-06-30T00:00:00Z',
    JOBSVC_V1_DEPRECATION: '2026-04-14T00:00:00Z',
    JOBSVC_V1_MIGRATION_URL: 'https://docs.example.com/a<b>',
  }).v1Sunset
  t.same(explicit?.deprecatedAt, deprecatedAt)
  t.equal(explicit?.migrationUrl, 'https://docs.example.com/a%3Cb%3E', 'no raw angle bracket reaches the Link header')
  for (const [refused, why] of [
    [{ JOBSVC_V1_SUNSET: '2027-06-30T00:00:00Z' }, 'a sunset without migration notes'],
    [{ JOBSVC_V1_SUNSET: '2027-06-30', JOBSVC_V1_MIGRATION_URL: migrationUrl }, 'a date without a time'],
    [{ JOBSVC_V1_DEPRECATION: '2026-04-14T00:00:00Z' }, 'a deprecation without a sunset'],
    [
      { JOBSVC_V1_SUNSET: '2027-06-30T00:00:00Z', JOBSVC_V1_DEPRECATION: '2028-01-01T00:00:00Z', JOBSVC_V1_MIGRATION_URL: migrationUrl },
      'a deprecation after the sunset',
    ],
    [{ JOBSVC_V1_SUNSET: '2027-06-30T00:00:00Z', JOBSVC_V1_MIGRATION_URL: 'not a url' }, 'notes that are not a URL'],
  ] as const) {
    t.throws(() => loadConfig({ ...env, ...refused }), ConfigError, `${why} is refused at start`)
  }
})
