import t from 'tap'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { httpRequest, startHarness } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

/**
 * `min_seq` on the list routes: a list waits (bounded) until the projector has reached it. The
 * wait is long here, so a request that waits for the projector (which the tests stop) is plainly
 * still pending while the ones that must not wait have answered.
 */
// No scheduler: nothing but the tests appends to the log, so `seq + 1` below is really beyond it.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], tunables: { read_your_writes_wait_ms: 10_000 } })

const routesTakingMinSeq = [
  '/jobsvc/v1/jobs',
  '/jobsvc/v1/activity',
  '/jobsvc/v1/recurring',
  '/jobsvc/v1/metrics/summary',
  '/jobsvc/v1/metrics/queues',
  '/jobsvc/v1/metrics/throughput',
  '/jobsvc/v1/metrics/job-types',
]

t.test('a min_seq beyond the last sequence of the log is 400 at once on every route that takes it', async (t) => {
  await h.stopRole('projector')
  let restarted = false
  t.teardown(async () => {
    if (!restarted) await h.startRole('projector')
  })
  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'rw', queue: 'rw-q', payload: {} })
  t.equal(created.status, 201)
  const seq = Number(created.headers.get('x-event-seq'))

  let controlAnswered = false
  const control = h.request('GET', `/jobsvc/v1/jobs?queue=rw-q&min_seq=${seq}`).finally(() => (controlAnswered = true))

  for (const beyond of [seq + 1, seq + 1_000_000, Number.MAX_SAFE_INTEGER]) {
    for (const path of routesTakingMinSeq) {
      const res = await h.request('GET', `${path}?min_seq=${beyond}`)
      isError(t, res, 400, 'invalid_request', `${path}?min_seq=${beyond}`)
      t.match(res.body.error.message, /^querystring\.min_seq: /, 'the message names min_seq')
    }
  }
  t.notOk(controlAnswered, 'all answered while a list waiting for a sequence the log holds is still waiting for the projector')

  await h.startRole('projector')
  restarted = true
  const listed = await control
  t.equal(listed.status, 200, 'the waiting list answers once the projector has caught up')
  t.same(
    listed.body.data.map((j: any) => j.id),
    [created.body.id],
  )
})

t.test('a min_seq written through another process (unknown to this one) is waited for, not refused', async (t) => {
  const other = await h.newProject()
  // A JobService of its own plays another API process: this one's API has not seen the write.
  const elsewhere = await new JobService(h.runtime).create(other.projectId, {
    job_type: 'rw-elsewhere',
    payload: {},
    queue: 'rw-elsewhere',
    run_at: null,
    max_attempts: 3,
    timeout_seconds: 60,
    tags: null,
    parent_job_id: null,
    idempotency_key: null,
  })
  const res = await httpRequest(h.url, other.apiKey, 'GET', `/jobsvc/v1/jobs?queue=rw-elsewhere&min_seq=${elsewhere.seq}`)
  t.equal(res.status, 200)
  t.same(
    res.body.data.map((j: any) => j.id),
    [elsewhere.job.id],
    'the list includes that write',
  )
  for (const path of routesTakingMinSeq) {
    t.equal((await httpRequest(h.url, other.apiKey, 'GET', `${path}?min_seq=${elsewhere.seq}`)).status, 200, `${path} with a min_seq the log holds`)
  }
})
