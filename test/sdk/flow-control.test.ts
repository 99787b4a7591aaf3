import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { JobsvcClient, RateLimited, Worker } from '@jobsvc/sdk'
import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'
import { countingClient, jobReaches, recordingLogger } from './support.ts'

// Flow control (issue 29) through both SDKs against a real service: concurrency_key on creates,
// a queue's limits, and a handler's RateLimited acked `rate_limited`, which puts the job back
// without spending its attempt. The Python SDK's module (sdk/python/tests/test_flow_control.py)
// runs last, against the same service.
const h = await startHarness(t, import.meta.filename)
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })
const refused = { name: 'JobsvcError', status: 400, code: 'invalid_request' }

t.test('concurrency_key round-trips on a create and a batch item (1 to 500 characters); a job without one has none', async (t) => {
  const keyed = await client.jobs.create({ job_type: 'flow-key', queue: 'flow-key', payload: {}, concurrency_key: 'cust-1' })
  t.match(await client.jobs.get(keyed.id), { concurrency_key: 'cust-1' }, 'the job carries it')
  const batch = await client.jobs.createBatch([
    { job_type: 'flow-key', queue: 'flow-key', payload: {}, concurrency_key: 'cust-2' },
    { job_type: 'flow-key', queue: 'flow-key', payload: {} },
  ])
  t.equal(batch.created, 2)
  const [withKey, without] = batch.results.map((r) => ('body' in r ? r.body : null))
  t.match(await client.jobs.get(withKey!.id), { concurrency_key: 'cust-2' }, 'so does a batch item')
  t.notOk((await client.jobs.get(without!.id)).concurrency_key, 'a job created without one has none')
  const tooLong = { job_type: 'flow-key', queue: 'flow-key', payload: {}, concurrency_key: 'k'.repeat(501) }
  await t.rejects(client.jobs.create(tooLong), refused, 'a key is 1 to 500 characters')
})

t.test("a queue's limits: set, get, their state, delete", async (t) => {
  const queue = 'flow-limits'
  const set = await client.queues.setLimits(queue, {
    concurrency: { limit: 5, per_key: { limit: 1, by: 'concurrency_key' } },
    rate: { limit: 100, period_seconds: 60 },
  })
  t.match(set, {
    queue,
    concurrency: { limit: 5, per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'queue' },
    rate: { limit: 100, period_seconds: 60, burst: 100, by: null },
    updated_at: String,
  })
  t.same(await client.queues.getLimits(queue), set, 'get answers what set did')

  for (const key of ['cust-1', 'cust-1', 'cust-1', 'cust-2']) {
    await client.jobs.create({ job_type: 'flow-limited', queue, payload: {}, concurrency_key: key })
  }
  const state = await eventually(
    async () => {
      const s = await client.queues.getLimitsState(queue)
      return s.waiting === 4 ? s : null
    },
    15_000,
    'the four jobs to wait in the state',
  )
  t.match(state, { queue, limits: set, running: 0, waiting: 4, oldest_waiting_since: String, held_until: null, keys: Array })
  t.match(
    state.keys.find((k) => k.key === 'cust-1'),
    { key: 'cust-1', running: 0, waiting: 3 },
    'keys are counted apart',
  )
  t.equal(state.keys[0]?.key, 'cust-1', 'the key with the most jobs waiting first')

  t.equal(await client.queues.deleteLimits(queue), undefined, 'delete answers nothing (204)')
  t.same(await client.queues.getLimits(queue), { queue, concurrency: null, rate: null, updated_at: null })

  await t.rejects(client.queues.setLimits(queue, {}), refused, 'limits must limit something')
  await t.rejects(client.queues.setLimits(queue, { concurrency: {} }), refused, 'concurrency needs limit or per_key')
})

