import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

const h = await startHarness(t, import.meta.filename)
const { create, getJob, ack, claimOne } = jobsApi(h, { jobType: 'step' })

t.test('a child of a pending, scheduled or processing parent is scheduled and waits', async (t) => {
  const pending = await create({ queue: 'c-parent' })
  const ofPending = await create({ queue: 'c-child', parent_job_id: pending.id })
  t.equal(ofPending.state, 'scheduled')
  t.equal(ofPending.run_at, null, 'no run_at: it waits for the parent, not for a time')
  t.match(await getJob(ofPending.id), { state: 'scheduled', parent_job_id: pending.id })

  const scheduled = await create({ queue: 'c-parent', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  t.equal((await create({ queue: 'c-child', parent_job_id: scheduled.id })).state, 'scheduled')

  await claimOne('c-parent', 'wrk_p')
  t.equal((await getJob(pending.id)).state, 'processing')
  const ofProcessing = await create({ queue: 'c-child', parent_job_id: pending.id })
  t.equal(ofProcessing.state, 'scheduled')

  const listed = await h.request('GET', '/jobsvc/v1/jobs?queue=c-child&state=pending')
  t.same(listed.body.data, [], 'no child is pending yet')
  // The scheduler passes every 100 ms here: a waiting child (run_at null) is not a due job.
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_c', queues: ['c-child'], capacity: 10, wait_seconds: 0 })
  t.strictSame(polled.body, { jobs: [] }, 'waiting children are not claimable')
  t.equal((await getJob(ofPending.id)).state, 'scheduled', 'nor promoted by the scheduler')
})

t.test('a child of a succeeded parent is pending and runs at once', async (t) => {
  const parent = await create({ queue: 'c-done' })
  await claimOne('c-done', 'wrk_p')
  await ack({ job_id: parent.id, worker_id: 'wrk_p', status: 'succeeded' })
  const child = await create({ queue: 'c-done-child', parent_job_id: parent.id })
  t.equal(child.state, 'pending')
  t.equal(child.run_at, null)
  const claimed = await claimOne('c-done-child', 'wrk_c')
  t.equal(claimed.id, child.id)
  t.equal((await getJob(child.id)).parent_job_id, parent.id)
})

t.test('a child of a cancelled or dead-lettered parent is 409 parent_terminal', async (t) => {
  const cancelled = await create({ queue: 'c-term' })
  await h.request('POST', `/jobsvc/v1/jobs/${cancelled.id}/cancel`)
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'c', payload: {}, parent_job_id: cancelled.id }),
    409,
    'parent_terminal',
    'cancelled parent',
  )

  const dead = await create({ queue: 'c-term', max_attempts: 1 })
  await claimOne('c-term', 'wrk_p')
  await ack({ job_id: dead.id, worker_id: 'wrk_p', status: 'failed' })
  t.equal((await getJob(dead.id)).state, 'dead_letter')
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'c', payload: {}, parent_job_id: dead.id }),
    409,
    'parent_terminal',
    'dead-lettered parent',
  )

  const listed = await h.request('GET', '/jobsvc/v1/jobs?job_type=c')
  t.same(listed.body.data, [], 'no child was created')
})

t.test('an unknown parent is 422 parent_not_found, and so is another project’s job', async (t) => {
  for (const id of ['job_01ARZ3NDEKTSV4RRFFQ69G5FAV', 'nope']) {
    isError(t, await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'c', payload: {}, parent_job_id: id }), 422, 'parent_not_found', id)
  }
  const other = await h.newProject()
  const theirs = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'p', payload: {} }, { authorization: `Bearer ${other.apiKey}` })
  t.equal(theirs.status, 201)
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'c', payload: {}, parent_job_id: theirs.body.id }),
    422,
    'parent_not_found',
    'another project’s job',
  )
})

