import t from 'tap'
import { RequestRateLimiter } from '../../services/use-cases/metering/request-rate.ts'
import { resolvePlans } from '../../domain/plans.ts'
import { startHarness } from '../support/harness.ts'

t.test('the hourly request limit per project', async (t) => {
  const h = await startHarness(t, import.meta.filename, { config: { plans: resolvePlans({ business: { requests_per_hour: 5 } }) } })

  await t.test('every answer carries the limit headers; the sixth request in the hour is 429', async (t) => {
    const remaining: string[] = []
    for (let i = 0; i < 5; i++) {
      const res = await h.request('GET', '/jobsvc/v1/jobs')
      t.equal(res.status, 200)
      t.equal(res.headers.get('x-ratelimit-limit'), '5')
      remaining.push(res.headers.get('x-ratelimit-remaining')!)
      const reset = Number(res.headers.get('x-ratelimit-reset'))
      t.ok(reset > Date.now() / 1000 && reset <= Date.now() / 1000 + 3600, 'reset within the hour')
    }
    t.same(remaining, ['4', '3', '2', '1', '0'])
    const refused = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {} })
    t.equal(refused.status, 429)
    t.equal(refused.body.error.code, 'rate_limit_exceeded')
    t.equal(refused.headers.get('x-ratelimit-limit'), '5')
    t.equal(refused.headers.get('x-ratelimit-remaining'), '0')
    t.ok(Number(refused.headers.get('x-ratelimit-reset')) > 0)
    t.ok(Number(refused.headers.get('retry-after')) >= 1)
  })

  await t.test('another project has its own window; health probes are not counted', async (t) => {
    const other = await h.newProject()
    const res = await h.request('GET', '/jobsvc/v1/jobs', undefined, { authorization: `Bearer ${other.apiKey}` })
    t.equal(res.status, 200)
    t.equal(res.headers.get('x-ratelimit-limit'), '1000', 'the free plan')
    t.equal((await h.request('GET', '/jobsvc/health/live')).status, 200)
  })

  await t.test('after an hour the window has room again', async (t) => {
    const realNow = h.runtime.now
    h.runtime.now = () => new Date(Date.now() + 61 * 60_000)
    t.teardown(() => void (h.runtime.now = realNow))
    const res = await h.request('GET', '/jobsvc/v1/jobs')
    t.equal(res.status, 200)
    t.equal(res.headers.get('x-ratelimit-remaining'), '4')
  })
})

t.test('two limiters (two processes) share one count, which outlives them', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: [], suffix: '_shared' })
  const now = new Date()
  const a = new RequestRateLimiter(h.runtime.sql, 60_000)
  const b = new RequestRateLimiter(h.runtime.sql, 60_000)
  t.teardown(() => Promise.all([a.stop(), b.stop()]))
  for (let i = 0; i < 3; i++) t.ok((await a.admit('prj_shared', 5, now)).admitted)
  await a.flush()
  const seen = await b.admit('prj_shared', 5, now)
  t.equal(seen.remaining, 1, 'b sees what a admitted')
  await b.flush()
  await a.flush()
  const last = await a.admit('prj_shared', 5, now)
  t.equal(last.remaining, 0)
  t.equal((await a.admit('prj_shared', 5, now)).admitted, false)
  await a.stop()
  await b.stop()
  const restarted = new RequestRateLimiter(h.runtime.sql, 60_000)
  t.teardown(() => restarted.stop())
  t.equal((await restarted.admit('prj_shared', 5, now)).admitted, false, 'a new process starts from the stored count')
})

t.test('a refund gives back an admitted request, in this process at once and in the others once written', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: [], suffix: '_refund' })
  const now = new Date()
  const a = new RequestRateLimiter(h.runtime.sql, 60_000)
  const b = new RequestRateLimiter(h.runtime.sql, 60_000)
  t.teardown(() => Promise.all([a.stop(), b.stop()]))
  let last = await a.admit('prj_refund', 5, now)
  for (let i = 0; i < 3; i++) last = await a.admit('prj_refund', 5, now)
  t.equal(last.remaining, 1)
  a.refund('prj_refund', last.minute)
  t.equal((await a.admit('prj_refund', 5, now)).remaining, 1, 'the refunded unit was free again in this process')
  a.refund('prj_refund', last.minute)
  await a.flush()
  t.equal((await b.admit('prj_refund', 5, now)).remaining, 1, 'another process sees 4 admitted less 1 refunded, plus its own')
  a.refund('prj_elsewhere', last.minute)
  t.equal((await a.admit('prj_elsewhere', 5, now)).remaining, 4, 'a refund for a project this process never counted gives nothing')
})
