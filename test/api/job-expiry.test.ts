import t from 'tap'
import { startWebhookReceiver } from '../support/webhook-receiver.ts'
import { eventually, startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

// Issue 28, item 4, over HTTP against the real NATS and Postgres with the scheduler running: jobs
// not claimed within their ttl of becoming due end cancelled with cancel_reason "expired", are
// never handed out after it, and take their waiting continuations with them. A job without a ttl
// keeps the spec's shape exactly.

const h = await startHarness(t, import.meta.filename, { config: { webhookAllowLoopback: true } })
const { create, getJob, poll, ack, claimOne } = jobsApi(h, { jobType: 'ttl-work' })

const settings = (queue: string, body: unknown) => h.request('PUT', `/jobsvc/v1/queues/${queue}/settings`, body)
const endsExpired = (id: string, what: string) =>
  eventually(
    async () => {
      const job = await getJob(id)
      return job.state === 'cancelled' ? job : null
    },
    10_000,
    what,
  )

const specFields = [
  'attempt',
  'completed_at',
  'created_at',
  'duration_ms',
  'error',
  'id',
  'job_type',
  'max_attempts',
  'parent_job_id',
  'payload',
  'progress',
  'queue',
  'result',
  'run_at',
  'started_at',
  'state',
  'tags',
  'timeout_seconds',
  'traceparent',
  'worker_id',
]

t.test('a job without a ttl behaves as before: no new field in its detail, its list item, its 201', async (t) => {
  const created = await create({ queue: 'plain' })
  t.same(Object.keys(created).sort(), ['attempt', 'created_at', 'id', 'job_type', 'max_attempts', 'queue', 'run_at', 'state'])
  t.same(Object.keys(await getJob(created.id)).sort(), specFields, 'the detail has no expiry field')
  const listed = await eventually(async () => (await h.request('GET', '/jobsvc/v1/jobs?queue=plain')).body.data[0])
  t.same(Object.keys(listed).sort(), specFields, 'nor the list item')
  const cancelled = await create({ queue: 'plain' })
  await h.request('POST', `/jobsvc/v1/jobs/${cancelled.id}/cancel`)
  t.notOk('cancel_reason' in (await getJob(cancelled.id)), 'a cancel asked for shows no cancel_reason')
})

t.test('validation: ttl_seconds is an integer from 1 to 2,592,000', async (t) => {
  for (const bad of [0, -5, 2_592_001, 1.5, '60', true]) {
    isError(
      t,
      await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {}, ttl_seconds: bad }),
      400,
      'invalid_request',
      `ttl ${JSON.stringify(bad)}`,
    )
  }
  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: [{ job_type: 'x', payload: {}, ttl_seconds: 0 }] })
  t.equal(batch.status, 200)
  t.equal(batch.body.results[0].status, 400, 'a batch item with a bad ttl fails alone')
  isError(t, await settings('q', { default_ttl_seconds: 0 }), 400, 'invalid_request', 'a queue default of 0')
  isError(t, await settings('q', { default_ttl_seconds: 'a' }), 400, 'invalid_request', 'a queue default not a number')
  isError(t, await settings('q', {}), 400, 'invalid_request', 'a queue default left out (null removes it)')
  const recurring = await h.request('PUT', '/jobsvc/v1/recurring/rjob_bad-ttl', {
    job_type: 'bad-ttl',
    cron_expression: '0 * * * *',
    ttl_seconds: 3_000_000,
  })
  isError(t, recurring, 400, 'invalid_request', 'a schedule ttl out of range')
  const maxed = await create({ queue: 'max-ttl', ttl_seconds: 2_592_000 })
  t.equal((await getJob(maxed.id)).ttl_seconds, 2_592_000, 'the upper bound is accepted')
})

