import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { JobsvcClient, Worker, type CreatedJob } from '@jobsvc/sdk'
import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { jobReaches, recordingLogger } from './support.ts'

// Workflows (issue 30) through both SDKs against a real service: depends_on and on_parent_failure
// on creates, jobs.dependencies(), and the worker handing a graph job its parents' results. The
// Python SDK's module (sdk/python/tests/test_job_graphs.py) runs last, against the same service.
const h = await startHarness(t, import.meta.filename)
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

t.test("the diamond A → (B, C) → D through a real worker: D's handler is handed B's and C's results", async (t) => {
  const queue = 'sdk-diamond'
  const seen = new Map<string, { parentResults: Readonly<Record<string, unknown>>; polled: unknown }>()
  const logger = recordingLogger()
  const worker = new Worker({
    client,
    queues: [queue],
    concurrency: 4,
    logger,
    handlers: {
      step: async (job, ctx) => {
        seen.set(job.id, { parentResults: ctx.parentResults, polled: job.parent_results })
        const inputs = Object.values(ctx.parentResults) as Array<{ total: number }>
        return { name: job.payload.name, total: (job.payload.value as number) + inputs.reduce((sum, r) => sum + r.total, 0) }
      },
    },
  })
  // Every job exists before the worker polls, so that each parent's end is what activates its children.
  const step = (name: string, value: number, parents?: CreatedJob[]) =>
    client.jobs.create({
      job_type: 'step',
      queue,
      payload: { name, value },
      ...(parents === undefined ? {} : { depends_on: parents.map((p) => p.id), on_parent_failure: 'cancel' as const }),
    }) as Promise<CreatedJob>
  const a = await step('A', 1)
  const b = await step('B', 10, [a])
  const c = await step('C', 100, [a])
  const d = await step('D', 1000, [b, c])
  t.match(d, { state: 'scheduled', depends_on: [b.id, c.id], waiting_for: [b.id, c.id], on_parent_failure: 'cancel' }, 'D waits for B and C')
  t.teardown(() => worker.stop())
  await worker.start()

  const done = await jobReaches(client, d.id, 'succeeded')
  t.same(done.result, { name: 'D', total: 1000 + (10 + 1) + (100 + 1) }, "D's result is built from B's and C's")
  t.same(
    seen.get(d.id)?.parentResults,
    { [b.id]: { name: 'B', total: 11 }, [c.id]: { name: 'C', total: 101 } },
    "D's handler saw each parent's result by its id",
  )
  t.same(seen.get(d.id)?.polled, seen.get(d.id)?.parentResults, 'the same as the poll answer carried')
  t.same(seen.get(b.id)?.parentResults, { [a.id]: { name: 'A', total: 1 } }, "B's handler saw A's")
  t.same(seen.get(a.id)?.parentResults, {}, 'a job without parents is handed none')
  t.equal(seen.get(a.id)?.polled, undefined, 'and its poll answer has no parent_results')

  const deps = await client.jobs.dependencies(d.id)
  t.match(deps, {
    job_id: d.id,
    state: 'succeeded',
    on_parent_failure: 'cancel',
    waiting_for: 0,
    parents: [
      { job_id: b.id, state: 'succeeded', result: { name: 'B', total: 11 }, error: null, waiting: false },
      { job_id: c.id, state: 'succeeded', result: { name: 'C', total: 101 }, error: null, waiting: false },
    ],
    children: [],
    children_total: 0,
  })
  const root = await client.jobs.dependencies(a.id)
  t.same(root.parents, [], 'A has no parents')
  t.same(
    root.children,
    [
      { job_id: b.id, state: 'succeeded' },
      { job_id: c.id, state: 'succeeded' },
    ],
    'and B and C as its children',
  )
  t.strictSame(
    logger.entries.filter((e) => e.level !== 'info'),
    [],
    'nothing went wrong',
  )
})

t.test('depends_on and on_parent_failure on a batch item; a bad one is refused', async (t) => {
  const parent = await client.jobs.create({ job_type: 'graph-batch', queue: 'sdk-graph-batch', payload: {} })
  const batch = await client.jobs.createBatch([
    { job_type: 'graph-batch', queue: 'sdk-graph-batch', payload: {}, depends_on: [parent.id], on_parent_failure: 'run' },
  ])
  const item = batch.results[0]
  t.equal(item?.status, 201)
  const child = item !== undefined && 'body' in item ? item.body : null
  t.match(await client.jobs.get(child!.id), { state: 'scheduled', depends_on: [parent.id], on_parent_failure: 'run' })
  t.match((await client.jobs.dependencies(parent.id)).children, [{ job_id: child!.id, state: 'scheduled' }])
  await t.rejects(
    client.jobs.create({ job_type: 'graph-batch', payload: {}, depends_on: [] }),
    { name: 'JobsvcError', status: 400, code: 'invalid_request' },
    'depends_on names 1 to 100 parents',
  )
  await t.rejects(client.jobs.dependencies('job_01ARZ3NDEKTSV4RRFFQ69G5FAV'), { name: 'JobsvcError', status: 404, code: 'job_not_found' })
})

t.test('python3 -m unittest tests.test_job_graphs', async (t) => {
  const sdkDir = fileURLToPath(new URL('../../sdk/python/', import.meta.url))
  const env = { ...process.env, JOBSVC_URL: h.url, JOBSVC_API_KEY: h.apiKey, PYTHONDONTWRITEBYTECODE: '1' }
  const { code, output } = await new Promise<{ code: number; output: string }>((resolve) =>
    execFile('python3', ['-m', 'unittest', '-v', 'tests.test_job_graphs'], { cwd: sdkDir, env, timeout: 120_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? 1 : 0, output: stdout + stderr }),
    ),
  )
  t.equal(code, 0, `the Python tests passed${code === 0 ? '' : `:\n${output}`}`)
  t.ok(Number(/Ran (\d+) tests?/.exec(output)?.[1] ?? 0) > 0, 'they ran')
  t.notMatch(output, /skipped/, 'none was skipped')
})
