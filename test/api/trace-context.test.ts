import { JobsvcClient, Worker, type PolledJob } from '@jobsvc/sdk'
import t from 'tap'
import { startHarness } from '../support/harness.ts'

// The W3C trace context of a create travels with the job: stored on job_created, in GET job, in
// the poll answer, and in the TypeScript worker's ctx. A malformed header never refuses a job.
const h = await startHarness(t, import.meta.filename)
const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'

const pollAll = async (queue: string, capacity: number) => {
  const res = await h.request<{ jobs: PolledJob[] }>('POST', '/jobsvc/v1/workers/poll', {
    worker_id: 'w-trace',
    queues: [queue],
    capacity,
    wait_seconds: 5,
  })
  t.equal(res.status, 200)
  return res.body.jobs
}

t.test('a single create with traceparent: kept, in GET job and in the poll answer', async (t) => {
  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'traced', queue: 'trace-single', payload: {} }, { traceparent })
  t.equal(created.status, 201)
  const read = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}`)
  t.equal(read.body.traceparent, traceparent, 'GET job returns it')
  const polled = await pollAll('trace-single', 1)
  t.same(
    polled.map((j) => [j.id, j.traceparent]),
    [[created.body.id, traceparent]],
    'the poll hands it to the worker',
  )
})

t.test('an invalid traceparent is dropped, the job created; none at all is null', async (t) => {
  const bad = await h.request(
    'POST',
    '/jobsvc/v1/jobs',
    { job_type: 'traced', queue: 'trace-invalid', payload: {} },
    { traceparent: traceparent.toUpperCase() },
  )
  t.equal(bad.status, 201, 'a malformed header does not refuse the job')
  const none = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'traced', queue: 'trace-invalid', payload: {} })
  t.equal(none.status, 201)
  const polled = await pollAll('trace-invalid', 2)
  t.equal(polled.length, 2)
  t.ok(
    polled.every((j) => j.traceparent === null),
    'neither carries a trace context',
  )
})

t.test('a batch create: every job carries the request traceparent, through the SDK worker to ctx', async (t) => {
  const batch = await h.request(
    'POST',
    '/jobsvc/v1/jobs/batch',
    { jobs: [0, 1, 2].map((n) => ({ job_type: 'traced', queue: 'trace-batch', payload: { n } })) },
    { traceparent },
  )
  t.equal(batch.status, 200)
  t.equal(batch.body.created, 3)
  const seen = new Map<string, string | null>()
  let done!: () => void
  const allSeen = new Promise<void>((resolve) => (done = resolve))
  const worker = new Worker({
    client: new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey }),
    queues: ['trace-batch'],
    logger: { info: () => undefined, warn: () => undefined, error: () => undefined },
    handlers: {
      traced: (job, ctx) => {
        seen.set(job.id, ctx.traceparent)
        if (seen.size === 3) done()
      },
    },
  })
  t.teardown(() => worker.stop())
  await worker.start()
  await allSeen
  t.same([...seen.values()], [traceparent, traceparent, traceparent], 'ctx.traceparent in every handler')
})
