import { request as httpPost, type ClientRequest } from 'node:http'
import t from 'tap'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

/** Two polls of a project in flight at once: the other tests poll one at a time. */
const maxPolls = 2
const h = await startHarness(t, import.meta.filename, { tunables: { max_polls_per_project: maxPolls } })
const { create, getJob, poll, ack, claimOne } = jobsApi(h, { jobType: 'work' })

const missingJob = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'

/**
 * An unfiltered list waits for the projector to reach this project's last write, so a poll
 * that follows sees every job created so far: only then does an empty poll mean "not claimable".
 */
async function settle(): Promise<void> {
  const res = await h.request('GET', '/jobsvc/v1/jobs?limit=1')
  if (res.status !== 200) throw new Error(`list answered ${res.status}`)
}

const heartbeat = (body: Record<string, unknown>) => h.request('POST', '/jobsvc/v1/workers/heartbeat', body)

t.test('poll claims a job: processing, attempt 1, the spec’s item fields', async (t) => {
  const job = await create({ job_type: 'resize', queue: 'w-claim', payload: { w: 100 }, max_attempts: 4, timeout_seconds: 120 })
  const res = await poll({ worker_id: 'wrk_1', queues: ['w-claim'], wait_seconds: 5 })
  t.equal(res.status, 200)
  t.equal(res.body.jobs.length, 1)
  t.strictSame(res.body.jobs[0], {
    id: job.id,
    job_type: 'resize',
    payload: { w: 100 },
    attempt: 1,
    max_attempts: 4,
    timeout_seconds: 120,
    enqueued_at: job.created_at,
    traceparent: null,
  })
  const got = await getJob(job.id)
  t.match(got, { state: 'processing', attempt: 1, worker_id: 'wrk_1', completed_at: null })
  t.ok(Date.parse(got.started_at) >= Date.parse(job.created_at), 'started_at is set at the claim')
  await settle()
  t.strictSame((await poll({ worker_id: 'wrk_2', queues: ['w-claim'] })).body, { jobs: [] }, 'a claimed job is not handed out again')
})

t.test('poll honours queues', async (t) => {
  const a = await create({ queue: 'w-qa' })
  await settle()
  t.strictSame((await poll({ worker_id: 'wrk_q', queues: ['w-qb'] })).body, { jobs: [] }, 'a job in another queue is not claimed')
  const both = await poll({ worker_id: 'wrk_q', queues: ['w-qb', 'w-qa'], capacity: 5 })
  t.same(
    both.body.jobs.map((j: any) => j.id),
    [a.id],
    'any of the listed queues',
  )
  t.equal((await getJob(a.id)).queue, 'w-qa')
})

t.test('poll honours job_types', async (t) => {
  const x1 = await create({ queue: 'w-types', job_type: 'x' })
  const y = await create({ queue: 'w-types', job_type: 'y' })
  const x2 = await create({ queue: 'w-types', job_type: 'x' })
  await settle()
  const onlyY = await poll({ worker_id: 'wrk_t', queues: ['w-types'], job_types: ['y'], capacity: 5 })
  t.same(
    onlyY.body.jobs.map((j: any) => j.id),
    [y.id],
  )
  t.strictSame((await poll({ worker_id: 'wrk_t', queues: ['w-types'], job_types: ['z'], capacity: 5 })).body, { jobs: [] })
  const xs = await poll({ worker_id: 'wrk_t', queues: ['w-types'], job_types: ['x', 'z'], capacity: 5 })
  t.same(xs.body.jobs.map((j: any) => j.id).sort(), [x1.id, x2.id].sort())
  t.ok(xs.body.jobs.every((j: any) => j.job_type === 'x'))
})

