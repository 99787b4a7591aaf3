import t from 'tap'
import { resolvePlans } from '../../domain/plans.ts'
import { eventually, httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

// Issue 23, item 7: work is counted where it is done. A batch counted one request against the
// hourly limit whatever its size, so 1,000 creates or acks cost what one read costs. A batch now
// counts one request per item (one when it arrives, the rest once its body is valid), all or none;
// an idempotent replay, which does no work again, counts one.

const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector'],
  config: { plans: resolvePlans({ free: { requests_per_hour: 400 } }) },
})
const project = await h.newProject()
const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  httpRequest(h.url, project.apiKey, method, path, body, headers)
const remaining = (res: HttpResponse) => Number(res.headers.get('x-ratelimit-remaining'))
const jobs = (n: number, queue: string) => Array.from({ length: n }, (_, i) => ({ job_type: 'weighed', queue, payload: { i } }))

let left = 0

t.test('a batch of 100 jobs counts 100 requests; its replay counts one', async (t) => {
  const before = await call('GET', '/jobsvc/v1/jobs?limit=1')
  t.equal(before.headers.get('x-ratelimit-limit'), '400')
  left = remaining(before)
  const batch = await call('POST', '/jobsvc/v1/jobs/batch', { jobs: jobs(100, 'w-create') }, { 'idempotency-key': 'weights-create' })
  t.equal(batch.status, 200)
  t.equal(batch.body.created, 100)
  t.equal(remaining(batch), left - 100, 'X-RateLimit-Remaining dropped by 100')
  t.equal(batch.headers.get('x-ratelimit-limit'), '400')
  t.ok(Number(batch.headers.get('x-ratelimit-reset')) > Date.now() / 1000, 'X-RateLimit-Reset is ahead')
  left -= 100
  const replay = await call('POST', '/jobsvc/v1/jobs/batch', { jobs: jobs(100, 'w-create') }, { 'idempotency-key': 'weights-create' })
  t.equal(replay.headers.get('idempotent-replay'), 'true')
  t.equal(remaining(replay), left - 1, 'the replay did nothing again and counts one')
  left -= 1
})

t.test('a batch of 100 acks counts 100 requests', async (t) => {
  const created = await call('POST', '/jobsvc/v1/jobs/batch', { jobs: jobs(100, 'w-ack') })
  t.equal(created.body.created, 100)
  left -= 100
  const claimed: string[] = []
  while (claimed.length < 100) {
    const poll = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-weights', queues: ['w-ack'], capacity: 50, wait_seconds: 5 })
    t.equal(poll.status, 200)
    claimed.push(...poll.body.jobs.map((j: { id: string }) => j.id))
    left -= 1
  }
  const acks = claimed.map((job_id) => ({ job_id, worker_id: 'w-weights', status: 'succeeded' }))
  const acked = await call('POST', '/jobsvc/v1/workers/ack/batch', { acks })
  t.equal(acked.status, 200)
  t.equal(acked.body.acked, 100)
  t.equal(remaining(acked), left - 100, 'X-RateLimit-Remaining dropped by 100')
  left -= 100
})

t.test('a batch heavier than what is left of the hour is refused whole, and does nothing', async (t) => {
  const over = await call('POST', '/jobsvc/v1/jobs/batch', { jobs: jobs(left + 1, 'w-over') })
  isError(t, over, 429, 'rate_limit_exceeded', 'one more item than the hour holds')
  t.ok(Number(over.headers.get('retry-after')) >= 1, 'Retry-After')
  t.equal(over.headers.get('x-ratelimit-limit'), '400')
  t.equal(remaining(over), left - 1, 'only the unit counted on arrival was taken')
  t.match(over.body.error.message, new RegExp(`carries ${left + 1} items`))
  left -= 1
  const single = await call('POST', '/jobsvc/v1/jobs', { job_type: 'weighed', queue: 'w-over', payload: {} })
  t.equal(single.status, 201, 'a single create still fits')
  left -= 1
  const listed = await eventually(async () => {
    const res = await call('GET', `/jobsvc/v1/jobs?queue=w-over&min_seq=${single.headers.get('x-event-seq')}`)
    return res.status === 200 ? res : null
  })
  t.same(
    listed.body.data.map((j: { id: string }) => j.id),
    [single.body.id],
    'no job of the refused batch was created',
  )
  left -= 1
  const acks = await call('POST', '/jobsvc/v1/workers/ack/batch', {
    acks: Array.from({ length: left + 1 }, () => ({ job_id: 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV', worker_id: 'w', status: 'succeeded' })),
  })
  isError(t, acks, 429, 'rate_limit_exceeded', 'an ack batch the same')
})
