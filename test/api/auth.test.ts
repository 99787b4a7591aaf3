import t, { type Test } from 'tap'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'

// API-key authentication as the spec's Authentication section describes it: key shape, lookup by
// the 24-character prefix, SHA-256 hash check, and every failure a 401 `unauthorized`.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })

const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/
const jobs = '/jobsvc/v1/jobs'

/** Sends with exactly these headers: no key is added unless the caller passes one. */
const anonymous = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  httpRequest(h.url, null, method, path, body, headers)
const withAuthorization = (authorization: string, method = 'GET', path = jobs, body?: unknown) => anonymous(method, path, body, { authorization })

function isUnauthorized(t: Test, res: HttpResponse, what: string): void {
  t.equal(res.status, 401, `${what}: 401`)
  t.strictSame(Object.keys(res.body ?? {}), ['error'], `${what}: only the envelope`)
  t.equal(res.body?.error?.code, 'unauthorized', `${what}: code unauthorized`)
  t.type(res.body?.error?.message, 'string')
  t.match(res.headers.get('x-request-id') ?? '', ulidPattern, `${what}: X-Request-Id is a ULID`)
  t.equal(res.body?.error?.request_id, res.headers.get('x-request-id'), `${what}: request_id equals X-Request-Id`)
}

/** The same key with its last character changed: same 24-character prefix, different hash. */
function withLastCharChanged(key: string): string {
  const last = key.at(-1)!
  return key.slice(0, -1) + (last === '0' ? '1' : '0')
}

t.test('the harness key has the shape of the spec', async (t) => {
  t.match(h.apiKey, /^sv_test_sk_[0-9a-f]{32}$/)
  t.equal(h.apiKey.length, 43)
})

t.test('every authentication failure is 401 unauthorized in the envelope', async (t) => {
  const hex32 = 'a'.repeat(32)
  const failures: Array<[string, string | null]> = [
    ['no Authorization header', null],
    ['Basic scheme', 'Basic x'],
    ['Basic scheme with the key', `Basic ${h.apiKey}`],
    ['Bearer with no key', 'Bearer'],
    ['Bearer with only spaces', 'Bearer    '],
    ['the key without a scheme', h.apiKey],
    ['a key with 31 hex characters', `Bearer sv_test_sk_${'a'.repeat(31)}`],
    ['a key with 33 hex characters', `Bearer sv_test_sk_${'a'.repeat(33)}`],
    ['the real key with a character more', `Bearer ${h.apiKey}0`],
    ['a key with uppercase hex', `Bearer sv_test_sk_${'ABCDEF0123456789'.repeat(2)}`],
    ['the real key with uppercase hex', `Bearer ${h.apiKey.slice(0, 11)}${h.apiKey.slice(11).toUpperCase()}`],
    ['the real key with an uppercase prefix', `Bearer ${h.apiKey.slice(0, 11).toUpperCase()}${h.apiKey.slice(11)}`],
    ['a key with non-hex characters', `Bearer sv_test_sk_${'g'.repeat(32)}`],
    ['an unknown environment', `Bearer sv_prod_sk_${hex32}`],
    ['a publishable-style key', `Bearer sv_test_pk_${hex32}`],
    ['the real key after another token', `Bearer x ${h.apiKey}`],
    ['the real key followed by another token', `Bearer ${h.apiKey} x`],
    ['a well-formed unknown test key', `Bearer sv_test_sk_${'0123456789abcdef'.repeat(2)}`],
    ['a well-formed unknown live key', `Bearer sv_live_sk_${'fedcba9876543210'.repeat(2)}`],
    ['the right prefix with a wrong remainder (hash mismatch)', `Bearer ${withLastCharChanged(h.apiKey)}`],
    ['the right prefix with a wholly different remainder', `Bearer ${h.apiKey.slice(0, 24)}${'0'.repeat(19)}`],
    ['the real key in the other environment', `Bearer ${h.apiKey.replace('sv_test_', 'sv_live_')}`],
  ]
  for (const [what, authorization] of failures) {
    // A body of only digits has no case; the spec's key then equals its uppercase form (p < 1e-6).
    if (authorization === `Bearer ${h.apiKey}`) continue
    const res = authorization === null ? await anonymous('GET', jobs) : await withAuthorization(authorization)
    isUnauthorized(t, res, what)
  }
})

t.test('the prefix is 24 characters: a key differing only after it still fails the hash', async (t) => {
  const sameLookup = `${h.apiKey.slice(0, 24)}${h.apiKey.slice(24).split('').reverse().join('')}`
  t.equal(sameLookup.slice(0, 24), h.apiKey.slice(0, 24))
  t.not(sameLookup, h.apiKey)
  isUnauthorized(t, await withAuthorization(`Bearer ${sameLookup}`), 'same prefix, reversed remainder')
})