t.test('poll honours capacity, 1 by default, 1 to 50', async (t) => {
  const made = [
    await create({ queue: 'w-cap' }),
    await create({ queue: 'w-cap' }),
    await create({ queue: 'w-cap' }),
    await create({ queue: 'w-cap' }),
  ]
  await settle()
  const one = await poll({ worker_id: 'wrk_c', queues: ['w-cap'] })
  t.equal(one.body.jobs.length, 1, 'capacity defaults to 1')
  const two = await poll({ worker_id: 'wrk_c', queues: ['w-cap'], capacity: 2 })
  t.equal(two.body.jobs.length, 2)
  const rest = await poll({ worker_id: 'wrk_c', queues: ['w-cap'], capacity: 50 })
  t.equal(rest.body.jobs.length, 1, 'capacity 50 takes what is left')
  const claimed = [...one.body.jobs, ...two.body.jobs, ...rest.body.jobs].map((j: any) => j.id)
  t.same([...claimed].sort(), made.map((j) => j.id).sort(), 'each job claimed exactly once')
  for (const capacity of [0, 51, 1.5, '2']) {
    isError(t, await poll({ worker_id: 'wrk_c', queues: ['w-cap'], capacity }), 400, 'invalid_request', `capacity ${capacity} is refused`)
  }
  isError(t, await poll({ queues: ['w-cap'] }), 400, 'invalid_request', 'worker_id is required')
  isError(t, await poll({ worker_id: 'wrk_c' }), 400, 'invalid_request', 'queues is required')
})

t.test('poll with no work and wait_seconds 0 answers {jobs: []}', async (t) => {
  const res = await poll({ worker_id: 'wrk_e', queues: ['w-empty'] })
  t.equal(res.status, 200)
  t.strictSame(res.body, { jobs: [] })
})

t.test('a long poll returns the job created while it waits', async (t) => {
  const startedAt = Date.now()
  let answered = false
  const pending = poll({ worker_id: 'wrk_l', queues: ['w-long'], wait_seconds: 20 }).then((res) => ((answered = true), res))
  // Gives the poll time to find the queue empty and start waiting; the assertions below do not
  // depend on this pause, only the scenario does.
  await new Promise((r) => setTimeout(r, 300))
  t.notOk(answered, 'the poll is held while there is no work')
  const job = await create({ queue: 'w-long' })
  const res = await pending
  t.equal(res.status, 200)
  t.same(
    res.body.jobs.map((j: any) => j.id),
    [job.id],
    'the held poll claims the new job',
  )
  t.ok(Date.parse(job.created_at) >= startedAt, 'the job was created after the poll began')
})

t.test('ack succeeded: done, no children_activated, the job succeeded', async (t) => {
  const job = await create({ queue: 'w-ok' })
  await claimOne('w-ok', 'wrk_s')
  const res = await ack({ job_id: job.id, worker_id: 'wrk_s', status: 'succeeded', duration_ms: 1234 })
  t.equal(res.status, 200)
  t.strictSame(res.body, { action: 'done' })
  t.notOk('children_activated' in res.body, 'no children_activated key without children')
  const got = await getJob(job.id)
  t.match(got, { state: 'succeeded', attempt: 1, duration_ms: 1234, error: null })
  t.ok(Date.parse(got.completed_at) >= Date.parse(got.started_at), 'completed_at is set')
  isError(t, await ack({ job_id: job.id, worker_id: 'wrk_s', status: 'succeeded' }), 409, 'invalid_state', 'a second ack is refused')
})

