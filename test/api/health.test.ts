import t from 'tap'
import { ensureStreams } from '../../streams/definitions.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { httpRequest, startHarness } from '../support/harness.ts'

// Probes answer without authentication (spec, Authentication 6); ready reflects every dependency.
const h = await startHarness(t, import.meta.filename, { roles: ['api'] })

const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/

t.test('GET /jobsvc/health/live answers 200 without a key', async (t) => {
  const res = await httpRequest(h.url, null, 'GET', '/jobsvc/health/live')
  t.equal(res.status, 200)
  t.strictSame(res.body, { status: 'ok' })
  t.match(res.headers.get('x-request-id') ?? '', ulidPattern, 'X-Request-Id on probes too')
})

t.test('GET /jobsvc/health/ready answers 200 with every check true', async (t) => {
  const res = await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')
  t.equal(res.status, 200)
  const projection_failures = { messages: 0, subjects: 0, latest: [] }
  t.strictSame(res.body, {
    status: 'ready',
    checks: { nats: true, jetstream: true, postgres: true, migrations: true, log_space: true },
    projection_failures,
  })
  t.match(res.headers.get('x-request-id') ?? '', ulidPattern)
})

t.test('each probe gets its own request id', async (t) => {
  const a = await httpRequest(h.url, null, 'GET', '/jobsvc/health/live')
  const b = await httpRequest(h.url, null, 'GET', '/jobsvc/health/live')
  t.not(a.headers.get('x-request-id'), b.headers.get('x-request-id'))
})

t.test('probes are GET only: other methods are 404 route_not_found', async (t) => {
  const res = await httpRequest(h.url, null, 'POST', '/jobsvc/health/live', {})
  t.equal(res.status, 404)
  t.equal(res.body.error.code, 'route_not_found')
  t.equal(res.body.error.request_id, res.headers.get('x-request-id'))
})

t.test('ready answers 503 while the event stream is missing, and 200 once it is back', async (t) => {
  const { jsm } = h.runtime.nats
  await jsm.streams.delete(eventsStreamName(h.config.namespace))
  t.teardown(() => ensureStreams(jsm, h.config.namespace))
  const down = await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')
  t.equal(down.status, 503)
  const projection_failures = { messages: 0, subjects: 0, latest: [] }
  t.strictSame(down.body, {
    status: 'not_ready',
    checks: { nats: true, jetstream: false, postgres: true, migrations: true, log_space: false },
    projection_failures,
  })
  const live = await httpRequest(h.url, null, 'GET', '/jobsvc/health/live')
  t.equal(live.status, 200, 'live does not depend on the stream')

  await ensureStreams(jsm, h.config.namespace)
  const up = await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')
  t.equal(up.status, 200)
  t.equal(up.body.status, 'ready')
})
