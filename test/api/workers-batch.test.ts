import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

// Issue 14, item 2: POST /jobsvc/v1/workers/ack/batch applies up to 1,000 acks, each validated
// and applied as a single ack, and answers each job's outcome.

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const { create, getJob, claimOne } = jobsApi(h, { jobType: 'acked' })
const ackBatch = (acks: unknown, headers?: Record<string, string>) => h.request('POST', '/jobsvc/v1/workers/ack/batch', { acks }, headers)
const missingJob = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'

t.test('acks with mixed outcomes: each answers as a single ack would, in order', async (t) => {
  const ok = await create({ queue: 'a-mixed' })
  const retried = await create({ queue: 'a-mixed', max_attempts: 3 })
  const dead = await create({ queue: 'a-mixed', max_attempts: 1 })
  const stolen = await create({ queue: 'a-mixed' })
  const waiting = await create({ queue: 'a-waiting' })
  const parent = await create({ queue: 'a-mixed' })
  const child = await create({ queue: 'a-child', parent_job_id: parent.id })
  // Claimed one at a time, so each job's worker is known.
  const workerOf: Record<string, string> = {}
  // The fourth job in creation order, `stolen`, goes to another worker.
  for (const worker of ['wrk_a', 'wrk_a', 'wrk_a', 'wrk_owner', 'wrk_a']) {
    const claimed = await claimOne('a-mixed', worker)
    workerOf[claimed.id] = worker
  }
  t.same(Object.keys(workerOf).sort(), [ok.id, retried.id, dead.id, stolen.id, parent.id].sort(), 'all five claimed')
  const by = (id: string) => workerOf[id]!

  const res = await ackBatch([
    { job_id: ok.id, worker_id: by(ok.id), status: 'succeeded', duration_ms: 12 },
    { job_id: retried.id, worker_id: by(retried.id), status: 'failed', error: { type: 'Flaky', message: 'again' } },
    { job_id: dead.id, worker_id: by(dead.id), status: 'failed' },
    { job_id: stolen.id, worker_id: 'wrk_thief', status: 'succeeded' },
    { job_id: waiting.id, worker_id: 'wrk_a', status: 'succeeded' },
    { job_id: missingJob, worker_id: 'wrk_a', status: 'succeeded' },
    { job_id: 'nope', worker_id: 'wrk_a', status: 'succeeded' },
    { job_id: ok.id, worker_id: 'wrk_a' },
    { worker_id: 'wrk_a', status: 'succeeded' },
    { job_id: parent.id, worker_id: by(parent.id), status: 'succeeded' },
    { job_id: ok.id, worker_id: by(ok.id), status: 'succeeded' },
  ])
  t.equal(res.status, 200)
  const results = res.body.results as any[]
  t.equal(res.body.acked, 4)
  t.equal(res.body.failed, 7)
  t.same(
    results.map((r) => [r.job_id, r.status, r.error?.code ?? r.body?.action]),
    [
      [ok.id, 200, 'done'],
      [retried.id, 200, 'retry'],
      [dead.id, 200, 'done'],
      [stolen.id, 409, 'worker_mismatch'],
      [waiting.id, 409, 'invalid_state'],
      [missingJob, 404, 'job_not_found'],
      ['nope', 404, 'job_not_found'],
      [ok.id, 400, 'invalid_request'],
      [null, 400, 'invalid_request'],
      [parent.id, 200, 'done'],
      [ok.id, 409, 'invalid_state'],
    ],
  )
  t.strictSame(results[0].body, { action: 'done' }, "a single ack's body")
  t.strictSame(Object.keys(results[1].body).sort(), ['action', 'retry_at'], 'a retry says when')
  t.ok(Date.parse(results[1].body.retry_at) > Date.now() + 10_000, 'after the backoff')
  t.strictSame(results[9].body, { action: 'done', children_activated: 1 }, 'a parent reports its activated continuations')
  t.match(results[7].error.message, /^body\.acks\[7\]\.status: /, 'a validation failure names the item and its field')
  t.ok(results.filter((r) => r.error).every((r) => r.error.request_id === res.headers.get('x-request-id')))

  t.match(await getJob(ok.id), { state: 'succeeded', duration_ms: 12 })
  t.match(await getJob(retried.id), { state: 'pending', attempt: 1, error: { type: 'Flaky', message: 'again' } })
  t.match(await getJob(dead.id), { state: 'dead_letter' })
  t.match(await getJob(stolen.id), { state: 'processing', worker_id: 'wrk_owner' }, 'the mismatched ack changed nothing')
  t.match(await getJob(waiting.id), { state: 'pending' })
  t.match(await getJob(child.id), { state: 'pending' }, 'the continuation was activated')

  const seq = Number(res.headers.get('x-event-seq'))
  const history = await h.request('GET', `/jobsvc/v1/jobs/${parent.id}/history`)
  const parentAck = history.body.data.find((e: any) => e.type === 'job_succeeded').sequence
  t.ok(seq >= parentAck, 'X-Event-Seq is at least every ack of the batch')
  const listed = await h.request('GET', `/jobsvc/v1/jobs?queue=a-mixed&state=succeeded&min_seq=${seq}`)
  t.same(listed.body.data.map((j: any) => j.id).sort(), [ok.id, parent.id].sort(), 'a list after it sees the acks')
})

