import t from 'tap'
import { buildApp } from '../../services/roles/api/app.ts'
import { BillingService } from '../../services/use-cases/metering/billing-service.ts'
import { resolvePlans } from '../../domain/plans.ts'
import { eventually, httpRequest, startHarness, type Harness, type HttpResponse } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

// Issue 14, item 2: POST /jobsvc/v1/jobs/batch creates up to 1,000 jobs, each item validated and
// created as a single create, answered item by item; the allowance counts each job, an
// Idempotency-Key covers the whole batch, and the hourly limit counts the batch once (issue 23,
// item 7: now once per item).

const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector'],
  tunables: { max_payload_bytes: 1024 },
  // Projects made by newProject() are on the free plan: a small hourly limit to count against.
  config: { plans: resolvePlans({ free: { requests_per_hour: 5 } }) },
})

const batch = (jobs: unknown, headers?: Record<string, string>, harness: Pick<Harness, 'request'> = h) =>
  harness.request('POST', '/jobsvc/v1/jobs/batch', { jobs }, headers)
const job = (n: number, extra: Record<string, unknown> = {}) => ({ job_type: 'batch', payload: { n }, ...extra })
const missingJob = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'

/** The items of a 200 answer, after checking its counts agree with them. */
function itemsOf(t: Tap, res: HttpResponse): any[] {
  t.equal(res.status, 200, res.status === 200 ? 'the batch answers 200' : `the batch answers 200, not ${JSON.stringify(res.body)}`)
  const results = res.body.results as any[]
  t.equal(res.body.created, results.filter((r) => r.status === 201).length, '`created` counts the 201 items')
  t.equal(res.body.failed, results.filter((r) => r.status !== 201).length, '`failed` counts the others')
  return results
}

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

t.test('valid and invalid items mixed: each answers as a single create would, in order', async (t) => {
  const parent = await h.request('POST', '/jobsvc/v1/jobs', job(0, { queue: 'b-mixed' }))
  t.equal(parent.status, 201)
  const items = [
    job(1, { queue: 'b-mixed', max_attempts: 5, tags: { team: 'a' } }),
    { job_type: '', payload: {} },
    job(2, { queue: 'b-mixed', parent_job_id: missingJob }),
    job(3, { queue: 'b-mixed', payload: { blob: 'x'.repeat(2000) } }),
    'not an object',
    job(4, { queue: 'b-mixed', parent_job_id: parent.body.id }),
    job(5, { queue: 'b-mixed', run_at: new Date(Date.now() + 3_600_000).toISOString(), timeout_seconds: 0 }),
    job(6, { queue: 'b-mixed', run_at: '2099-01-01T00:00:00Z' }),
  ]
  const res = await batch(items)
  const results = itemsOf(t, res)
  t.equal(results.length, items.length, 'one result per item')
  t.same(
    results.map((r) => [r.status, r.error?.code ?? null]),
    [
      [201, null],
      [400, 'invalid_request'],
      [422, 'parent_not_found'],
      [400, 'invalid_request'],
      [400, 'invalid_request'],
      [201, null],
      [400, 'invalid_request'],
      [201, null],
    ],
  )
  t.match(results[1].error.message, /^body\.jobs\[1\]\.job_type: /, 'a validation failure names the item and its field')
  t.match(results[3].error.message, /^body\.jobs\[3\]\.payload: \d+ bytes is over the limit of 1024/, 'the payload limit applies to each item')
  t.match(results[4].error.message, /^body\.jobs\[4\]: /)
  t.match(results[6].error.message, /^body\.jobs\[6\]\.timeout_seconds: /, 'validation stops at the first failure, as on a single create')
  t.ok(
    results.filter((r) => r.error).every((r) => r.error.request_id === res.headers.get('x-request-id')),
    'each error object carries the request id',
  )
  t.equal(res.headers.get('location'), null, 'no Location: a batch creates many')

  const created = results.filter((r) => r.status === 201).map((r) => r.body)
  t.match(created[0], { state: 'pending', job_type: 'batch', queue: 'b-mixed', attempt: 0, max_attempts: 5, run_at: null })
  t.match(created[1], { state: 'scheduled', max_attempts: 3 }, 'a continuation of a live parent waits')
  t.match(created[2], { state: 'scheduled', run_at: '2099-01-01T00:00:00.000Z' })
  for (const c of created) {
    const got = await h.request('GET', `/jobsvc/v1/jobs/${c.id}`)
    t.equal(got.status, 200, 'the created job reads back at once')
    t.match(got.body, { id: c.id, state: c.state, queue: 'b-mixed', timeout_seconds: 1800 })
  }
  t.strictSame((await h.request('GET', `/jobsvc/v1/jobs/${created[0].id}`)).body.tags, { team: 'a' })
  t.equal((await h.request('GET', `/jobsvc/v1/jobs/${created[1].id}`)).body.parent_job_id, parent.body.id)

  const listed = await h.request('GET', `/jobsvc/v1/jobs?queue=b-mixed&min_seq=${res.headers.get('x-event-seq')}`)
  t.same(
    listed.body.data.map((j: any) => j.id).sort(),
    [parent.body.id, ...created.map((c) => c.id)].sort(),
    'X-Event-Seq lets a list see every created job, and only those',
  )
})