t.test('ack failed before the last attempt: retry with backoff, pending, not claimable before retry_at', async (t) => {
  const job = await create({ queue: 'w-retry', max_attempts: 3 })
  await claimOne('w-retry', 'wrk_f')
  const error = { type: 'TimeoutError', message: 'upstream timed out', stack_trace: 'at fetch (x.js:1)' }
  const before = Date.now()
  const res = await ack({ job_id: job.id, worker_id: 'wrk_f', status: 'failed', error })
  const after = Date.now()
  t.equal(res.status, 200)
  t.strictSame(Object.keys(res.body).sort(), ['action', 'retry_at'])
  t.equal(res.body.action, 'retry')
  const retryAt = Date.parse(res.body.retry_at)
  t.ok(retryAt >= before + 15_000 && retryAt <= after + 18_000, 'retry_at is 15 s plus 0-3 s of jitter ahead')
  const failed = (await h.request('GET', `/jobsvc/v1/jobs/${job.id}/history`)).body.data.find((e: any) => e.type === 'job_attempt_failed')
  const delay = retryAt - Date.parse(failed.data.failed_at)
  t.ok(delay >= 15_000 && delay <= 18_000, `backoff of attempt 1 is 15 s + jitter (${delay} ms)`)

  const got = await getJob(job.id)
  t.match(got, { state: 'pending', attempt: 1, max_attempts: 3, error, worker_id: null })
  t.equal(Date.parse(got.run_at), retryAt, 'the job waits for retry_at')
  await settle()
  t.strictSame((await poll({ worker_id: 'wrk_f', queues: ['w-retry'], capacity: 5 })).body, { jobs: [] }, 'not claimable before retry_at')
  isError(t, await ack({ job_id: job.id, worker_id: 'wrk_f', status: 'succeeded' }), 409, 'invalid_state', 'no ack while pending')
})

t.test('ack failed on the last attempt: dead_letter, done, the error stored', async (t) => {
  const job = await create({ queue: 'w-dead', max_attempts: 1 })
  await claimOne('w-dead', 'wrk_d')
  const error = { type: 'ValueError', message: 'bad input', stack_trace: 'line 1\nline 2' }
  const res = await ack({ job_id: job.id, worker_id: 'wrk_d', status: 'failed', error, duration_ms: 5 })
  t.strictSame(res.body, { action: 'done' })
  const got = await getJob(job.id)
  t.match(got, { state: 'dead_letter', attempt: 1, error, duration_ms: 5, worker_id: 'wrk_d' })
  t.type(got.completed_at, 'string', 'completed_at is set')

  const bare = await create({ queue: 'w-dead', max_attempts: 1 })
  await claimOne('w-dead', 'wrk_d')
  t.strictSame((await ack({ job_id: bare.id, worker_id: 'wrk_d', status: 'failed' })).body, { action: 'done' })
  const bareGot = await getJob(bare.id)
  t.equal(bareGot.state, 'dead_letter')
  t.type(bareGot.error?.type, 'string', 'a failure without an error object still records one')
})

t.test('ack and heartbeat by another worker are 409 worker_mismatch', async (t) => {
  const job = await create({ queue: 'w-mismatch' })
  await claimOne('w-mismatch', 'wrk_owner')
  isError(t, await ack({ job_id: job.id, worker_id: 'wrk_thief', status: 'succeeded' }), 409, 'worker_mismatch')
  isError(t, await ack({ job_id: job.id, worker_id: 'wrk_thief', status: 'failed' }), 409, 'worker_mismatch')
  isError(t, await heartbeat({ job_id: job.id, worker_id: 'wrk_thief' }), 409, 'worker_mismatch')
  t.match(await getJob(job.id), { state: 'processing', worker_id: 'wrk_owner', attempt: 1 }, 'the job is untouched')
  t.strictSame((await ack({ job_id: job.id, worker_id: 'wrk_owner', status: 'succeeded' })).body, { action: 'done' })
})