t.test('whole-request refusals keep the envelope', async (t) => {
  isError(t, await h.request('POST', '/jobsvc/v1/workers/ack/batch', { acks: [] }), 400, 'invalid_request', 'an empty batch')
  isError(t, await h.request('POST', '/jobsvc/v1/workers/ack/batch', { acks: 'x' }), 400, 'invalid_request', '`acks` not an array')
  const tooMany = Array.from({ length: 1001 }, () => ({ job_id: missingJob, worker_id: 'w', status: 'succeeded' }))
  isError(t, await h.request('POST', '/jobsvc/v1/workers/ack/batch', { acks: tooMany }), 400, 'invalid_request', '1,001 acks')
})

t.test('an Idempotency-Key covers the whole batch of acks', async (t) => {
  const job = await create({ queue: 'a-idem' })
  await claimOne('a-idem', 'wrk_i')
  const acks = [{ job_id: job.id, worker_id: 'wrk_i', status: 'succeeded' }]
  const first = await ackBatch(acks, { 'idempotency-key': 'acks-1' })
  t.strictSame(first.body.results, [{ job_id: job.id, status: 200, body: { action: 'done' } }])
  const again = await ackBatch(acks, { 'idempotency-key': 'acks-1' })
  t.equal(again.headers.get('idempotent-replay'), 'true')
  t.same(again.body, first.body, 'the replay repeats the answer rather than acking again (which would be 409)')
})

t.test('a full cycle in batches: create 100, claim them, ack 100', async (t) => {
  const created = await h.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: Array.from({ length: 100 }, (_, i) => ({ job_type: 'cycle', queue: 'a-cycle', payload: { i } })),
  })
  t.equal(created.body.created, 100)
  const claimed: any[] = []
  for (let i = 0; i < 20 && claimed.length < 100; i++) {
    const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_c', queues: ['a-cycle'], capacity: 50, wait_seconds: 5 })
    claimed.push(...polled.body.jobs)
  }
  t.equal(claimed.length, 100, 'every job claimed')
  const acked = await ackBatch(claimed.map((j) => ({ job_id: j.id, worker_id: 'wrk_c', status: 'succeeded' })))
  t.equal(acked.body.acked, 100)
  t.ok(
    acked.body.results.every((r: any, i: number) => r.job_id === claimed[i].id && r.status === 200),
    'in the order sent',
  )
  const done = await h.request('GET', `/jobsvc/v1/jobs?queue=a-cycle&state=succeeded&limit=100&min_seq=${acked.headers.get('x-event-seq')}`)
  t.equal(done.body.data.length, 100, 'all succeeded')
})