t.test('a pending job not claimed within its ttl ends cancelled (expired); a claim after gets nothing', async (t) => {
  const job = await create({ queue: 'exp-pending', ttl_seconds: 1 })
  const detail = await getJob(job.id)
  t.equal(detail.ttl_seconds, 1)
  t.equal(detail.expires_at, new Date(Date.parse(detail.created_at) + 1000).toISOString(), 'expires ttl after its creation')
  const ended = await endsExpired(job.id, 'the pending job expires')
  t.match(ended, { state: 'cancelled', cancel_reason: 'expired', attempt: 0, expires_at: detail.expires_at })
  const polled = await poll({ worker_id: 'wrk_late', queues: ['exp-pending'] })
  t.same(polled.body.jobs, [], 'nothing to claim')
  const history = await h.request('GET', `/jobsvc/v1/jobs/${job.id}/history`)
  t.same(
    history.body.data.map((e: { type: string; data: { reason?: string } }) => [e.type, e.data.reason ?? null]),
    [
      ['job_created', null],
      ['job_cancelled', 'expired'],
    ],
    'the log holds the expiry as a job_cancelled with reason expired',
  )
  const listed = await eventually(async () => (await h.request('GET', '/jobsvc/v1/jobs?queue=exp-pending&state=cancelled')).body.data[0])
  t.match(listed, { id: job.id, cancel_reason: 'expired', ttl_seconds: 1 }, 'the list shows it alike')
  const activity = await eventually(async () => {
    const page = await h.request('GET', '/jobsvc/v1/activity?limit=100&kinds=job_cancelled')
    return page.body.data.find((r: { target_id: string }) => r.target_id === job.id)
  })
  t.match(activity, { kind: 'job_cancelled', summary: 'Job cancelled (expired)', metadata: JSON.stringify({ reason: 'expired' }) })
})

t.test('the claim refuses a job past its ttl even before the sweep has recorded the expiry', async (t) => {
  await h.stopRole('scheduler')
  const job = await create({ queue: 'exp-unswept', ttl_seconds: 1 })
  // The API's clock moved past the deadline: no sweep runs, so only the claim's own check stands between.
  const realNow = h.runtime.now
  h.runtime.now = () => new Date(Date.now() + 5_000)
  try {
    t.same((await poll({ worker_id: 'wrk_unswept', queues: ['exp-unswept'] })).body.jobs, [], 'the poll hands out nothing')
    t.equal((await getJob(job.id)).state, 'pending', 'still pending: the expiry is not recorded yet')
  } finally {
    h.runtime.now = realNow
    await h.startRole('scheduler')
  }
  t.equal((await endsExpired(job.id, 'the sweep records it once the scheduler runs')).cancel_reason, 'expired')
})

t.test('a job claimed in time runs as usual, and its deadline goes with the claim', async (t) => {
  const job = await create({ queue: 'exp-claimed', ttl_seconds: 30 })
  const claimed = await claimOne('exp-claimed', 'wrk_in_time')
  t.equal(claimed.id, job.id)
  t.match(await getJob(job.id), { state: 'processing', ttl_seconds: 30, expires_at: null })
  t.equal((await ack({ job_id: job.id, worker_id: 'wrk_in_time', status: 'succeeded' })).status, 200)
  t.notOk('cancel_reason' in (await getJob(job.id)))
})

t.test('a scheduled job: the ttl counts from run_at, not from its creation', async (t) => {
  const runAt = new Date(Date.now() + 1500).toISOString()
  const job = await create({ queue: 'exp-scheduled', run_at: runAt, ttl_seconds: 1 })
  t.equal(job.state, 'scheduled')
  t.equal((await getJob(job.id)).expires_at, new Date(Date.parse(runAt) + 1000).toISOString())
  const ended = await endsExpired(job.id, 'the scheduled job expires')
  t.ok(Date.now() >= Date.parse(runAt) + 1000, 'not before run_at + ttl')
  t.equal(ended.cancel_reason, 'expired')
  t.same((await poll({ worker_id: 'wrk_sched', queues: ['exp-scheduled'] })).body.jobs, [])
})

t.test('continuations of an expired parent are cancelled as with any cancel', async (t) => {
  const parent = await create({ queue: 'exp-parent', ttl_seconds: 1 })
  const child = await create({ queue: 'exp-child', parent_job_id: parent.id })
  t.equal(child.state, 'scheduled')
  await endsExpired(parent.id, 'the parent expires')
  const ended = await endsExpired(child.id, 'the child is cancelled with it')
  t.notOk('cancel_reason' in ended, 'the child was cancelled by its parent, not expired')
  const history = await h.request('GET', `/jobsvc/v1/jobs/${child.id}/history`)
  t.match(history.body.data.at(-1), { type: 'job_cancelled', data: { reason: 'parent_cancelled' } })
})