t.test("a handler's RateLimited is acked rate_limited: the job waits retryAfterMs and runs again as the same attempt", async (t) => {
  const { client: workerClient, bodies } = countingClient(h.url, h.apiKey)
  const logger = recordingLogger()
  const runs: Array<{ attempt: number; at: number }> = []
  const worker = new Worker({
    client: workerClient,
    queues: ['flow-rl'],
    logger,
    handlers: {
      'call-api': async (job) => {
        runs.push({ attempt: job.attempt, at: Date.now() })
        if (runs.length === 1) throw new RateLimited(1_500)
        return { called: true }
      },
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()
  // One attempt only: were the rate-limited one spent, there would be none left to run again.
  const job = await client.jobs.create({ job_type: 'call-api', queue: 'flow-rl', payload: {}, max_attempts: 1 })

  const waiting = await eventually(
    async () => {
      const j = await client.jobs.get(job.id)
      return j.state === 'pending' && runs.length === 1 ? { job: j, readAt: Date.now() } : null
    },
    15_000,
    'the job to be put back',
  )
  t.equal(waiting.job.attempt, 0, 'the attempt was not spent')
  t.equal(waiting.job.error, null, 'no failure recorded')
  const dueAt = Date.parse(waiting.job.run_at ?? '')
  t.ok(dueAt >= runs[0]!.at + 1_500 && dueAt <= waiting.readAt + 1_500, 'due retryAfterMs after the ack')
  const acks = bodies.flatMap((b) => (b as { acks?: unknown[] }).acks ?? [])
  t.match(acks, [{ job_id: job.id, worker_id: worker.workerId, status: 'rate_limited', retry_after_ms: 1_500 }], 'acked rate_limited')

  const done = await jobReaches(client, job.id, 'succeeded', 20_000)
  t.strictSame(
    runs.map((r) => r.attempt),
    [1, 1],
    'the next claim is the same attempt',
  )
  t.ok(runs[1]!.at >= dueAt, 'run again once due')
  t.match(done, { attempt: 1, result: { called: true } })
  const types = (await client.jobs.history(job.id)).data.map((e) => e.type)
  t.notOk(types.includes('job_attempt_failed'), `no attempt failed (${types.join(', ')})`)
  t.strictSame(
    logger.entries.filter((e) => e.level !== 'info'),
    [],
    'nothing went wrong',
  )
})

t.test('RateLimited takes whole milliseconds from 1 to a day; anything but a number of them is a TypeError', async (t) => {
  t.equal(new RateLimited(1_500).retryAfterMs, 1_500)
  t.equal(new RateLimited(0).retryAfterMs, 1)
  t.equal(new RateLimited(2.1).retryAfterMs, 3)
  t.equal(new RateLimited(10 * 86_400_000).retryAfterMs, 86_400_000)
  t.match(new RateLimited(5), { name: 'RateLimited', message: 'rate limited; retry after 5 ms' })
  t.ok(new RateLimited(5) instanceof Error)
  t.throws(() => new RateLimited(Number.NaN), TypeError)
  t.throws(() => new RateLimited(-1), TypeError)
})

t.test('the low-level ack takes rate_limited with retry_after_ms: pending again, due then, the attempt not spent', async (t) => {
  const job = await client.jobs.create({ job_type: 'flow-ack', queue: 'flow-ack', payload: {} })
  const { jobs } = await client.workers.poll({ worker_id: 'flow-ack', queues: ['flow-ack'], capacity: 1, wait_seconds: 5 })
  t.equal(jobs[0]?.id, job.id)
  const missingRetryAfter = { job_id: job.id, worker_id: 'flow-ack', status: 'rate_limited' as const }
  await t.rejects(client.workers.ack(missingRetryAfter), refused, 'rate_limited needs retry_after_ms')
  const answer = await client.workers.ack({ job_id: job.id, worker_id: 'flow-ack', status: 'rate_limited', retry_after_ms: 60_000 })
  t.match(answer, { action: 'retry', retry_at: String })
  const after = await client.jobs.get(job.id)
  t.match(after, { state: 'pending', attempt: 0, error: null })
  t.equal(Date.parse(after.run_at ?? ''), Date.parse(answer.retry_at!), 'due when the answer said')
  const polled = await client.workers.poll({ worker_id: 'flow-ack', queues: ['flow-ack'], capacity: 1, wait_seconds: 0 })
  t.strictSame(polled.jobs, [], 'not handed out before then')
})

t.test('python3 -m unittest tests.test_flow_control', async (t) => {
  const sdkDir = fileURLToPath(new URL('../../sdk/python/', import.meta.url))
  const env = { ...process.env, JOBSVC_URL: h.url, JOBSVC_API_KEY: h.apiKey, PYTHONDONTWRITEBYTECODE: '1' }
  const { code, output } = await new Promise<{ code: number; output: string }>((resolve) =>
    execFile('python3', ['-m', 'unittest', '-v', 'tests.test_flow_control'], { cwd: sdkDir, env, timeout: 120_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? 1 : 0, output: stdout + stderr }),
    ),
  )
  t.equal(code, 0, `the Python tests passed${code === 0 ? '' : `:\n${output}`}`)
  t.ok(Number(/Ran (\d+) tests?/.exec(output)?.[1] ?? 0) > 0, 'they ran')
  t.notMatch(output, /skipped/, 'none was skipped')
})
