import t from 'tap'
import { fireDueSchedules } from '../../services/use-cases/jobs/recurring-service.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { BillingService } from '../../services/use-cases/metering/billing-service.ts'
import { eventually, startHarness } from '../support/harness.ts'

t.test('a schedule fires once per occurrence', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const put = await h.request('PUT', '/jobsvc/v1/recurring/rjob_tick', { job_type: 'tick', cron_expression: '*/5 * * * *', payload: { a: 1 } })
  t.equal(put.status, 201, JSON.stringify(put.body))
  t.match(put.body, {
    id: 'rjob_tick',
    job_type: 'tick',
    cron_expression: '*/5 * * * *',
    queue: 'default',
    timezone: 'UTC',
    payload: { a: 1 },
    last_run_at: null,
  })
  const next = Date.parse(put.body.next_run_at)
  t.ok(next > Date.now() && next <= Date.now() + 5 * 60_000)
  const again = await h.request('PUT', '/jobsvc/v1/recurring/rjob_tick', { job_type: 'tick', cron_expression: '*/5 * * * *', payload: { a: 1 } })
  t.equal(again.status, 200)

  const realNow = h.runtime.now
  t.teardown(() => void (h.runtime.now = realNow))
  h.runtime.now = () => new Date(next + 1000)
  const jobs = new JobService(h.runtime)
  const billing = new BillingService(h.runtime)
  const [a, b] = await Promise.all([fireDueSchedules(h.runtime, jobs, billing), fireDueSchedules(h.runtime, new JobService(h.runtime), billing)])
  t.equal(a + b, 1, 'two schedulers at once fire the occurrence once')
  t.equal(await fireDueSchedules(h.runtime, jobs, billing), 0, 'and not again')
  const list = await eventually(async () => {
    const res = await h.request('GET', '/jobsvc/v1/jobs?job_type=tick')
    return res.body.data.length > 0 ? res : null
  })
  t.equal(list.body.data.length, 1)
  t.match(list.body.data[0], { job_type: 'tick', payload: { a: 1 }, tags: { recurring_id: 'rjob_tick' } })
  const after = await h.request('GET', '/jobsvc/v1/recurring')
  t.equal(after.body.data[0].last_job_id, list.body.data[0].id)
  t.equal(Date.parse(after.body.data[0].next_run_at), next + 5 * 60_000)

  // Down for an hour: the latest missed occurrence fires, once.
  h.runtime.now = () => new Date(next + 60 * 60_000 + 1000)
  t.equal(await fireDueSchedules(h.runtime, jobs, billing), 1)
  t.equal(await fireDueSchedules(h.runtime, jobs, billing), 0)

  const del = await h.request('DELETE', '/jobsvc/v1/recurring/rjob_tick')
  t.equal(del.status, 204)
  const gone = await h.request('DELETE', '/jobsvc/v1/recurring/rjob_tick')
  t.equal(gone.status, 404)
  t.equal(gone.body.error.code, 'recurring_job_not_found')
  t.same((await h.request('GET', '/jobsvc/v1/recurring')).body.data, [])
  const bad = await h.request('PUT', '/jobsvc/v1/recurring/rjob_x', { job_type: 'x', cron_expression: '61 * * * *' })
  t.equal(bad.body.error.code, 'invalid_cron_expression')
  const tz = await h.request('PUT', '/jobsvc/v1/recurring/rjob_x', { job_type: 'x', cron_expression: '0 * * * *', timezone: 'Mars/Base' })
  t.equal(tz.body.error.code, 'invalid_timezone')
  await h.request('PUT', '/jobsvc/v1/recurring/rjob_y', { job_type: 'y', cron_expression: '0 * * * *' })
  const conflict = await h.request('PUT', '/jobsvc/v1/recurring/rjob_other', { job_type: 'y', cron_expression: '0 * * * *' })
  t.equal(conflict.status, 409)
  t.equal(conflict.body.error.code, 'recurring_job_type_conflict')
})