t.test('batch items carry their ttl; the queue default applies to jobs without one; the request wins', async (t) => {
  const set = await settings('exp-default', { default_ttl_seconds: 1 })
  t.equal(set.status, 200)
  t.same(set.body, { queue: 'exp-default', default_ttl_seconds: 1 })
  t.ok(set.headers.get('x-event-seq'), 'X-Event-Seq')
  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: [
      { job_type: 'b', payload: {}, queue: 'exp-default' },
      { job_type: 'b', payload: {}, queue: 'exp-default', ttl_seconds: 600 },
      { job_type: 'b', payload: {}, queue: 'exp-batch', ttl_seconds: 1 },
    ],
  })
  t.equal(batch.body.created, 3)
  const [byDefault, own, batched] = batch.body.results.map((r: { body: { id: string } }) => r.body.id)
  t.equal((await getJob(byDefault)).ttl_seconds, 1, "the queue's default")
  t.equal((await getJob(own)).ttl_seconds, 600, 'the request wins')
  const single = await create({ queue: 'exp-default' })
  t.equal((await getJob(single.id)).ttl_seconds, 1, 'a single create gets the default too')
  for (const id of [byDefault, batched, single.id]) t.equal((await endsExpired(id, `${id} expires`)).cancel_reason, 'expired')
  t.equal((await getJob(own)).state, 'pending', 'the job with its own longer ttl still waits')
  const queues = await eventually(async () => {
    const list = await h.request('GET', '/jobsvc/v1/queues')
    return list.body.data.find((q: { queue: string }) => q.queue === 'exp-default')
  })
  t.equal(queues.default_ttl_seconds, 1, 'GET /queues shows the default')
  const removed = await settings('exp-default', { default_ttl_seconds: null })
  t.same(removed.body, { queue: 'exp-default', default_ttl_seconds: null })
  t.notOk('ttl_seconds' in (await getJob((await create({ queue: 'exp-default' })).id)), 'removed: jobs get no ttl again')
})

t.test('a job.expired webhook goes to subscriptions that name it; `*` gets none', async (t) => {
  const receiver = await startWebhookReceiver(t)
  t.equal((await h.request('POST', '/jobsvc/v1/webhooks', { url: `${receiver.base}/expired`, events: ['job.expired'] })).status, 201)
  t.equal((await h.request('POST', '/jobsvc/v1/webhooks', { url: `${receiver.base}/all`, events: '*' })).status, 201)
  await h.startRole('dispatcher')
  t.teardown(() => h.stopRole('dispatcher'))
  const job = await create({ queue: 'exp-hook', ttl_seconds: 1 })
  const [sent] = await eventually(async () => {
    const got = receiver.at('/expired').filter((b) => b.body.data.job_id === job.id)
    return got.length > 0 ? got : null
  })
  t.equal(sent!.body.event_type, 'job.expired')
  t.match(sent!.body.data, {
    schema_version: 1,
    job_id: job.id,
    project_id: h.projectId,
    queue: 'exp-hook',
    state: 'cancelled',
    reason: 'expired',
    previous_state: 'pending',
    ttl_seconds: 1,
  })
  await eventually(async () => receiver.at('/all').some((b) => b.body.data.job_id === job.id && b.body.event_type === 'job.created'))
  t.notOk(
    receiver.at('/all').some((b) => b.body.event_type === 'job.expired'),
    '`*` keeps the spec meaning',
  )
})

t.test('recurring: the schedule carries ttl_seconds, and each occurrence is created with it', async (t) => {
  const put = await h.request('PUT', '/jobsvc/v1/recurring/rjob_ttl-tick', {
    job_type: 'ttl-tick',
    cron_expression: '* * * * *',
    queue: 'exp-recurring',
    ttl_seconds: 45,
  })
  t.equal(put.status, 201)
  t.equal(put.body.ttl_seconds, 45)
  const plain = await h.request('PUT', '/jobsvc/v1/recurring/rjob_no-ttl', { job_type: 'no-ttl', cron_expression: '0 * * * *' })
  t.notOk('ttl_seconds' in plain.body, 'a schedule without one shows none')
  // The scheduler fires the next minute's occurrence with its clock moved past it; the other
  // tests' jobs have ended by now, so the moved clock expires nothing of theirs.
  const realNow = h.runtime.now
  h.runtime.now = () => new Date(Date.now() + 61_000)
  t.teardown(() => void (h.runtime.now = realNow))
  const fired = await eventually(async () => (await h.request('GET', '/jobsvc/v1/jobs?queue=exp-recurring')).body.data[0], 10_000, 'the occurrence')
  h.runtime.now = realNow
  t.equal(fired.ttl_seconds, 45)
  t.equal((await getJob(fired.id)).ttl_seconds, 45)
})