t.test('ack of a job that is not processing is 409 invalid_state; of an unknown job 404', async (t) => {
  const pending = await create({ queue: 'w-nack' })
  isError(t, await ack({ job_id: pending.id, worker_id: 'wrk_n', status: 'succeeded' }), 409, 'invalid_state', 'pending')
  const scheduled = await create({ queue: 'w-nack', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  isError(t, await ack({ job_id: scheduled.id, worker_id: 'wrk_n', status: 'failed' }), 409, 'invalid_state', 'scheduled')
  await h.request('POST', `/jobsvc/v1/jobs/${scheduled.id}/cancel`)
  isError(t, await ack({ job_id: scheduled.id, worker_id: 'wrk_n', status: 'failed' }), 409, 'invalid_state', 'cancelled')
  t.equal((await getJob(pending.id)).state, 'pending')
  isError(t, await ack({ job_id: missingJob, worker_id: 'wrk_n', status: 'succeeded' }), 404, 'job_not_found', 'unknown id')
  isError(t, await ack({ job_id: 'nope', worker_id: 'wrk_n', status: 'succeeded' }), 404, 'job_not_found', 'malformed id')
})

t.test('ack bodies are validated: 400 invalid_request', async (t) => {
  const job = await create({ queue: 'w-val' })
  for (const [what, body] of [
    ['no job_id', { worker_id: 'w', status: 'succeeded' }],
    ['empty job_id', { job_id: '', worker_id: 'w', status: 'succeeded' }],
    ['no worker_id', { job_id: job.id, status: 'succeeded' }],
    ['empty worker_id', { job_id: job.id, worker_id: '', status: 'succeeded' }],
    ['no status', { job_id: job.id, worker_id: 'w' }],
    ['unknown status', { job_id: job.id, worker_id: 'w', status: 'maybe' }],
  ] as const) {
    isError(t, await ack(body), 400, 'invalid_request', what)
  }
})

t.test('another project cannot see, claim, ack or heartbeat a job', async (t) => {
  const other = await h.newProject()
  const job = await create({ queue: 'w-iso' })
  await settle()
  const theirs = (method: string, path: string, body?: unknown) => httpRequest(h.url, other.apiKey, method, path, body)
  t.strictSame((await theirs('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_o', queues: ['w-iso'], wait_seconds: 0 })).body, { jobs: [] })
  await claimOne('w-iso', 'wrk_o')
  isError(t, await theirs('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'wrk_o', status: 'succeeded' }), 404, 'job_not_found')
  isError(t, await theirs('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'wrk_o' }), 404, 'job_not_found')
  t.equal((await getJob(job.id)).state, 'processing')
})

t.test('heartbeat: ok while processing, progress recorded, refusals', async (t) => {
  const job = await create({ queue: 'w-hb' })
  isError(t, await heartbeat({ job_id: job.id, worker_id: 'wrk_h' }), 409, 'invalid_state', 'pending job')
  await claimOne('w-hb', 'wrk_h')
  const res = await heartbeat({ job_id: job.id, worker_id: 'wrk_h' })
  t.equal(res.status, 200)
  t.strictSame(res.body, { status: 'ok' })
  t.equal((await getJob(job.id)).progress, null, 'a heartbeat without progress leaves it null')

  t.strictSame((await heartbeat({ job_id: job.id, worker_id: 'wrk_h', progress: 0.25 })).body, { status: 'ok' })
  t.equal((await getJob(job.id)).progress, 0.25, 'the progress is on the job')
  await heartbeat({ job_id: job.id, worker_id: 'wrk_h', progress: 0.75 })
  t.equal((await getJob(job.id)).progress, 0.75)
  const listed = (await h.request('GET', '/jobsvc/v1/jobs?queue=w-hb')).body.data[0]
  t.equal(listed.progress, 0.75, 'the list shows it too')
  const history = (await h.request('GET', `/jobsvc/v1/jobs/${job.id}/history`)).body.data.map((e: any) => e.type)
  t.same(history, ['job_created', 'job_claimed', 'job_progressed', 'job_progressed'], 'plain heartbeats are not events')
  isError(t, await heartbeat({ job_id: job.id, worker_id: 'wrk_h', progress: 1.5 }), 400, 'invalid_request', 'progress above 1')

  await ack({ job_id: job.id, worker_id: 'wrk_h', status: 'succeeded' })
  isError(t, await heartbeat({ job_id: job.id, worker_id: 'wrk_h' }), 409, 'invalid_state', 'succeeded job')
  isError(t, await heartbeat({ job_id: missingJob, worker_id: 'wrk_h' }), 404, 'job_not_found', 'unknown job')
  isError(t, await heartbeat({ worker_id: 'wrk_h' }), 400, 'invalid_request', 'job_id is required')
})

t.test('register answers registered and stores the valid schedules only', async (t) => {
  const res = await h.request('POST', '/jobsvc/v1/workers/register', {
    worker_id: 'wrk_r',
    queues: ['default', 'cronq'],
    job_types: ['report.daily', 'cleanup'],
    hostname: 'host-1',
    sdk_version: '1.2.3',
    recurring_schedules: [
      { job_type: 'report.daily', cron_expression: '0 6 * * *' },
      { job_type: 'broken.cron', cron_expression: 'not a cron' },
      { job_type: 'bad.zone', cron_expression: '0 * * * *', timezone: 'Mars/Olympus' },
      { job_type: 'no.cron' },
      { job_type: 'Cleanup Old', cron_expression: '*/5 * * * *', queue: 'cronq', timezone: 'Europe/Paris', max_attempts: 5, timeout_seconds: 60 },
    ],
  })
  t.equal(res.status, 200)
  t.strictSame(res.body, { status: 'registered' }, 'invalid schedules do not fail the registration')

  const rows = await eventually(
    async () => {
      const r = await h.runtime.sql`SELECT * FROM recurring_jobs WHERE project_id = ${h.projectId} ORDER BY id`
      return r.some((x) => x.id === 'rjob_cleanup-old') && r
    },
    10_000,
    'the last valid schedule to be projected',
  )
  // The schedules are upserted in order, so once the last one is projected, any earlier one is too.
  t.same(
    rows.map((r) => r.id),
    ['rjob_cleanup-old', 'rjob_report-daily'],
    'only the valid schedules are stored',
  )
  t.match(rows[1], {
    job_type: 'report.daily',
    cron_expression: '0 6 * * *',
    queue: 'default',
    timezone: 'UTC',
    max_attempts: 3,
    timeout_seconds: 1800,
  })
  t.match(rows[0], {
    job_type: 'Cleanup Old',
    cron_expression: '*/5 * * * *',
    queue: 'cronq',
    timezone: 'Europe/Paris',
    max_attempts: 5,
    timeout_seconds: 60,
  })

  const minimal = await h.request('POST', '/jobsvc/v1/workers/register', { worker_id: 'wrk_r', queues: ['default'], job_types: [] })
  t.strictSame(minimal.body, { status: 'registered' }, 'schedules are optional')
  isError(t, await h.request('POST', '/jobsvc/v1/workers/register', { queues: [], job_types: [] }), 400, 'invalid_request', 'worker_id is required')
})

/**
 * A poll on a connection of its own, which the test can drop as a worker that dies would: the
 * socket is destroyed (fetch's abort may leave a kept-alive socket to the server's own timeout).
 */
function abortablePoll(apiKey: string, body: Record<string, unknown>) {
  const state = { settled: false }
  const payload = JSON.stringify(body)
  let request!: ClientRequest
  const answered = new Promise<{ status: number; body: unknown }>((resolve) => {
    request = httpPost(`${h.url}/jobsvc/v1/workers/poll`, {
      method: 'POST',
      agent: false,
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
    })
    request.on('response', (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (text += chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }))
      res.on('error', () => resolve({ status: 0, body: 'dropped' }))
    })
    request.on('error', () => resolve({ status: 0, body: 'dropped' }))
    request.end(payload)
  }).finally(() => (state.settled = true))
  return { answered, state, disconnect: () => request.destroy() }
}

/**
 * Two long polls of `queue` that hold both slots of the project, proved by a third (without
 * wait) being refused. A holder that met a probe still in flight was itself refused: it polls
 * again. Once a probe is refused while no holder was, nothing but the holders is in flight, so
 * they hold the slots.
 */
async function holdBothSlots(queue: string) {
  const holder = (i: number) => abortablePoll(h.apiKey, { worker_id: `wrk_hold${i}`, queues: [queue], wait_seconds: 30 })
  const holders = [holder(1), holder(2)]
  const refused = await eventually(
    async () => {
      const refusedHolders = holders.filter((hd) => hd.state.settled)
      holders.forEach((hd, i) => {
        if (hd.state.settled) holders[i] = holder(i + 1)
      })
      // A holder polling again gets a round to arrive before the next probe.
      if (refusedHolders.length > 0) return false
      const res = await poll({ worker_id: 'wrk_probe', queues: [queue] })
      return res.status === 429 && !holders.some((hd) => hd.state.settled) && res
    },
    15_000,
    `two polls of ${queue} to hold both slots`,
  )
  return { holders, refused }
}

async function dropAll(polls: Array<ReturnType<typeof abortablePoll>>): Promise<number[]> {
  for (const p of polls) p.disconnect()
  return (await Promise.all(polls.map((p) => p.answered))).map((a) => a.status)
}

const slotsFree = () => eventually(async () => (await poll({ worker_id: 'wrk_free', queues: ['w-free'] })).status === 200, 15_000, 'a free slot')

t.test('a project has at most max_polls_per_project polls in flight: 429 with Retry-After, per project', async (t) => {
  const other = await h.newProject()
  const { holders, refused } = await holdBothSlots('w-full')
  isError(t, refused, 429, 'rate_limit_exceeded', `poll number ${maxPolls + 1} is refused`)
  t.equal(refused.headers.get('retry-after'), '2', 'with Retry-After')
  t.match(refused.body.error.message, /polls in flight/)
  const theirs = await httpRequest(h.url, other.apiKey, 'POST', '/jobsvc/v1/workers/poll', {
    worker_id: 'wrk_other',
    queues: ['w-full'],
    wait_seconds: 0,
  })
  t.strictSame({ status: theirs.status, body: theirs.body }, { status: 200, body: { jobs: [] } }, "another project's poll is admitted meanwhile")
  t.same(await dropAll(holders), [0, 0], 'the two polls were waiting all along')
})

t.test('every way a poll ends frees its slot: deadline, claim, disconnect', async (t) => {
  /** Both slots free: two polls held at once are admitted, and a third is refused. */
  async function bothSlotsFree(what: string): Promise<void> {
    const { holders } = await holdBothSlots('w-probe')
    t.same(await dropAll(holders), [0, 0], `after ${what}, two polls fit again, and they were held (a third was refused)`)
    await slotsFree()
  }

  // The previous test's polls were dropped: their slots come back once the server sees the close.
  await slotsFree()
  const deadline = await Promise.all([1, 2].map((i) => poll({ worker_id: `wrk_dl${i}`, queues: ['w-deadline'], wait_seconds: 1 })))
  t.same(
    deadline.map((r) => r.body),
    [{ jobs: [] }, { jobs: [] }],
    'two polls reach their deadline',
  )
  await bothSlotsFree('a deadline')

  const jobs = [await create({ queue: 'w-slot-claim' }), await create({ queue: 'w-slot-claim' })]
  const claimed = await Promise.all([1, 2].map((i) => poll({ worker_id: `wrk_sc${i}`, queues: ['w-slot-claim'], wait_seconds: 10 })))
  t.same(claimed.flatMap((r) => r.body.jobs.map((j: any) => j.id)).sort(), jobs.map((j) => j.id).sort(), 'two polls claim a job each')
  await bothSlotsFree('a claim')

  const { holders } = await holdBothSlots('w-disconnect')
  await dropAll(holders)
  await slotsFree()
  await bothSlotsFree('a disconnect')
})
