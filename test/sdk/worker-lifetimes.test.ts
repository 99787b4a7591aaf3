import { JobsvcClient, JobTimeout, Worker, type Job } from '@jobsvc/sdk'
import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'
import { countingClient, gate, jobReaches, recordingLogger } from './support.ts'

// Attempts that end other than by a quick success: a handler outliving timeout_seconds / 3 kept
// alive by heartbeats, a throwing handler retried then dead-lettered, an ack after a reap. The
// three run at once (the longest waits out a 30 s timeout) against one service whose reaper
// grants 1 s of grace instead of 30.
const h = await startHarness(t, import.meta.filename, { tunables: { reaper_grace_ms: 1_000 } })
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

const isReaped = (job: Job) => job.error?.type === 'HeartbeatTimeout'
const reaped = (jobId: string) => eventually(async () => isReaped(await client.jobs.get(jobId)), 45_000, `${jobId} to be reaped`)

function startWorker(queue: string, handlers: ConstructorParameters<typeof Worker>[0]['handlers'], workerClient = client) {
  const logger = recordingLogger()
  const worker = new Worker({ client: workerClient, queues: [queue], handlers, logger })
  t.teardown(() => worker.stop())
  return { worker, logger, started: worker.start() }
}

// Heartbeats: the worker's job and a control job claimed just after it, by a worker that never
// heartbeats, have the same 30 s timeout. When the control job is reaped, the worker's job,
// claimed earlier, would have been too without its heartbeats (every 10 s).
const beats = countingClient(h.url, h.apiKey)
const longRun = gate()
const controlClaimed = gate()
let controlJobId = ''
const heartbeating = startWorker(
  'beat',
  {
    long: async () => {
      longRun.open()
      await controlClaimed.opened
      await reaped(controlJobId)
      return 'outlived the control job'
    },
  },
  beats.client,
)
await heartbeating.started
const longJob = await client.jobs.create({ job_type: 'long', queue: 'beat', payload: {}, timeout_seconds: 30 })
await longRun.opened
const control = await client.jobs.create({ job_type: 'long', queue: 'beat-silent', payload: {}, timeout_seconds: 30 })
controlJobId = control.id
const claimed = await client.workers.poll({ worker_id: 'wrk_silent', queues: ['beat-silent'], wait_seconds: 5 })
controlClaimed.open()

// Retries: a handler that always throws, on a job with two attempts.
class PaymentDeclined extends Error {
  override name = 'PaymentDeclined'
}
const attemptsSeen: number[] = []
const failing = startWorker('flaky', {
  charge: (job) => {
    attemptsSeen.push(job.attempt)
    throw new PaymentDeclined(`card declined on attempt ${job.attempt}`)
  },
  shout: () => {
    throw 'not an Error'
  },
})
await failing.started
const flaky = await client.jobs.create({ job_type: 'charge', queue: 'flaky', payload: {}, max_attempts: 2 })
const shouty = await client.jobs.create({ job_type: 'shout', queue: 'flaky', payload: {}, max_attempts: 1 })

// A late ack: the handler outlives its 1 s timeout and the reap of its attempt, then returns.
let lateSignalReason: unknown
const late = startWorker('late', {
  sleepy: async (job, ctx) => {
    await reaped(job.id)
    lateSignalReason = ctx.signal.reason
  },
  quick: () => 'done',
})
await late.started
const sleepy = await client.jobs.create({ job_type: 'sleepy', queue: 'late', payload: {}, timeout_seconds: 1, max_attempts: 1 })

t.test('a handler running past timeout_seconds / 3 is kept alive by heartbeats and not reaped', async (t) => {
  t.equal(claimed.jobs[0]?.id, control.id, 'the control job was claimed after the worker’s job')
  const done = await jobReaches(client, longJob.id, 'succeeded', 50_000)
  t.ok(isReaped(await client.jobs.get(control.id)), 'the silent control job was reaped')
  t.match(done, { attempt: 1, error: null }, 'the worker’s job was never reaped: one attempt, succeeded')
  const history = await client.jobs.history(longJob.id)
  t.notOk(
    history.data.some((e) => e.type === 'job_attempt_failed'),
    'no failed attempt in its history',
  )
  const sent = beats.bodies.filter((b: any) => b.job_id === longJob.id && !('status' in b))
  t.ok(sent.length >= 2, `the worker heartbeated it every 10 s (${sent.length} heartbeats)`)
  t.strictSame(
    heartbeating.logger.entries.filter((e) => e.level !== 'info'),
    [],
    'no late ack, no failed heartbeat',
  )
})

t.test('a throwing handler is retried, then dead-lettered with the error’s type, message and stack', async (t) => {
  const dead = await jobReaches(client, flaky.id, 'dead_letter', 40_000)
  t.strictSame(attemptsSeen, [1, 2], 'run once per attempt')
  t.match(dead, { attempt: 2, max_attempts: 2, error: { type: 'PaymentDeclined', message: 'card declined on attempt 2' } })
  t.match(dead.error?.stack_trace, /worker-lifetimes\.test\.ts/, 'the stack trace is the handler’s')
  const types = (await client.jobs.history(flaky.id)).data.map((e) => e.type)
  t.strictSame(
    types.filter((type) => type !== 'job_promoted'),
    ['job_created', 'job_claimed', 'job_attempt_failed', 'job_claimed', 'job_dead_lettered'],
    'claimed, failed and retried, claimed again, dead-lettered',
  )
  t.match(
    await jobReaches(client, shouty.id, 'dead_letter'),
    { error: { type: 'string', message: 'not an Error' } },
    'a thrown non-Error fails the attempt too',
  )
  t.strictSame(
    failing.logger.entries.filter((e) => e.level !== 'info'),
    [],
    'handler errors are acks, not worker errors',
  )
})

t.test('an ack after the attempt was reaped is logged, not thrown, and the worker goes on', async (t) => {
  const warned = await eventually(
    async () => late.logger.entries.find((e) => e.level === 'warn' && e.fields.job_id === sleepy.id),
    30_000,
    'the late ack',
  )
  t.match(warned, { message: /late ack/, fields: { code: 'invalid_state', status: 'succeeded' } })
  t.ok(lateSignalReason instanceof JobTimeout, 'ctx.signal fired when timeout_seconds passed')
  t.equal((await client.jobs.get(sleepy.id)).state, 'dead_letter', 'the reaper’s outcome stands')
  const next = await client.jobs.create({ job_type: 'quick', queue: 'late', payload: {} })
  await jobReaches(client, next.id, 'succeeded')
  t.pass('the worker still takes jobs')
})
