import t from 'tap'
import { startHarness } from '../support/harness.ts'

t.test('a job goes from created to succeeded over HTTP', async (t) => {
  const h = await startHarness(t, import.meta.filename)
  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'email', payload: { to: 'a@b.c' } })
  t.equal(created.status, 201)
  t.equal(created.body.state, 'pending')
  const listed = await h.request('GET', '/jobsvc/v1/jobs')
  t.equal(listed.body.data[0].id, created.body.id, 'the list shows the job right after the 201')
  t.same(listed.body.data[0].payload, { to: 'a@b.c' })
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w1', queues: ['default'], wait_seconds: 5 })
  t.equal(polled.body.jobs.length, 1)
  t.equal(polled.body.jobs[0].attempt, 1)
  const acked = await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: created.body.id, worker_id: 'w1', status: 'succeeded' })
  t.same(acked.body, { action: 'done' })
  const got = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}`)
  t.equal(got.body.state, 'succeeded')
})
