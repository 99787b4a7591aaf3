import { JobsvcClient, Worker, WorkerStopped, type JobSnapshot } from '@jobsvc/sdk'
import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { countingClient, gate, jobReaches, recordingLogger } from './support.ts'

// The TypeScript worker against a real service (API, projector and scheduler in this process,
// the real NATS and Postgres): throughput with many slots, draining on stop, progress.
const h = await startHarness(t, import.meta.filename)
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

t.test('1,000 jobs through one worker with concurrency 20: each run once, all succeeded, acked in batches', async (t) => {
  const { client: workerClient, requests, bodies } = countingClient(h.url, h.apiKey)
  const logger = recordingLogger()
  const runs = new Map<string, number>()
  let running = 0
  let mostAtOnce = 0
  const worker = new Worker({
    client: workerClient,
    queues: ['bulk'],
    concurrency: 20,
    logger,
    handlers: {
      square: async (job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1)
        mostAtOnce = Math.max(mostAtOnce, ++running)
        // Gives the other slots a turn, as real I/O would, so that runs overlap.
        await new Promise((r) => setImmediate(r))
        running--
        return { square: (job.payload.n as number) ** 2 }
      },
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()

  const created = await client.jobs.createBatch(Array.from({ length: 1_000 }, (_, n) => ({ job_type: 'square', queue: 'bulk', payload: { n } })))
  t.equal(created.created, 1_000)
  const ids = created.results.map((r) => ('body' in r ? r.body.id : ''))

  await jobReaches(client, ids.at(-1)!, 'succeeded', 60_000)
  const finished = async () => (await client.metrics.summary({ queue: 'bulk' })).counts.succeeded
  while ((await finished()) < 1_000) await new Promise((r) => setTimeout(r, 100))
  await worker.stop()

  const jobs = []
  for await (const job of client.jobs.listAll({ queue: 'bulk', limit: 100 })) jobs.push(job)
  t.equal(jobs.length, 1_000, 'listAll pages through every job')
  t.ok(
    jobs.every((j) => j.state === 'succeeded' && j.attempt === 1),
    'every job succeeded on its first attempt',
  )
  t.ok(
    jobs.every((j) => (j.result as { square: number } | null)?.square === (j.payload.n as number) ** 2),
    "each handler's return value is its job's result",
  )
  t.strictSame([...runs.keys()].sort(), [...ids].sort(), 'every job was handed to the handler')
  t.ok(
    [...runs.values()].every((n) => n === 1),
    'no job ran twice',
  )
  t.ok(mostAtOnce > 1 && mostAtOnce <= 20, `handlers overlapped, never more than 20 at once (${mostAtOnce})`)

  const acked = bodies.flatMap((b: any) => b.acks ?? []).map((a: any) => a.job_id)
  t.equal(acked.length, 1_000, 'one ack per job')
  t.equal(new Set(acked).size, 1_000, 'no job acked twice')
  t.ok(
    (requests.get('POST /jobsvc/v1/workers/ack/batch') ?? 0) < 1_000,
    `acks shared batches (${requests.get('POST /jobsvc/v1/workers/ack/batch')} requests)`,
  )
  t.notOk(requests.has('POST /jobsvc/v1/workers/ack'), 'the batch route was used, not single acks')
  const capacities = bodies.filter((b: any) => 'capacity' in b).map((b: any) => b.capacity as number)
  t.ok(
    capacities.every((c) => c >= 1 && c <= 20),
    'each poll asked for at most the free slots',
  )
  t.equal(capacities[0], 20, 'the first poll asked for every slot')
  t.strictSame(
    logger.entries.filter((e) => e.level !== 'info'),
    [],
    'nothing went wrong',
  )
})

t.test('ctx.progress reaches the progress stream, which ends when the job succeeds', async (t) => {
  const release = gate()
  const worker = new Worker({
    client,
    queues: ['progress'],
    logger: recordingLogger(),
    handlers: {
      report: async (_job, ctx) => {
        await ctx.progress(0.5)
        await release.opened
      },
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()
  const job = await client.jobs.create({ job_type: 'report', queue: 'progress', payload: {} })
  const seen: JobSnapshot[] = []
  for await (const snapshot of client.jobs.events(job.id)) {
    seen.push(snapshot)
    if (snapshot.progress === 0.5) release.open()
  }
  t.match(seen.at(-1), { state: 'succeeded', attempt: 1 }, 'the iterator ends with the terminal snapshot')
  t.ok(
    seen.some((s) => s.state === 'processing' && s.progress === 0.5),
    'the reported progress was streamed',
  )
  t.equal((await client.jobs.get(job.id)).progress, 0.5)
})

t.test('a result the service refuses (over 64 KiB) still acks the job succeeded, without it, and says so', async (t) => {
  const logger = recordingLogger()
  const worker = new Worker({ client, queues: ['big-result'], logger, handlers: { big: async () => ({ blob: 'x'.repeat(70_000) }) } })
  t.teardown(() => worker.stop())
  await worker.start()
  const job = await client.jobs.create({ job_type: 'big', queue: 'big-result', payload: {} })
  await jobReaches(client, job.id, 'succeeded', 30_000)
  t.equal((await client.jobs.get(job.id)).result, null)
  t.ok(
    logger.entries.some((e) => e.level === 'error' && /refused/.test(e.message)),
    'the dropped result is logged',
  )
})

t.test('stop() stops polling and lets running handlers finish', async (t) => {
  const release = gate()
  const allStarted = gate()
  const started: string[] = []
  const worker = new Worker({
    client,
    queues: ['drain'],
    concurrency: 3,
    logger: recordingLogger(),
    handlers: {
      slow: async (job) => {
        if (started.push(job.id) === 3) allStarted.open()
        await release.opened
      },
    },
  })
  await worker.start()
  const running = await Promise.all([1, 2, 3].map(() => client.jobs.create({ job_type: 'slow', queue: 'drain', payload: {} })))
  // The handlers, not the jobs' state: a claim is in the log a moment before its poll answers.
  await allStarted.opened

  let stopped = false
  const stopping = worker.stop().then(() => (stopped = true))
  const later = await client.jobs.create({ job_type: 'slow', queue: 'drain', payload: {} })
  t.equal(worker.active, 3, 'the three handlers still run')
  t.notOk(stopped, 'stop() waits for them')
  release.open()
  await stopping
  for (const job of running) t.equal((await client.jobs.get(job.id)).state, 'succeeded', `${job.id} finished and was acked`)
  t.equal(started.length, 3, 'nothing else was claimed once stop() began')
  t.equal((await client.jobs.get(later.id)).state, 'pending', 'a job created during the stop is left for other workers')
})

t.test('a handler still running when the grace period ends is aborted and its job handed back', async (t) => {
  let reason: unknown
  const started = gate()
  const worker = new Worker({
    client,
    queues: ['grace'],
    shutdownGraceMs: 300,
    logger: recordingLogger(),
    handlers: {
      stubborn: (_job, ctx) =>
        new Promise((resolve) => {
          started.open()
          ctx.signal.addEventListener('abort', () => {
            reason = ctx.signal.reason
            resolve('too late')
          })
        }),
    },
  })
  await worker.start()
  const job = await client.jobs.create({ job_type: 'stubborn', queue: 'grace', payload: {}, max_attempts: 2 })
  await started.opened
  await worker.stop()
  t.ok(reason instanceof WorkerStopped, 'ctx.signal fired with WorkerStopped')
  const after = await client.jobs.get(job.id)
  t.match(after, { state: 'pending', attempt: 0, error: null }, 'the job is pending again, its attempt not spent (issue 28: released)')
})