t.test('a parent’s success activates its scheduled children: children_activated, pending, claimable', async (t) => {
  const parent = await create({ queue: 'c-act' })
  const kids = [await create({ queue: 'c-act-child', parent_job_id: parent.id }), await create({ queue: 'c-act-child', parent_job_id: parent.id })]
  await claimOne('c-act', 'wrk_p')
  const res = await ack({ job_id: parent.id, worker_id: 'wrk_p', status: 'succeeded' })
  t.equal(res.status, 200)
  t.strictSame(res.body, { action: 'done', children_activated: 2 })
  for (const kid of kids) t.equal((await getJob(kid.id)).state, 'pending', 'the child is pending once the parent succeeded')
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_c', queues: ['c-act-child'], capacity: 10, wait_seconds: 5 })
  const claimed = polled.body.jobs.map((j: any) => j.id)
  if (claimed.length < 2) {
    const more = await claimOne('c-act-child', 'wrk_c')
    claimed.push(more.id)
  }
  t.same(claimed.sort(), kids.map((k) => k.id).sort(), 'both children are claimable')
})

t.test('a child cancelled before its parent succeeds stays cancelled and is not counted', async (t) => {
  const parent = await create({ queue: 'c-mixed' })
  const kept = await create({ queue: 'c-mixed-child', parent_job_id: parent.id })
  const dropped = await create({ queue: 'c-mixed-child', parent_job_id: parent.id })
  const cancel = await h.request('POST', `/jobsvc/v1/jobs/${dropped.id}/cancel`)
  t.strictSame(cancel.body, { id: dropped.id, state: 'cancelled' }, 'a waiting child can be cancelled itself')
  await claimOne('c-mixed', 'wrk_p')
  const res = await ack({ job_id: parent.id, worker_id: 'wrk_p', status: 'succeeded' })
  t.equal(res.body.children_activated, 1)
  t.equal((await getJob(kept.id)).state, 'pending')
  t.equal((await getJob(dropped.id)).state, 'cancelled')
})

t.test('a parent that dead-letters cancels its scheduled children', async (t) => {
  const parent = await create({ queue: 'c-dl', max_attempts: 1 })
  const kids = [await create({ queue: 'c-dl-child', parent_job_id: parent.id }), await create({ queue: 'c-dl-child', parent_job_id: parent.id })]
  await claimOne('c-dl', 'wrk_p')
  const res = await ack({ job_id: parent.id, worker_id: 'wrk_p', status: 'failed', error: { type: 'E', message: 'm', stack_trace: '' } })
  t.strictSame(res.body, { action: 'done' })
  for (const kid of kids) t.equal((await getJob(kid.id)).state, 'cancelled')
  const listed = await h.request('GET', '/jobsvc/v1/jobs?queue=c-dl-child&state=cancelled')
  t.equal(listed.body.data.length, 2, 'the list shows both children cancelled')
})

t.test('a parent that fails an attempt but will retry leaves its children waiting', async (t) => {
  const parent = await create({ queue: 'c-retry', max_attempts: 2 })
  const kid = await create({ queue: 'c-retry-child', parent_job_id: parent.id })
  await claimOne('c-retry', 'wrk_p')
  t.equal((await ack({ job_id: parent.id, worker_id: 'wrk_p', status: 'failed' })).body.action, 'retry')
  t.match(await getJob(kid.id), { state: 'scheduled' })
})

t.test('cancelling a parent cancels its scheduled children', async (t) => {
  const parent = await create({ queue: 'c-cancel', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  const kids = [
    await create({ queue: 'c-cancel-child', parent_job_id: parent.id }),
    await create({ queue: 'c-cancel-child', parent_job_id: parent.id }),
  ]
  const res = await h.request('POST', `/jobsvc/v1/jobs/${parent.id}/cancel`)
  t.strictSame(res.body, { id: parent.id, state: 'cancelled' })
  for (const kid of kids) t.equal((await getJob(kid.id)).state, 'cancelled')
  const history = (await h.request('GET', `/jobsvc/v1/jobs/${kids[0]!.id}/history`)).body.data
  t.match(history.at(-1), { type: 'job_cancelled', data: { reason: 'parent_cancelled' } })
})