t.test('a parent that ended refuses its continuations item by item', async (t) => {
  const parent = await h.request('POST', '/jobsvc/v1/jobs', job(0, { queue: 'b-ended' }))
  t.equal((await h.request('POST', `/jobsvc/v1/jobs/${parent.body.id}/cancel`)).status, 200)
  const results = itemsOf(t, await batch([job(1, { parent_job_id: parent.body.id }), job(2)]))
  t.same(
    results.map((r) => [r.status, r.error?.code ?? null]),
    [
      [409, 'parent_terminal'],
      [201, null],
    ],
  )
})

t.test('many continuations of one parent in one batch are all attached and created', async (t) => {
  const parent = await h.request('POST', '/jobsvc/v1/jobs', job(0, { queue: 'b-children' }))
  const results = itemsOf(t, await batch(Array.from({ length: 40 }, (_, i) => job(i + 1, { queue: 'b-children', parent_job_id: parent.body.id }))))
  t.ok(
    results.every((r) => r.status === 201 && r.body.state === 'scheduled'),
    'every child created, waiting for its parent',
  )
  const claimed = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_b', queues: ['b-children'], wait_seconds: 5 })
  t.equal(claimed.body.jobs[0]?.id, parent.body.id)
  const acked = await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: parent.body.id, worker_id: 'wrk_b', status: 'succeeded' })
  t.equal(acked.body.children_activated, 40, "the parent's success activates all 40")
})

t.test('whole-request refusals keep the envelope and create nothing', async (t) => {
  const bad = async (body: unknown, what: string) => {
    const res = await h.request('POST', '/jobsvc/v1/jobs/batch', body)
    isError(t, res, 400, 'invalid_request', what)
    t.ok(res.headers.get('x-quota-limit') !== null, `${what}: the quota headers too`)
    return res
  }
  await bad('{"jobs": [', 'a body that is not JSON')
  await bad({ jobs: {} }, '`jobs` not an array')
  await bad({}, 'no `jobs`')
  await bad({ jobs: [] }, 'an empty batch')
  const tooMany = await bad({ jobs: Array.from({ length: 1001 }, (_, i) => job(i, { queue: 'b-toomany' })) }, '1,001 items')
  t.match(tooMany.body.error.message, /body\.jobs/)
  const listed = await h.request('GET', '/jobsvc/v1/jobs?queue=b-toomany')
  t.equal(listed.body.data.length, 0, 'nothing was created')
  const unauthenticated = await httpRequest(h.url, null, 'POST', '/jobsvc/v1/jobs/batch', { jobs: [job(1)] })
  isError(t, unauthenticated, 401, 'unauthorized')
})

