import { JobCancelled, JobsvcClient, Worker } from '@jobsvc/sdk'
import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { gate, jobReaches, recordingLogger } from './support.ts'

// Issue 28 through the TypeScript SDK against a real service: a running job cancelled with
// `includeRunning` reaches its handler's ctx.signal within a second (heartbeats are 10 s apart
// here, so only the signal poll can bring it), and the job ends cancelled; a worker's stop hands
// back what is still running, which another worker then claims as the same attempt.
const h = await startHarness(t, import.meta.filename)
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

t.test('a cancel of a running job aborts ctx.signal within 1 s, and the job ends cancelled', async (t) => {
  const started = gate()
  let abortedAt = 0
  let reason: unknown
  const logger = recordingLogger()
  const worker = new Worker({
    client,
    queues: ['sdk-cancel'],
    logger,
    handlers: {
      long: (_job, ctx) =>
        new Promise((_resolve, reject) => {
          started.open()
          ctx.signal.addEventListener('abort', () => {
            abortedAt = Date.now()
            reason = ctx.signal.reason
            reject(ctx.signal.reason)
          })
        }),
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()
  const job = await client.jobs.create({ job_type: 'long', queue: 'sdk-cancel', payload: {}, max_attempts: 3, timeout_seconds: 600 })
  await started.opened
  // The worker watches a job for a cancel once it has run a moment (signalWatchDelayMs).
  await new Promise((r) => setTimeout(r, 500))
  const askedAt = Date.now()
  const answer = await client.jobs.cancel(job.id, { includeRunning: true })
  t.strictSame(answer, { id: job.id, state: 'processing', cancel_requested: true })
  const ended = await jobReaches(client, job.id, 'cancelled', 10_000)
  t.ok(abortedAt > 0, 'ctx.signal fired')
  t.ok(abortedAt - askedAt < 1000, `within 1 s of the cancel (${abortedAt - askedAt} ms)`)
  t.ok(reason instanceof JobCancelled, 'with JobCancelled')
  t.equal(ended.attempt, 1, 'not retried')
  t.equal(worker.active, 0)
})

t.test("the spec's cancel of a running job is still refused", async (t) => {
  const started = gate()
  const done = gate()
  const worker = new Worker({
    client,
    queues: ['sdk-spec-cancel'],
    logger: recordingLogger(),
    handlers: {
      wait: async () => {
        started.open()
        await done.opened
      },
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()
  const job = await client.jobs.create({ job_type: 'wait', queue: 'sdk-spec-cancel', payload: {} })
  await started.opened
  await t.rejects(client.jobs.cancel(job.id), { status: 409, code: 'invalid_state' })
  done.open()
  await jobReaches(client, job.id, 'succeeded', 10_000)
})

t.test('stop() hands back what still runs after its grace: another worker claims it as the same attempt', async (t) => {
  const started = gate()
  const first = new Worker({
    client,
    queues: ['sdk-release'],
    shutdownGraceMs: 200,
    logger: recordingLogger(),
    handlers: {
      slow: (_job, ctx) =>
        new Promise((resolve) => {
          started.open()
          ctx.signal.addEventListener('abort', () => resolve('stopped'))
        }),
    },
  })
  await first.start()
  const job = await client.jobs.create({ job_type: 'slow', queue: 'sdk-release', payload: {}, max_attempts: 1 })
  await started.opened
  await first.stop()
  t.match(await client.jobs.get(job.id), { state: 'pending', attempt: 0 }, 'pending again, the attempt not spent')
  const attempts: number[] = []
  const second = new Worker({
    client,
    queues: ['sdk-release'],
    logger: recordingLogger(),
    handlers: {
      slow: (polled) => {
        attempts.push(polled.attempt)
        return 'done'
      },
    },
  })
  t.teardown(() => second.stop())
  await second.start()
  await jobReaches(client, job.id, 'succeeded', 10_000)
  t.strictSame(attempts, [1], 'claimed again as attempt 1 of 1')
})

t.test('cancel_in_progress (issue 29): a newer job of a full key asks the running one to stop, through its handler, and then runs', async (t) => {
  const queue = 'sdk-in-progress'
  await client.queues.setLimits(queue, { concurrency: { per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'cancel_in_progress' } })
  const started = gate()
  let reason: unknown
  const ran: string[] = []
  // Room for two, so the worker's poll tries the newer job while the old one runs.
  const worker = new Worker({
    client,
    queues: [queue],
    concurrency: 2,
    logger: recordingLogger(),
    handlers: {
      sync: (job, ctx) =>
        new Promise((resolve, reject) => {
          ran.push(job.id)
          if (ran.length > 1) return resolve(undefined)
          started.open()
          ctx.signal.addEventListener('abort', () => {
            reason = ctx.signal.reason
            reject(ctx.signal.reason)
          })
        }),
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()
  const old = await client.jobs.create({ job_type: 'sync', queue, payload: {}, concurrency_key: 'doc-1', timeout_seconds: 600 })
  await started.opened
  const newer = await client.jobs.create({ job_type: 'sync', queue, payload: {}, concurrency_key: 'doc-1' })
  const stopped = await jobReaches(client, old.id, 'cancelled', 15_000)
  t.ok(reason instanceof JobCancelled, "the running job's handler was told to stop")
  t.equal(stopped.attempt, 1, 'the old one ends cancelled, not retried')
  await jobReaches(client, newer.id, 'succeeded', 15_000)
  t.same(ran, [old.id, newer.id], 'then the newer one ran')
})
