import t from 'tap'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

// Issue 28 over HTTP, against the real NATS and Postgres with the scheduler running: a cancel of a
// running job (opted in), heard by the worker through its heartbeat and its signal poll, ended by
// its ack or by the grace period, and a worker handing a job back without spending its attempt.
// The spec's cancel is unchanged for requests that do not opt in.

const graceMs = 600
const h = await startHarness(t, import.meta.filename, { tunables: { cancel_grace_ms: graceMs } })
const { create, getJob, ack, claimOne } = jobsApi(h, { jobType: 'work' })

const cancel = (id: string, body?: unknown) => h.request('POST', `/jobsvc/v1/jobs/${id}/cancel`, body)
const heartbeat = (jobId: string, workerId: string) => h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: jobId, worker_id: workerId })
const release = (body: Record<string, unknown>) => h.request('POST', '/jobsvc/v1/workers/release', body)
const signals = (body: Record<string, unknown>) => h.request('POST', '/jobsvc/v1/workers/signals', body)
const failedAck = (jobId: string, workerId: string) =>
  ack({ job_id: jobId, worker_id: workerId, status: 'failed', error: { type: 'JobCancelled', message: 'stopped', stack_trace: '' } })

t.test("the spec's cancel still answers 409 invalid_state for a processing job without the opt-in", async (t) => {
  const job = await create({ queue: 'c-spec' })
  await claimOne('c-spec', 'wrk_spec')
  isError(t, await cancel(job.id), 409, 'invalid_state', 'no body')
  isError(t, await cancel(job.id, {}), 409, 'invalid_state', 'an empty object')
  isError(t, await cancel(job.id, { include_running: false }), 409, 'invalid_state', 'include_running false')
  isError(t, await cancel(job.id, { include_running: 'yes' }), 400, 'invalid_request', 'a value that is not a boolean')
  t.equal((await heartbeat(job.id, 'wrk_spec')).body.status, 'ok', 'the heartbeat answers ok')
  const running = await getJob(job.id)
  t.equal(running.state, 'processing')
  t.notOk('cancel_requested_at' in running, "the detail has the spec's fields only while nobody asked the job to stop")
  const pending = await create({ queue: 'c-spec-pending' })
  const res = await cancel(pending.id)
  t.equal(res.status, 200)
  t.strictSame(res.body, { id: pending.id, state: 'cancelled' }, 'a pending job is cancelled as the spec says')
})

t.test('opted in: 202, the heartbeat and the signal poll say cancel, the failure ack ends it cancelled', async (t) => {
  const job = await create({ queue: 'c-run', max_attempts: 3 })
  await claimOne('c-run', 'wrk_run')
  const waiting = signals({ worker_id: 'wrk_run', job_ids: [job.id], wait_seconds: 20 })
  // Let the signal poll reach its wait before the cancel.
  await new Promise((r) => setTimeout(r, 200))
  const askedAt = Date.now()
  const res = await cancel(job.id, { include_running: true })
  t.equal(res.status, 202)
  t.strictSame(res.body, { id: job.id, state: 'processing', cancel_requested: true })
  t.ok(res.headers.get('x-event-seq'), 'X-Event-Seq')
  const heard = await waiting
  const latency = Date.now() - askedAt
  t.equal(heard.status, 200)
  t.strictSame(heard.body, { cancel: [job.id] }, 'the signal poll answers the job to stop')
  t.ok(latency < 1000, `the signal poll answered within 1 s of the cancel (${latency} ms)`)
  t.strictSame((await heartbeat(job.id, 'wrk_run')).body, { status: 'cancel' }, 'the heartbeat answers cancel')
  const stopping = await getJob(job.id)
  t.equal(stopping.state, 'processing', 'still processing until the worker stops')
  t.ok(Date.parse(stopping.cancel_requested_at) >= askedAt - 1000, 'the detail says when the cancel was asked for')
  await eventually(
    async () => (await h.request('GET', '/jobsvc/v1/jobs?queue=c-run')).body.data[0]?.cancel_requested_at === stopping.cancel_requested_at,
    5_000,
    'the list item too',
  )
  t.equal((await cancel(job.id, { include_running: true })).status, 202, 'asked again: 202 again')
  const acked = await failedAck(job.id, 'wrk_run')
  t.equal(acked.status, 200)
  t.strictSame(acked.body, { action: 'done' }, 'the ack ends the attempt, no retry')
  const after = await getJob(job.id)
  t.match(after, { state: 'cancelled', attempt: 1 })
  isError(t, await cancel(job.id, { include_running: true }), 409, 'invalid_state', 'a cancelled job')
  isError(t, await heartbeat(job.id, 'wrk_run'), 409, 'invalid_state', 'the heartbeat after the end')
  const history = await h.request('GET', `/jobsvc/v1/jobs/${job.id}/history`)
  t.same(
    history.body.data.map((e: { type: string }) => e.type),
    ['job_created', 'job_claimed', 'job_cancel_requested', 'job_cancelled'],
    'the log holds the request and the end',
  )
  await eventually(async () => (await h.request('GET', '/jobsvc/v1/jobs?queue=c-run&state=cancelled')).body.data.length === 1, 5_000, 'the list')
})