t.test('authentication comes first on every /jobsvc/v1 route', async (t) => {
  const bogus = `Bearer sv_test_sk_${'b'.repeat(32)}`
  const id = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'
  const routes: Array<[string, string, unknown]> = [
    ['POST', jobs, { job_type: 'x', payload: {} }],
    ['POST', jobs, '{not json'],
    ['POST', jobs, { job_type: '' }],
    ['GET', jobs, undefined],
    ['GET', `${jobs}?state=bogus`, undefined],
    ['GET', `${jobs}/${id}`, undefined],
    ['GET', `${jobs}/not-a-job`, undefined],
    ['GET', `${jobs}/${id}/history`, undefined],
    ['POST', `${jobs}/${id}/cancel`, undefined],
    ['POST', `${jobs}/${id}/retry`, undefined],
    ['POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['default'], wait_seconds: 0 }],
    ['POST', '/jobsvc/v1/workers/ack', { job_id: id, worker_id: 'w', status: 'succeeded' }],
    ['POST', '/jobsvc/v1/workers/heartbeat', { job_id: id, worker_id: 'w' }],
    ['POST', '/jobsvc/v1/workers/register', { worker_id: 'w', queues: [], job_types: [] }],
  ]
  for (const [method, path, body] of routes) {
    isUnauthorized(t, await anonymous(method, path, body), `${method} ${path} without a key`)
    isUnauthorized(t, await withAuthorization(bogus, method, path, body), `${method} ${path} with an unknown key`)
  }
})

t.test('a valid key works, test and live alike', async (t) => {
  const created = await h.request('POST', jobs, { job_type: 'auth-ok', payload: { n: 1 } })
  t.equal(created.status, 201)
  t.match(created.headers.get('x-request-id') ?? '', ulidPattern)
  const listed = await h.request('GET', jobs)
  t.equal(listed.status, 200)
  t.ok(
    listed.body.data.some((j: { id: string }) => j.id === created.body.id),
    'the job is listed',
  )

  const live = await createProject(h.runtime, { name: 'live', plan: 'business', ownerEmail: null, keyEnvironment: 'live' })
  t.match(live.apiKey, /^sv_live_sk_[0-9a-f]{32}$/)
  const liveCreated = await httpRequest(h.url, live.apiKey, 'POST', jobs, { job_type: 'auth-live', payload: {} })
  t.equal(liveCreated.status, 201, 'a live key authenticates')
  const viaLive = await httpRequest(h.url, live.apiKey, 'GET', `${jobs}/${liveCreated.body.id}`)
  t.equal(viaLive.status, 200)
  t.equal(viaLive.body.id, liveCreated.body.id)
})

t.test('a key sees only its own project', async (t) => {
  const other = await h.newProject()
  const mine = await h.request('POST', jobs, { job_type: 'scoped', payload: { owner: 'a' }, queue: 'scoped' })
  const theirs = await httpRequest(h.url, other.apiKey, 'POST', jobs, { job_type: 'scoped', payload: { owner: 'b' }, queue: 'scoped' })
  t.equal(mine.status, 201)
  t.equal(theirs.status, 201)
  const asOther = (method: string, path: string, body?: unknown) => httpRequest(h.url, other.apiKey, method, path, body)

  const notFound = [
    await asOther('GET', `${jobs}/${mine.body.id}`),
    await asOther('GET', `${jobs}/${mine.body.id}/history`),
    await asOther('POST', `${jobs}/${mine.body.id}/cancel`),
    await asOther('POST', `${jobs}/${mine.body.id}/retry`),
    await asOther('POST', '/jobsvc/v1/workers/ack', { job_id: mine.body.id, worker_id: 'w', status: 'succeeded' }),
    await asOther('POST', '/jobsvc/v1/workers/heartbeat', { job_id: mine.body.id, worker_id: 'w' }),
    await h.request('GET', `${jobs}/${theirs.body.id}`),
  ]
  for (const res of notFound) {
    t.equal(res.status, 404, "another project's job is 404")
    t.equal(res.body.error.code, 'job_not_found')
    t.equal(res.body.error.request_id, res.headers.get('x-request-id'))
  }

  // Read-your-writes: each list shows the caller's own job at once, so the absence of the other is meaningful.
  const myList = await h.request('GET', `${jobs}?queue=scoped`)
  const theirList = await asOther('GET', `${jobs}?queue=scoped`)
  t.strictSame(
    myList.body.data.map((j: { id: string }) => j.id),
    [mine.body.id],
  )
  t.strictSame(
    theirList.body.data.map((j: { id: string }) => j.id),
    [theirs.body.id],
  )

  const theirPoll = await asOther('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-b', queues: ['scoped'], capacity: 10, wait_seconds: 5 })
  t.strictSame(
    theirPoll.body.jobs.map((j: { id: string }) => j.id),
    [theirs.body.id],
    'a poll claims only jobs of its own project',
  )
  const mineAfter = await h.request('GET', `${jobs}/${mine.body.id}`)
  t.equal(mineAfter.body.state, 'pending', "the other project's poll left this job alone")
})

t.test('health probes need no key, and ignore a bad one', async (t) => {
  for (const path of ['/jobsvc/health/live', '/jobsvc/health/ready']) {
    const plain = await anonymous('GET', path)
    t.equal(plain.status, 200, `${path} without a key`)
    t.match(plain.headers.get('x-request-id') ?? '', ulidPattern)
    const bad = await withAuthorization('Bearer nonsense', 'GET', path)
    t.equal(bad.status, 200, `${path} with a bad key`)
  }
})