t.test('a batch of 1,000 is accepted', async (t) => {
  const results = itemsOf(t, await batch(Array.from({ length: 1000 }, (_, i) => ({ job_type: 'b.k', queue: 'b-thousand', payload: { i } }))))
  t.equal(results.length, 1000)
  t.ok(
    results.every((r) => r.status === 201),
    'all 1,000 created',
  )
  t.equal(new Set(results.map((r) => r.body.id)).size, 1000, 'with 1,000 ids')
})

t.test('while the billing state is not active the whole batch is 402, with the quota headers', async (t) => {
  const other = await h.newProject()
  const as = {
    request: (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
      httpRequest(h.url, other.apiKey, method, path, body, headers),
  }
  await new BillingService(h.runtime).setBillingState(other.projectId, 'past_due', null)
  const blocked = await eventually(
    async () => {
      const res = await batch([job(1), { job_type: '' }], undefined, as)
      return res.status === 402 && res
    },
    10_000,
    'the billing state to reach the API',
  )
  isError(t, blocked, 402, 'billing_state_blocked')
  t.equal(blocked.headers.get('x-quota-used'), '0')
})

t.test('an Idempotency-Key covers the whole batch: a replay repeats the whole answer', async (t) => {
  const items = [job(1, { queue: 'b-idem' }), { job_type: '' }, job(2, { queue: 'b-idem' })]
  const first = await batch(items, { 'idempotency-key': 'batch-1' })
  t.equal(first.status, 200)
  t.equal(first.body.created, 2)
  const again = await batch(items, { 'idempotency-key': 'batch-1' })
  t.equal(again.status, 200)
  t.equal(again.headers.get('idempotent-replay'), 'true')
  t.same(again.body, first.body, 'the same answer, failed items included')
  t.equal(again.headers.get('x-event-seq'), first.headers.get('x-event-seq'))
  t.equal(again.headers.get('x-quota-used'), String(Number(first.headers.get('x-quota-used')) + 2), 'the replay took no unit and counts the batch')
  const listed = await h.request('GET', `/jobsvc/v1/jobs?queue=b-idem&min_seq=${first.headers.get('x-event-seq')}`)
  t.equal(listed.body.data.length, 2, 'the replay created nothing')

  const reused = await batch([job(3, { queue: 'b-idem' })], { 'idempotency-key': 'batch-1' })
  isError(t, reused, 409, 'idempotency_key_reuse', 'the key with another batch')
  const asSingle = await h.request('POST', '/jobsvc/v1/jobs', job(1, { queue: 'b-idem' }), { 'idempotency-key': 'batch-1' })
  isError(t, asSingle, 409, 'idempotency_key_reuse', 'the key on another route')
})

t.test("an item's body-field idempotency_key works as on a single create", async (t) => {
  const single = await h.request('POST', '/jobsvc/v1/jobs', job(1, { queue: 'b-keys', idempotency_key: 'item-a' }))
  t.equal(single.status, 201)
  const res = await batch([
    job(1, { queue: 'b-keys', idempotency_key: 'item-a' }),
    job(2, { queue: 'b-keys', idempotency_key: 'item-b' }),
    job(2, { queue: 'b-keys', idempotency_key: 'item-b' }),
    job(3, { queue: 'b-keys', idempotency_key: 'item-b' }),
    job(4, { queue: 'b-keys', idempotency_key: 'item-a' }),
    job(5, { queue: 'b-keys' }),
  ])
  const results = itemsOf(t, res)
  t.equal(res.headers.get('deprecation'), '@1776124800', 'the deprecated field is named as such')
  t.same(
    results.map((r) => [r.status, r.error?.code ?? null, r.idempotent_replay ?? false]),
    [
      [201, null, true],
      [201, null, false],
      [201, null, true],
      [409, 'idempotency_key_reuse', false],
      [409, 'idempotency_key_reuse', false],
      [201, null, false],
    ],
  )
  t.same(results[0].body, single.body, "a single create's answer is replayed for the item")
  t.same(results[2].body, results[1].body, 'a repeat inside the batch answers the first')
  const replayed = await h.request('POST', '/jobsvc/v1/jobs', job(2, { queue: 'b-keys', idempotency_key: 'item-b' }))
  t.equal(replayed.status, 201)
  t.equal(replayed.headers.get('idempotent-replay'), 'true', "the item's answer is replayed for a single create")
  t.same(replayed.body, results[1].body)
  t.equal(replayed.headers.get('location'), `/jobsvc/v1/jobs/${results[1].body.id}`)
  const again = itemsOf(t, await batch([job(2, { queue: 'b-keys', idempotency_key: 'item-b' })]))
  t.same(again[0], { status: 201, body: results[1].body, idempotent_replay: true }, 'and for a later batch')
  const listed = await h.request('GET', `/jobsvc/v1/jobs?queue=b-keys&min_seq=${res.headers.get('x-event-seq')}`)
  t.equal(listed.body.data.length, 3, 'three jobs: item-a, item-b and the unkeyed one')
})

t.test('the hourly request limit counts a batch by its items, all or none', async (t) => {
  const other = await h.newProject()
  const as = {
    request: (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
      httpRequest(h.url, other.apiKey, method, path, body, headers),
  }
  const first = await batch(
    Array.from({ length: 3 }, (_, i) => job(i)),
    undefined,
    as,
  )
  t.equal(first.status, 200)
  t.equal(first.body.created, 3)
  t.equal(first.headers.get('x-ratelimit-limit'), '5')
  t.equal(first.headers.get('x-ratelimit-remaining'), '2', '3 jobs, 3 requests')
  const second = await batch(
    Array.from({ length: 3 }, (_, i) => job(i)),
    undefined,
    as,
  )
  isError(t, second, 429, 'rate_limit_exceeded', 'three more do not fit in the two left')
  t.equal(second.headers.get('x-ratelimit-remaining'), '1', 'the request itself was counted, its items were not')
})

t.test('an answer too large to keep is not run again on a replay', async (t) => {
  // 1,000 items echoing a 500-character job type and a 100-character queue answer about 780 KB,
  // over a message of the bucket once sealed.
  const long = (i: number) => ({ job_type: `${String(i).padStart(4, '0')}${'t'.repeat(496)}`, queue: `b-big-${'q'.repeat(94)}`, payload: {} })
  const items = Array.from({ length: 1000 }, (_, i) => long(i))
  const first = await batch(items, { 'idempotency-key': 'too-big' })
  t.equal(first.status, 200)
  t.equal(first.body.created, 1000)
  const again = await batch(items, { 'idempotency-key': 'too-big' })
  isError(t, again, 409, 'idempotency_key_reuse', 'refused rather than run twice')
  t.match(again.body.error.message, /too large/)
  const listed = await h.request('GET', `/jobsvc/v1/jobs?queue=${items[0]!.queue}&limit=100&min_seq=${first.headers.get('x-event-seq')}`)
  t.equal(listed.body.data.length, 100, 'the first run created its jobs')
})

t.test('the allowance across batches', async (t) => {
  const q = await startHarness(t, import.meta.filename, {
    roles: ['api', 'projector'],
    suffix: '_quota',
    config: { plans: resolvePlans({ business: { monthly_jobs: 25 }, free: { monthly_jobs: 40 } }) },
  })

  await t.test('units are counted per created job: refused, invalid and failed items take none', async (t) => {
    const res = await batch(
      [job(1), { job_type: '' }, job(2, { parent_job_id: missingJob }), ...Array.from({ length: 9 }, (_, i) => job(10 + i))],
      undefined,
      q,
    )
    const results = itemsOf(t, res)
    t.equal(res.body.created, 10)
    t.equal(res.headers.get('x-quota-limit'), '25')
    t.equal(res.headers.get('x-quota-used'), '0', 'counted before the batch')
    const next = await q.request('POST', '/jobsvc/v1/jobs', job(99))
    t.equal(next.headers.get('x-quota-used'), '10', 'the invalid item took no unit, the parent_not_found one gave its unit back')
    t.equal(results[2].error.code, 'parent_not_found')
  })

  await t.test('a batch larger than what is left: exactly the allowance is created, the rest 429 per item', async (t) => {
    const items = Array.from({ length: 20 }, (_, i) => job(100 + i, { queue: 'q-over' }))
    items.splice(5, 0, { job_type: '', payload: {} } as never)
    const res = await batch(items, undefined, q)
    const results = itemsOf(t, res)
    t.equal(res.headers.get('x-quota-used'), '11', 'the count before the first job of the batch')
    t.equal(res.body.created, 14, '25 - 11 jobs')
    t.same(
      results.map((r) => r.status),
      [201, 201, 201, 201, 201, 400, ...Array(9).fill(201), ...Array(6).fill(429)],
      'the first valid items are created, the later ones refused',
    )
    t.ok(results.filter((r) => r.status === 429).every((r) => r.error.code === 'monthly_allowance_exceeded'))
    const refused = await batch([job(200)], undefined, q)
    t.same(
      itemsOf(t, refused).map((r) => r.error?.code),
      ['monthly_allowance_exceeded'],
    )
    t.equal(refused.headers.get('x-quota-used'), '25', 'used up')
    const single = await q.request('POST', '/jobsvc/v1/jobs', job(201))
    isError(t, single, 429, 'monthly_allowance_exceeded', 'the single create agrees')
    const [usage] = await q.runtime.sql<{ used: number }[]>`SELECT used::int AS used FROM project_usage WHERE project_id = ${q.projectId}`
    t.equal(usage?.used, 25, 'the counter stopped at the allowance')
  })

  await t.test('two batches at once, in two API processes, never take more than the allowance', async (t) => {
    const other = await q.newProject()
    const second = await buildApp(q.runtime, new AbortController().signal)
    t.teardown(() => second.app.close())
    const secondUrl = await second.app.listen({ port: 0, host: '127.0.0.1' })
    const send = (url: string, from: number) =>
      httpRequest(url, other.apiKey, 'POST', '/jobsvc/v1/jobs/batch', {
        jobs: Array.from({ length: 30 }, (_, i) => job(from + i, { queue: 'q-race' })),
      })
    const answers = await Promise.all([send(q.url, 0), send(secondUrl, 100)])
    const created = answers.map((a) => itemsOf(t, a).filter((r) => r.status === 201).length)
    t.equal(created[0]! + created[1]!, 40, 'exactly the 40 units of the allowance were created')
    t.ok(
      answers.every((a) => itemsOf(t, a).every((r) => r.status === 201 || r.error.code === 'monthly_allowance_exceeded')),
      'the rest were refused by the allowance',
    )
    const ranges = answers.map((a, i) => ({ from: Number(a.headers.get('x-quota-used')), to: Number(a.headers.get('x-quota-used')) + created[i]! }))
    ranges.sort((x, y) => x.from - y.from)
    const [low, high] = ranges as [(typeof ranges)[number], (typeof ranges)[number]]
    t.ok(
      low.from === 0 && low.to === high.from && high.to === 40,
      `the batches took the counts 0 to 39 between them, disjoint (${JSON.stringify(ranges)})`,
    )
    const [usage] = await q.runtime.sql<{ used: number }[]>`SELECT used::int AS used FROM project_usage WHERE project_id = ${other.projectId}`
    t.equal(usage?.used, 40)
  })
})