t.test('a cancel asked of one API process wakes a signal poll waiting in another, within 1 s', async (t) => {
  const other = await startApiProcess(t, h.runtime)
  const job = await create({ queue: 'c-cross' })
  await claimOne('c-cross', 'wrk_cross')
  const waiting = httpRequest(other.url, h.apiKey, 'POST', '/jobsvc/v1/workers/signals', {
    worker_id: 'wrk_cross',
    job_ids: [job.id],
    wait_seconds: 20,
  })
  await new Promise((r) => setTimeout(r, 200))
  const askedAt = Date.now()
  t.equal((await cancel(job.id, { include_running: true })).status, 202)
  const heard = await waiting
  const latency = Date.now() - askedAt
  t.strictSame(heard.body, { cancel: [job.id] })
  t.ok(latency < 1000, `through the log's follower of the other process (${latency} ms)`)
})

t.test('with no ack within the grace period the job ends cancelled, and a late ack is refused', async (t) => {
  const job = await create({ queue: 'c-grace', max_attempts: 3 })
  await claimOne('c-grace', 'wrk_grace')
  t.equal((await cancel(job.id, { include_running: true })).status, 202)
  t.equal((await getJob(job.id)).state, 'processing', 'still running during the grace period')
  const ended = await eventually(
    async () => {
      const j = await getJob(job.id)
      return j.state === 'cancelled' ? j : null
    },
    10_000,
    'the grace period to end the job',
  )
  t.match(ended, { state: 'cancelled', attempt: 1 })
  isError(t, await failedAck(job.id, 'wrk_grace'), 409, 'invalid_state', 'a late failure ack')
  isError(t, await ack({ job_id: job.id, worker_id: 'wrk_grace', status: 'succeeded' }), 409, 'invalid_state', 'a late success ack')
  const history = await h.request('GET', `/jobsvc/v1/jobs/${job.id}/history`)
  t.match(history.body.data.at(-1), { type: 'job_cancelled', data: { previous_state: 'processing', attempt: 1, acknowledged: false } })
  t.equal(
    (await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_x', queues: ['c-grace'], wait_seconds: 0 })).body.jobs.length,
    0,
    'never retried',
  )
})

t.test("the running parent's continuations are cancelled with it", async (t) => {
  const parent = await create({ queue: 'c-parent' })
  await claimOne('c-parent', 'wrk_parent')
  const child = await create({ queue: 'c-child', parent_job_id: parent.id })
  t.equal(child.state, 'scheduled')
  t.equal((await cancel(parent.id, { include_running: true })).status, 202)
  t.equal((await getJob(child.id)).state, 'scheduled', 'the child waits while the parent stops')
  t.equal((await failedAck(parent.id, 'wrk_parent')).status, 200)
  t.equal((await getJob(parent.id)).state, 'cancelled')
  t.equal((await getJob(child.id)).state, 'cancelled', 'the child is cancelled (parent_cancelled)')
})

t.test('the signal poll: an idle wait answers nothing, a job already cancelled at once, an unknown id is ignored', async (t) => {
  const job = await create({ queue: 'c-idle' })
  await claimOne('c-idle', 'wrk_idle')
  const started = Date.now()
  const idle = await signals({ worker_id: 'wrk_idle', job_ids: [job.id, 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'], wait_seconds: 0.5 })
  t.equal(idle.status, 200)
  t.strictSame(idle.body, { cancel: [] })
  t.ok(Date.now() - started >= 400, 'it waited')
  t.equal((await cancel(job.id, { include_running: true })).status, 202)
  t.strictSame((await signals({ worker_id: 'wrk_idle', job_ids: [job.id], wait_seconds: 5 })).body, { cancel: [job.id] }, 'at once')
  isError(t, await signals({ worker_id: 'wrk_idle', job_ids: [], wait_seconds: 0 }), 400, 'invalid_request', 'no job ids')
})

t.test('release: pending again without spending the attempt; the next claim has the same attempt and budget', async (t) => {
  const job = await create({ queue: 'c-release', max_attempts: 1 })
  const first = await claimOne('c-release', 'wrk_rel')
  t.equal(first.attempt, 1)
  isError(t, await release({ job_id: job.id, worker_id: 'wrk_other' }), 409, 'worker_mismatch', 'another worker')
  const res = await release({ job_id: job.id, worker_id: 'wrk_rel' })
  t.equal(res.status, 200)
  t.strictSame(res.body, { id: job.id, state: 'pending', attempt: 0, run_at: null })
  isError(t, await ack({ job_id: job.id, worker_id: 'wrk_rel', status: 'succeeded' }), 409, 'invalid_state', 'an ack after the release')
  isError(t, await heartbeat(job.id, 'wrk_rel'), 409, 'invalid_state', 'a heartbeat after the release')
  isError(t, await release({ job_id: job.id, worker_id: 'wrk_rel' }), 409, 'invalid_state', 'a second release')
  const again = await claimOne('c-release', 'wrk_rel2')
  t.equal(again.id, job.id, 'the ready index hands it out again')
  t.equal(again.attempt, 1, 'the same attempt number')
  t.equal(again.max_attempts, 1, 'the same budget')
  const acked = await failedAck(job.id, 'wrk_rel2')
  t.strictSame(acked.body, { action: 'done' }, 'a failure of that attempt is its last, as before the release')
  t.match(await getJob(job.id), { state: 'dead_letter', attempt: 1 })
})

t.test('release with a delay: scheduled, then claimable once the delay has passed', async (t) => {
  const job = await create({ queue: 'c-delay' })
  await claimOne('c-delay', 'wrk_delay')
  const res = await release({ job_id: job.id, worker_id: 'wrk_delay', delay_seconds: 1 })
  t.equal(res.status, 200)
  t.match(res.body, { id: job.id, state: 'scheduled', attempt: 0 })
  t.ok(Date.parse(res.body.run_at) > Date.now(), 'run_at is ahead')
  t.equal((await getJob(job.id)).state, 'scheduled')
  const again = await claimOne('c-delay', 'wrk_delay2')
  t.equal(again.id, job.id, 'promoted by the scheduler, then claimed')
  t.equal(again.attempt, 1)
})

t.test('a release of a job whose cancel was asked for ends it cancelled', async (t) => {
  const job = await create({ queue: 'c-rel-cancel' })
  await claimOne('c-rel-cancel', 'wrk_rc')
  t.equal((await cancel(job.id, { include_running: true })).status, 202)
  const res = await release({ job_id: job.id, worker_id: 'wrk_rc' })
  t.equal(res.status, 200)
  t.match(res.body, { id: job.id, state: 'cancelled', run_at: null })
})
