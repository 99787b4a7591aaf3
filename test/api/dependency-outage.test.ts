import t from 'tap'
import { openSql } from '../../projections/database.ts'
import { renderError } from '../../services/roles/api/errors.ts'
import { answerWithin, eventually, startHarness } from '../support/harness.ts'
import { freePort, startPrivateNats } from '../support/private-nats.ts'

// Issue 13, item 12: while NATS is down, a request that needs it answers 503
// `service_unavailable` with Retry-After (it was a 500 `internal_error`), readiness names the
// dependency that is down, and once NATS is back the same request succeeds.
const nats = await startPrivateNats(t)
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], config: { natsUrl: nats.url } })

const job = { job_type: 'outage', payload: {} }

t.test('job creation works before the outage', async (t) => {
  t.equal((await h.request('POST', '/jobsvc/v1/jobs', job)).status, 201)
})

t.test('NATS down: 503 service_unavailable with Retry-After, and readiness says nats', async (t) => {
  await nats.kill()
  const created = await h.request('POST', '/jobsvc/v1/jobs', job)
  t.equal(created.status, 503, JSON.stringify(created.body))
  t.equal(created.body.error.code, 'service_unavailable')
  t.equal(created.body.error.request_id, created.headers.get('x-request-id'))
  t.match(created.headers.get('retry-after') ?? '', /^\d+$/, 'Retry-After in seconds')
  // Issue 23, item 5: readiness answers within a probe's usual 1 s timeout rather than waiting
  // on a request that NATS cannot answer (it took 2 s, the check's own timeout).
  const ready = await answerWithin(h.request('GET', '/jobsvc/health/ready'), 1_000)
  if (ready === 'pending') return void t.fail('readiness did not answer within 1 s')
  t.equal(ready.status, 503)
  t.equal(ready.body.status, 'not_ready')
  t.equal(ready.body.checks.nats, false, 'nats is the dependency that is down')
  t.equal(ready.body.checks.postgres, true, 'postgres is not blamed')
  t.equal((await h.request('GET', '/jobsvc/health/live')).status, 200, 'liveness stays 200')
})

t.test('NATS back: the same request succeeds and readiness recovers', async (t) => {
  await nats.start()
  await eventually(async () => (await h.request('GET', '/jobsvc/health/ready')).status === 200, 30_000, 'ready again')
  t.equal((await h.request('POST', '/jobsvc/v1/jobs', job)).status, 201)
})

t.test('Postgres out of reach is a 503 too, not a 500', async (t) => {
  const unreachable = openSql(`postgres://postgres@127.0.0.1:${await freePort()}/nowhere`, { max: 1 })
  t.teardown(() => unreachable.end({ timeout: 1 }))
  const err = await unreachable`SELECT 1`.then(
    () => null,
    (e: unknown) => e,
  )
  t.ok(err, 'the query failed')
  const rendered = renderError(err)
  t.equal(rendered.status, 503)
  t.equal(rendered.code, 'service_unavailable')
  t.match(rendered.headers?.['Retry-After'] ?? '', /^\d+$/)
  t.equal(renderError(new Error('a bug')).status, 500, 'anything else is still a 500')
})
