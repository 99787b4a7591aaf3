import t from 'tap'
import { resolvePlans } from '../../domain/plans.ts'
import { httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'

// Issue 26, item 3: waiting is free. Idle workers' long polls used up the free plan's hour (four
// workers polling every 5 s spent 1,700 requests an hour of 1,000); a poll that waited its full
// time for nothing now gives back the request it counted.

const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector'],
  config: { plans: resolvePlans({ free: { requests_per_hour: 100 } }) },
})
const project = await h.newProject()
const call = (method: string, path: string, body?: unknown) => httpRequest(h.url, project.apiKey, method, path, body)
const remaining = (res: HttpResponse) => Number(res.headers.get('x-ratelimit-remaining'))
const poll = (queue: string, wait_seconds: number) => call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-idle', queues: [queue], wait_seconds })

t.test('a long poll that waited its full time for nothing costs nothing; the others count one', async (t) => {
  const start = remaining(await call('GET', '/jobsvc/v1/jobs?limit=1'))
  const idle = await poll('idle-queue', 1)
  t.equal(idle.status, 200)
  t.same(idle.body.jobs, [])
  t.equal(remaining(idle), start, 'its own answer says it was given back')
  t.equal(remaining(await call('GET', '/jobsvc/v1/jobs?limit=1')), start - 1, 'the next request finds the poll uncounted')

  const immediate = await poll('idle-queue', 0)
  t.same(immediate.body.jobs, [])
  t.equal(remaining(immediate), start - 2, 'a poll that did not wait counts')

  const created = await call('POST', '/jobsvc/v1/jobs', { job_type: 'counted', queue: 'busy-queue', payload: {} })
  t.equal(created.status, 201)
  const claiming = await poll('busy-queue', 5)
  t.equal(claiming.body.jobs.length, 1)
  t.equal(remaining(claiming), start - 4, 'a poll that claims counts')

  // Past the limiter's flush (every 250 ms), the refund holds in the shared count too.
  await new Promise((resolve) => setTimeout(resolve, 600))
  t.equal(remaining(await call('GET', '/jobsvc/v1/jobs?limit=1')), start - 5, 'the shared count agrees after it was written')
})

t.test('idle polls never exhaust the hour', async (t) => {
  const before = remaining(await call('GET', '/jobsvc/v1/jobs?limit=1'))
  const polls = await Promise.all(Array.from({ length: 8 }, () => poll('never', 1)))
  t.ok(
    polls.every((p) => p.status === 200 && p.body.jobs.length === 0),
    'every idle poll answered empty',
  )
  t.equal(remaining(await call('GET', '/jobsvc/v1/jobs?limit=1')), before - 1, 'eight idle polls cost nothing')
})
