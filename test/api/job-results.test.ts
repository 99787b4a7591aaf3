import t from 'tap'
import { eventually, startHarness, withClockShifted } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

// Issue 26, item 2: job results. A worker's handler returns a value; the ack carries it as
// `result`, and the job's detail, its list item and the event feed show it. Kept once in the log,
// in the job's `job_succeeded` (docs/event-log.md).

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const api = jobsApi(h, { jobType: 'results' })

/** Creates a job on its own queue, claims it and acks it with `ack` (worker `w-results`). */
async function runToAck(queue: string, ack: Record<string, unknown>) {
  const job = await api.create({ queue })
  await api.claimOne(queue, 'w-results')
  const res = await api.ack({ job_id: job.id, worker_id: 'w-results', ...ack })
  return { id: job.id as string, res }
}

/** The job as the list shows it once the read model has the ack (`X-Event-Seq`). */
async function listed(queue: string, seq: string) {
  const res = await h.request('GET', `/jobsvc/v1/jobs?queue=${queue}&min_seq=${seq}`)
  t.equal(res.status, 200)
  return res.body.data[0]
}

t.test('a successful ack’s result is on the job, in its list item and on its job_succeeded event', async (t) => {
  const result = { answer: 42, items: ['a', 'b'], nested: { z: 1, a: 2 } }
  const { id, res } = await runToAck('r-object', { status: 'succeeded', result })
  t.equal(res.status, 200)
  t.same(res.body, { action: 'done' })
  const job = await api.getJob(id)
  t.same(job.result, result, 'the detail, read from the log')
  t.same(Object.keys(job.result.nested), ['z', 'a'], 'keys in the order the worker sent them')
  const item = await listed('r-object', res.headers.get('x-event-seq')!)
  t.same(item.result, result, 'the list item, from the read model')
  t.same(Object.keys(item.result.nested), ['z', 'a'])
  const feed = await h.request('GET', `/jobsvc/v1/events?job_id=${id}&types=job_succeeded`)
  t.equal(feed.status, 200)
  t.same(feed.body.data[0].data.result, result, 'the job_succeeded event carries it')
})

t.test('any JSON value is a result; none, or a failed attempt’s, is null', async (t) => {
  for (const [queue, result] of [
    ['r-string', 'done'],
    ['r-number', 3.5],
    ['r-array', [1, 'two', null]],
    ['r-false', false],
  ] as const) {
    const { id, res } = await runToAck(queue, { status: 'succeeded', result })
    t.equal(res.status, 200)
    t.same((await api.getJob(id)).result, result, queue)
  }
  const none = await runToAck('r-none', { status: 'succeeded' })
  t.equal((await api.getJob(none.id)).result, null, 'no result: null')
  const explicitNull = await runToAck('r-null', { status: 'succeeded', result: null })
  t.equal((await api.getJob(explicitNull.id)).result, null)
  const failed = await runToAck('r-failed', { status: 'failed', result: { partial: true } })
  t.same(failed.res.body.action, 'retry')
  t.equal((await api.getJob(failed.id)).result, null, 'a failed attempt keeps no result')
})

t.test('a result over 64 KiB, or with text a read model cannot hold, is refused and the job stays processing', async (t) => {
  const job = await api.create({ queue: 'r-refused' })
  await api.claimOne('r-refused', 'w-results')
  const big = await api.ack({ job_id: job.id, worker_id: 'w-results', status: 'succeeded', result: { blob: 'x'.repeat(64 * 1024) } })
  isError(t, big, 400, 'invalid_request', 'over 64 KiB')
  t.match(big.body.error.message, /result/)
  const nul = await api.ack({ job_id: job.id, worker_id: 'w-results', status: 'succeeded', result: { text: 'a\u0000b' } })
  isError(t, nul, 400, 'invalid_request', 'a NUL character')
  t.equal((await api.getJob(job.id)).state, 'processing')
  const fits = await api.ack({ job_id: job.id, worker_id: 'w-results', status: 'succeeded', result: { blob: 'x'.repeat(60 * 1024) } })
  t.equal(fits.status, 200, 'just under the limit')
})

t.test('a batch ack carries each item’s result; an item with a bad one fails alone', async (t) => {
  const a = await api.create({ queue: 'r-batch' })
  const b = await api.create({ queue: 'r-batch' })
  const polled = await api.poll({ worker_id: 'w-results', queues: ['r-batch'], capacity: 2, wait_seconds: 5 })
  t.equal(polled.body.jobs.length, 2)
  const res = await h.request('POST', '/jobsvc/v1/workers/ack/batch', {
    acks: [
      { job_id: a.id, worker_id: 'w-results', status: 'succeeded', result: { n: 1 } },
      { job_id: b.id, worker_id: 'w-results', status: 'succeeded', result: ['ok', 'a\u0000b'] },
    ],
  })
  t.equal(res.status, 200)
  t.equal(res.body.results[0].status, 200)
  t.equal(res.body.results[1].status, 400)
  t.same((await api.getJob(a.id)).result, { n: 1 })
  t.equal((await api.getJob(b.id)).state, 'processing')
})

t.test('a continuation attached after its parent succeeded leaves the parent’s result where it was', async (t) => {
  const { id, res } = await runToAck('r-parent', { status: 'succeeded', result: { parent: 'output' } })
  t.equal(res.status, 200)
  const child = await api.create({ queue: 'r-child', parent_job_id: id })
  t.ok(child.id)
  const parent = await eventually(async () => {
    const job = await api.getJob(id)
    return job.state === 'succeeded' ? job : null
  })
  t.same(parent.result, { parent: 'output' }, 'read back from the message that recorded the success')
})

t.test('the export carries results only when asked (include=result), as the last field or column', async (t) => {
  const { id, res } = await runToAck('r-export', { status: 'succeeded', result: { rows: 7 } })
  await listed('r-export', res.headers.get('x-event-seq')!)
  const from = new Date(Date.now() - 3_600_000).toISOString()
  const until = new Date(Date.now() + 60_000).toISOString()
  const lines = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&include=result`)
  t.equal(lines.status, 200)
  const rows = (lines.body as string)
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
  const mine = rows.find((r) => r.id === id)
  t.same(mine.result, { rows: 7 })
  t.equal(Object.keys(mine).at(-1), 'result', 'after the spec’s fields')
  t.ok(
    rows.filter((r) => r.id !== id && r.state !== 'succeeded').every((r) => r.result === null),
    'null without one',
  )
  await withClockShifted(h.runtime, 61_000, async () => {
    const csv = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&format=csv&include=result`)
    t.equal(csv.status, 200)
    const [header, ...records] = (csv.body as string).trim().split('\r\n')
    t.match(header, /,Payload,Result$/, 'Result is the last column')
    t.ok(
      records.some((r) => r.startsWith(id) && r.endsWith('"{""rows"":7}"')),
      'the result as JSON text',
    )
  })
  await withClockShifted(h.runtime, 122_000, async () => {
    const plain = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}`)
    t.notOk('result' in JSON.parse((plain.body as string).trim().split('\n')[0]!), 'without include, the spec’s fields only')
  })
})
