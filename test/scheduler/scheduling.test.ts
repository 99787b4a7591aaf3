import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'

// A short grace and a fast reaper, so that a 1-second attempt timeout is reaped within ~1.5 s.
const h = await startHarness(t, import.meta.filename, { tunables: { reaper_grace_ms: 300, reaper_interval_ms: 100 } })

const reapWindowMs = 1_000 + 300

async function create(body: Record<string, unknown>): Promise<any> {
  const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'tick', payload: {}, ...body })
  if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}

const getJob = async (id: string) => (await h.request('GET', `/jobsvc/v1/jobs/${id}`)).body
/** The job once it has left `processing`: the reaper has retried or dead-lettered its silent attempt. */
const reaped = (id: string, what: string) =>
  eventually(
    async () => {
      const j = await getJob(id)
      return j.state !== 'processing' && j
    },
    10_000,
    what,
  )
const historyOf = async (id: string) => (await h.request('GET', `/jobsvc/v1/jobs/${id}/history`)).body.data as any[]
const poll = (body: Record<string, unknown>) => h.request('POST', '/jobsvc/v1/workers/poll', { wait_seconds: 0, ...body })
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Claims exactly the given jobs of a queue for one worker, however the projector batches them. */
async function claimAll(queue: string, workerId: string, ids: string[]): Promise<void> {
  const claimed = new Set<string>()
  await eventually(
    async () => {
      const res = await poll({ worker_id: workerId, queues: [queue], capacity: ids.length, wait_seconds: 2 })
      for (const j of res.body.jobs) claimed.add(j.id)
      return claimed.size >= ids.length
    },
    10_000,
    `claims on ${queue}`,
  )
  if ([...claimed].sort().join() !== [...ids].sort().join()) throw new Error(`claimed ${[...claimed]} instead of ${ids}`)
}

t.test('a job with a run_at is not claimable before it, then the scheduler makes it pending', async (t) => {
  const runAt = new Date(Date.now() + 1_500).toISOString()
  const job = await create({ queue: 's-at', run_at: runAt })
  t.equal(job.state, 'scheduled')
  t.equal(job.run_at, runAt)
  await h.request('GET', '/jobsvc/v1/jobs?limit=1')
  t.strictSame((await poll({ worker_id: 'wrk_s', queues: ['s-at'], capacity: 5 })).body, { jobs: [] }, 'not claimable before run_at')
  t.equal((await getJob(job.id)).state, 'scheduled')

  await eventually(async () => (await getJob(job.id)).state === 'pending', 10_000, 'the promotion')
  const promoted = (await historyOf(job.id)).find((e) => e.type === 'job_promoted')
  t.ok(promoted, 'a job_promoted event was written')
  t.ok(Date.parse(promoted.time) >= Date.parse(runAt), 'promoted no earlier than run_at')

  const res = await poll({ worker_id: 'wrk_s', queues: ['s-at'], wait_seconds: 5 })
  t.same(
    res.body.jobs.map((j: any) => j.id),
    [job.id],
    'claimable once pending',
  )
  t.equal(res.body.jobs[0].attempt, 1)
  t.same(
    (await historyOf(job.id)).map((e) => e.type),
    ['job_created', 'job_promoted', 'job_claimed'],
  )
})

t.test('the reaper retries a silent attempt, and dead-letters it on the last attempt', async (t) => {
  const retried = await create({ queue: 's-reap', timeout_seconds: 1, max_attempts: 3 })
  const last = await create({ queue: 's-reap', timeout_seconds: 1, max_attempts: 1 })
  await claimAll('s-reap', 'wrk_lost', [retried.id, last.id])

  const afterRetry = await reaped(retried.id, 'the reaper to retry the attempt')
  t.match(afterRetry, { state: 'pending', attempt: 1, max_attempts: 3, worker_id: null, error: { type: 'HeartbeatTimeout' } })
  t.type(afterRetry.error.message, 'string')
  t.ok(Date.parse(afterRetry.run_at) > Date.now(), 'the retry waits for its backoff like any failed attempt')
  const failed = (await historyOf(retried.id)).at(-1)
  t.match(failed, { type: 'job_attempt_failed', data: { attempt: 1, worker_id: 'wrk_lost', reaped: true } })

  const afterLast = await reaped(last.id, 'the reaper to dead-letter the last attempt')
  t.match(afterLast, { state: 'dead_letter', attempt: 1, error: { type: 'HeartbeatTimeout' } })
  t.type(afterLast.completed_at, 'string', 'completed_at is set')
  t.match((await historyOf(last.id)).at(-1), { type: 'job_dead_lettered', data: { reaped: true } })

  const lateAck = await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: retried.id, worker_id: 'wrk_lost', status: 'succeeded' })
  t.equal(lateAck.status, 409, 'the lost worker’s late ack is refused')
  t.equal(lateAck.body.error.code, 'invalid_state')
})

t.test('the reaper spares a heartbeating attempt and an acked one while it reaps a silent one', async (t) => {
  const silent = await create({ queue: 's-live', timeout_seconds: 1 })
  const beating = await create({ queue: 's-live', timeout_seconds: 1 })
  const acked = await create({ queue: 's-live', timeout_seconds: 1 })
  // One worker claims all three so they start together and reach the reaper's window together.
  await claimAll('s-live', 'wrk_w', [silent.id, beating.id, acked.id])
  const ack = await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: acked.id, worker_id: 'wrk_w', status: 'succeeded' })
  t.strictSame(ack.body, { action: 'done' })

  let beatingDone = false
  const beats: number[] = []
  const heartbeats = (async () => {
    while (!beatingDone) {
      const res = await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: beating.id, worker_id: 'wrk_w' })
      beats.push(res.status)
      if (res.status !== 200) return
      await pause(150)
    }
  })()
  try {
    await eventually(async () => (await getJob(silent.id)).state !== 'processing', 10_000, 'the silent attempt to be reaped')
    // Beat on past the window the silent job had, plus a few reaper passes, before looking.
    const startedAt = Date.parse((await getJob(beating.id)).started_at)
    while (Date.now() < startedAt + reapWindowMs + 400) await pause(50)
  } finally {
    beatingDone = true
    await heartbeats
  }
  t.ok(beats.length > 0 && beats.every((s) => s === 200), 'every heartbeat was ok')
  t.match(await getJob(silent.id), { state: 'pending', error: { type: 'HeartbeatTimeout' } })
  t.match(await getJob(beating.id), { state: 'processing', attempt: 1, worker_id: 'wrk_w', error: null }, 'the heartbeating job is not reaped')
  t.match(await getJob(acked.id), { state: 'succeeded', attempt: 1, error: null }, 'the ack that came first stands')
  t.notOk(
    (await historyOf(acked.id)).some((e) => e.type === 'job_attempt_failed'),
    'no reap was recorded on the acked job',
  )
  const done = await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: beating.id, worker_id: 'wrk_w', status: 'succeeded' })
  t.strictSame(done.body, { action: 'done' }, 'the spared worker can still finish its job')
})
