import t from 'tap'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'
import { jobHandler } from '../../streams/aggregates.ts'

// Jobs with several parents (issue 30, items 1 and 4): `depends_on` and `on_parent_failure`, an
// activation that happens once however many parents end together and in whichever process, and a
// crash between a parent's end and its children's moves healed by the scheduler's sweep.
const h = await startHarness(t, import.meta.filename, { tunables: { scheduler_interval_ms: 100 } })
const { create, getJob, ack, claimOne } = jobsApi(h, { jobType: 'graph' })

/** Claims the job on its own queue and acks it as `status` (with `result`, when given). */
async function finish(job: { id: string; queue: string }, status: 'succeeded' | 'failed' = 'succeeded', result?: unknown): Promise<void> {
  const claimed = await claimOne(job.queue, 'wrk_g')
  if (claimed.id !== job.id) throw new Error(`claimed ${claimed.id}, not ${job.id}`)
  const outcome = status === 'failed' ? { error: { type: 'E', message: 'm' } } : result === undefined ? {} : { result }
  const res = await ack({ job_id: job.id, worker_id: 'wrk_g', status, ...outcome })
  if (res.status !== 200) throw new Error(`ack answered ${res.status}: ${JSON.stringify(res.body)}`)
}

const historyTypes = async (jobId: string) =>
  (await jobHandler.history(h.runtime.store, jobHandler.ref(h.projectId, jobId))).flatMap((m) => m.message.events.map((e) => e.type))

/** The diamond A → (B, C) → D, each on its own queue, D with `rule`. */
async function diamond(name: string, rule?: string) {
  const a = await create({ queue: `${name}-a` })
  const b = await create({ queue: `${name}-b`, parent_job_id: a.id })
  const c = await create({ queue: `${name}-c`, parent_job_id: a.id, max_attempts: 1 })
  const d = await create({ queue: `${name}-d`, depends_on: [b.id, c.id], ...(rule === undefined ? {} : { on_parent_failure: rule }) })
  return { a, b, c, d }
}

t.test('the diamond runs its fan-in only once both branches have succeeded', async (t) => {
  const { a, b, c, d } = await diamond('g-ok')
  t.equal(d.state, 'scheduled', 'D waits')
  t.same(d.depends_on, [b.id, c.id], 'its parents, in order')
  t.same(d.waiting_for, [b.id, c.id])
  t.equal(d.on_parent_failure, 'cancel', 'the default rule')
  await finish(a)
  await finish(b)
  const half = await getJob(d.id)
  t.equal(half.state, 'scheduled', 'one branch done: D still waits')
  t.same(half.waiting_for, [c.id], 'for C')
  await finish(c)
  const done = await eventually(async () => ((await getJob(d.id)).state === 'pending' ? getJob(d.id) : null), 5_000, 'D pending')
  t.same(done.waiting_for, [], 'waits for nothing')
  t.equal((await claimOne(d.queue, 'wrk_d')).id, d.id, 'and runs')
  const types = await historyTypes(d.id)
  t.equal(types.filter((x) => x === 'job_parent_settled').length, 2, 'each parent settled once')
  t.equal(types.filter((x) => x === 'job_activated').length, 1, 'activated once')
  const feed = await h.request('GET', `/jobsvc/v1/events?job_id=${d.id}&types=job_parent_settled,job_activated&limit=10`)
  t.same(
    feed.body.data.map((e: { type: string; data: { waiting?: number; of?: number } }) => [e.type, e.data.waiting ?? null, e.data.of ?? null]),
    [
      ['job_parent_settled', 1, 2],
      ['job_parent_settled', 0, 2],
      ['job_activated', null, null],
    ],
    'the event feed carries each settlement ("1 of 2 left") and the activation',
  )
  const top = (await h.request('GET', `/jobsvc/v1/jobs/${a.id}/dependencies`)).body
  t.same(top.parents, [], 'A has no parents')
  t.same(
    top.children,
    [
      { job_id: b.id, state: 'succeeded' },
      { job_id: c.id, state: 'succeeded' },
    ],
    'its continuations are its children, with their states, in creation order',
  )
  t.equal(top.children_total, 2)
  const branch = (await h.request('GET', `/jobsvc/v1/jobs/${b.id}/dependencies`)).body
  t.same(branch.children, [{ job_id: d.id, state: 'processing' }], 'the fan-in is a child of each branch')
  const fanIn = (await h.request('GET', `/jobsvc/v1/jobs/${d.id}/dependencies`)).body
  t.same([fanIn.children, fanIn.children_total], [[], 0], 'and has none itself')
})

t.test("a job's dependencies name its first 200 children and count them all", async (t) => {
  const parent = await create({ queue: 'g-kids-p' })
  // One at a time, so that creation order is attach order: the order this test checks.
  const ids: string[] = []
  for (let i = 0; i < 201; i++) ids.push((await create({ queue: 'g-kids', depends_on: [parent.id] })).id)
  const deps = (await h.request('GET', `/jobsvc/v1/jobs/${parent.id}/dependencies`)).body
  t.equal(deps.children_total, 201, 'every child counted')
  t.equal(deps.children.length, 200, 'the first 200 shown')
  t.ok(
    deps.children.every((c: { state: string }) => c.state === 'scheduled'),
    'each with its state: waiting for the parent',
  )
  t.same(
    deps.children.map((c: { job_id: string }) => c.job_id),
    ids.slice(0, 200),
    'the earliest, in creation order',
  )
})

t.test('on_parent_failure: cancel, run and ignore', async (t) => {
  const cancel = await diamond('g-cancel')
  const run = await diamond('g-run', 'run')
  const ignore = await diamond('g-ignore', 'ignore')
  for (const g of [cancel, run, ignore]) {
    await finish(g.a)
    await finish(g.b)
    await finish(g.c, 'failed')
    t.equal((await getJob(g.c.id)).state, 'dead_letter')
  }
  const cancelled = await eventually(async () => {
    const d = await getJob(cancel.d.id)
    return d.state === 'cancelled' ? d : null
  }, 5_000)
  t.equal(cancelled.state, 'cancelled', 'cancel: the fan-in is cancelled')
  const ran = await getJob(run.d.id)
  t.equal(ran.state, 'pending', 'run: the fan-in runs with what finished')
  t.same(ran.depends_on, [run.b.id, run.c.id], 'run: both stay its parents')
  const ignored = await getJob(ignore.d.id)
  t.equal(ignored.state, 'pending', 'ignore: the fan-in runs')
  t.same(ignored.depends_on, [ignore.b.id], 'ignore: the failed parent is dropped')

  // A parent cancelled while the child waits, under run: settled, and the child runs.
  const p1 = await create({ queue: 'g-run2-p' })
  const p2 = await create({ queue: 'g-run2-p' })
  const child = await create({ queue: 'g-run2-c', depends_on: [p1.id, p2.id], on_parent_failure: 'run' })
  t.equal((await h.request('POST', `/jobsvc/v1/jobs/${p1.id}/cancel`)).status, 200)
  t.equal((await getJob(child.id)).state, 'scheduled', 'one parent cancelled: still waiting for the other')
  t.equal((await h.request('POST', `/jobsvc/v1/jobs/${p2.id}/cancel`)).status, 200)
  t.equal((await getJob(child.id)).state, 'pending', 'every parent ended: it runs')
})

t.test('parents that ended before the child was created', async (t) => {
  const done = await create({ queue: 'g-pre' })
  await finish(done)
  const dead = await create({ queue: 'g-pre', max_attempts: 1 })
  await finish(dead, 'failed')
  const running = await create({ queue: 'g-pre-r' })
  await claimOne('g-pre-r', 'wrk_r')

  const ready = await create({ queue: 'g-pre-c', depends_on: [done.id] })
  t.equal(ready.state, 'pending', 'every parent succeeded already: pending at once')
  t.same(ready.waiting_for, [])
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {}, depends_on: [done.id, dead.id] }),
    409,
    'parent_terminal',
    'cancel',
  )
  const run = await create({ queue: 'g-pre-c', depends_on: [done.id, dead.id, running.id], on_parent_failure: 'run' })
  t.same(run.waiting_for, [running.id], 'run: waits for the running parent only')
  t.same(run.depends_on, [done.id, dead.id, running.id])
  const ignore = await create({ queue: 'g-pre-c', depends_on: [dead.id, done.id], on_parent_failure: 'ignore' })
  t.equal(ignore.state, 'pending', 'ignore: the dead parent dropped, the other succeeded')
  t.same(ignore.depends_on, [done.id])
})

t.test("a graph job is handed its parents' results, and its dependencies say how each ended", async (t) => {
  const a = await create({ queue: 'g-res-a' })
  const b = await create({ queue: 'g-res-b' })
  const c = await create({ queue: 'g-res-c', max_attempts: 1 })
  const big = await create({ queue: 'g-res-big' })
  const child = await create({ queue: 'g-res', depends_on: [a.id, b.id, c.id, big.id], on_parent_failure: 'run' })
  const large = { blob: 'x'.repeat(60_000) }
  await finish(a, 'succeeded', { rows: 3, files: ['a.png'] })
  await finish(b)
  const deps = (await h.request('GET', `/jobsvc/v1/jobs/${child.id}/dependencies`)).body
  t.same(
    deps.parents.map((p: { job_id: string; state: string; waiting: boolean }) => [p.job_id, p.state, p.waiting]),
    [
      [a.id, 'succeeded', false],
      [b.id, 'succeeded', false],
      [c.id, 'pending', true],
      [big.id, 'pending', true],
    ],
    'two done, two waited for',
  )
  t.equal(deps.waiting_for, 2)
  await finish(c, 'failed')
  await finish(big, 'succeeded', large)
  const claimed = await claimOne('g-res', 'wrk_res')
  t.equal(claimed.id, child.id)
  t.same(
    claimed.parent_results,
    { [a.id]: { rows: 3, files: ['a.png'] }, [b.id]: null, [big.id]: large },
    "each succeeded parent's result (null: none), whole up to the ack's bound; the failed parent has none",
  )
  const after = (await h.request('GET', `/jobsvc/v1/jobs/${child.id}/dependencies`)).body
  t.equal(after.on_parent_failure, 'run')
  const failed = after.parents.find((p: { job_id: string }) => p.job_id === c.id)
  t.equal(failed.state, 'dead_letter')
  t.equal(failed.error.type, 'E', "the failed parent's error")
  t.same(after.parents[0].result, { rows: 3, files: ['a.png'] })

  // A job that is not a graph's: no parent_results in its poll answer, and no parents.
  const plain = await create({ queue: 'g-res-plain' })
  const polled = await claimOne('g-res-plain', 'wrk_res')
  t.notOk('parent_results' in polled, 'a plain job answers as the spec says')
  t.same((await h.request('GET', `/jobsvc/v1/jobs/${plain.id}/dependencies`)).body.parents, [])
  t.equal((await h.request('GET', '/jobsvc/v1/jobs/job_01ARZ3NDEKTSV4RRFFQ69G5FAV/dependencies')).status, 404)
})

t.test('bad depends_on is 400, an unknown parent 422', async (t) => {
  const p = await create({ queue: 'g-bad' })
  const bad = async (body: Record<string, unknown>, what: string) =>
    isError(t, await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {}, ...body }), 400, 'invalid_request', what)
  await bad({ depends_on: [] }, 'empty')
  await bad({ depends_on: [p.id, p.id] }, 'a parent twice')
  await bad({ depends_on: Array.from({ length: 101 }, (_, i) => `job_${i}`) }, '101 parents')
  await bad({ depends_on: [p.id], parent_job_id: p.id }, 'with parent_job_id')
  await bad({ on_parent_failure: 'run' }, 'a rule without parents')
  await bad({ depends_on: [p.id], on_parent_failure: 'sometimes' }, 'an unknown rule')
  await bad({ depends_on: [p.id], debounce: { key: 'k', seconds: 5 } }, 'with debounce')
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {}, depends_on: [p.id, 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'] }),
    422,
    'parent_not_found',
    'unknown parent',
  )
  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: [
      { job_type: 'x', payload: {}, queue: 'g-bad-b', depends_on: [p.id] },
      { job_type: 'x', payload: {}, depends_on: [] },
    ],
  })
  t.equal(batch.status, 200)
  t.equal(batch.body.results[0].status, 201, 'a batch item with depends_on is created')
  t.same(batch.body.results[0].body.waiting_for, [p.id])
  t.equal(batch.body.results[1].status, 400, 'and a bad one is its own 400')
})

t.test('100 parents acked at once through two API processes activate their child exactly once', async (t) => {
  const second = await startApiProcess(t, h.runtime)
  const urls = [h.url, second.url]
  const parents = (
    await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: Array.from({ length: 100 }, () => ({ job_type: 'p', payload: {}, queue: 'g-fan' })) })
  ).body.results.map((r: { body: { id: string } }) => r.body.id) as string[]
  const child = await create({ queue: 'g-fan-in', depends_on: parents })
  t.equal(child.waiting_for.length, 100)
  const claimed: string[] = []
  while (claimed.length < 100) {
    const res = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_fan', queues: ['g-fan'], capacity: 50, wait_seconds: 1 })
    claimed.push(...res.body.jobs.map((j: { id: string }) => j.id))
  }
  const answers = await Promise.all(
    claimed.map((id, i) =>
      httpRequest(urls[i % 2]!, h.apiKey, 'POST', '/jobsvc/v1/workers/ack', { job_id: id, worker_id: 'wrk_fan', status: 'succeeded' }),
    ),
  )
  t.same(
    answers.filter((a) => a.status !== 200).map((a) => [a.status, a.body]),
    [],
    'every ack answered 200',
  )
  const job = await eventually(async () => ((await getJob(child.id)).state === 'pending' ? getJob(child.id) : null), 10_000, 'the child pending')
  t.same(job.waiting_for, [])
  const types = await historyTypes(child.id)
  t.equal(types.filter((x) => x === 'job_parent_settled').length, 100, 'each of the 100 parents settled once')
  t.equal(types.filter((x) => x === 'job_activated').length, 1, 'the child activated exactly once')
  await second.stop()
})

t.test("a parent's end whose cascade never ran is healed by the scheduler's sweep", async (t) => {
  const p1 = await create({ queue: 'g-heal' })
  const p2 = await create({ queue: 'g-heal' })
  const child = await create({ queue: 'g-heal-c', depends_on: [p1.id, p2.id] })
  await finish(p1)
  // p2 succeeds by an append of its own with no cascade after it: a process that died between the two.
  await claimOne('g-heal', 'wrk_h')
  await jobHandler.decide(h.runtime, jobHandler.ref(h.projectId, p2.id), {
    type: 'ack_job',
    data: { worker_id: 'wrk_h', status: 'succeeded', duration_ms: 1, error: null },
    meta: { now: new Date().toISOString(), random: 0 },
  })
  const healed = await eventually(async () => ((await getJob(child.id)).state === 'pending' ? getJob(child.id) : null), 10_000, 'the sweep')
  t.same(healed.waiting_for, [], 'activated by the sweep')
  t.equal((await historyTypes(child.id)).filter((x) => x === 'job_activated').length, 1, 'once')
})

t.test('a whole graph in one batch: refs name earlier items, and it is created whole', async (t) => {
  const item = (ref: string | null, refs: string[] | null, extra: Record<string, unknown> = {}) => ({
    job_type: 'g',
    payload: { ref },
    queue: `g-batch-${ref ?? 'x'}`,
    ...(ref === null ? {} : { ref }),
    ...(refs === null ? {} : { depends_on_refs: refs }),
    ...extra,
  })
  const res = await h.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: [item('a', null), item('b', ['a']), item('c', ['a']), item('d', ['b', 'c'], { on_parent_failure: 'run' })],
  })
  t.equal(res.status, 200)
  t.same(
    res.body.results.map((r: { status: number }) => r.status),
    [201, 201, 201, 201],
  )
  const [a, b, c, d] = res.body.results.map((r: { body: { id: string; queue: string } }) => r.body)
  t.equal(a.state, 'pending', 'the root runs')
  t.same([b.waiting_for, c.waiting_for, d.waiting_for], [[a.id], [a.id], [b.id, c.id]], 'each waits for its parents by id')
  t.equal(d.on_parent_failure, 'run')
  await finish(a)
  await finish(b, 'succeeded', 'from b')
  await finish(c, 'succeeded', 'from c')
  const claimed = await claimOne(d.queue, 'wrk_batch')
  t.equal(claimed.id, d.id, 'the fan-in runs once both branches succeeded')
  t.same(claimed.parent_results, { [b.id]: 'from b', [c.id]: 'from c' })
})

t.test('a graph batch that is not a valid graph creates nothing', async (t) => {
  const stray = await create({ queue: 'g-inv-ext' })
  const count = async () => (await h.request('GET', '/jobsvc/v1/jobs?job_type=g-inv&limit=100')).body.data.length
  const cases: Array<[string, unknown[], number, number, string]> = [
    ['an unknown ref', [{ ref: 'a' }, { depends_on_refs: ['zz'] }], 1, 400, 'invalid_request'],
    ['a later ref (parents come first)', [{ depends_on_refs: ['b'] }, { ref: 'b' }], 0, 400, 'invalid_request'],
    ['its own ref', [{ ref: 'a' }, { ref: 'b', depends_on_refs: ['b'] }], 1, 400, 'invalid_request'],
    ['a ref used twice', [{ ref: 'a' }, { ref: 'a' }], 1, 400, 'invalid_request'],
    [
      'more than 100 parents',
      [
        ...Array.from({ length: 51 }, (_, i) => ({ ref: `p${i}` })),
        {
          depends_on: Array.from({ length: 50 }, () => stray.id).map((id, i) =>
            i === 0 ? id : `job_01ARZ3NDEKTSV4RRFFQ69G5F${String(i).padStart(2, '0')}`,
          ),
          depends_on_refs: Array.from({ length: 51 }, (_, i) => `p${i}`),
        },
      ],
      51,
      400,
      'invalid_request',
    ],
    ['dedup in a graph', [{ ref: 'a' }, { depends_on_refs: ['a'], dedup: { key: 'k' } }], 1, 400, 'invalid_request'],
    ['a bad item', [{ ref: 'a' }, { depends_on_refs: ['a'], max_attempts: 0 }], 1, 400, 'invalid_request'],
    [
      'an unknown outside parent',
      [{ ref: 'a' }, { depends_on_refs: ['a'], depends_on: ['job_01ARZ3NDEKTSV4RRFFQ69G5FAV'] }],
      1,
      422,
      'parent_not_found',
    ],
  ]
  for (const [what, items, bad, status, code] of cases) {
    const jobs = items.map((i) => ({ job_type: 'g-inv', payload: {}, queue: 'g-inv', ...(i as object) }))
    const res = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs })
    t.equal(res.status, 200, what)
    const results = res.body.results as Array<{ status: number; error?: { code: string } }>
    t.equal(results[bad]!.status, status, `${what}: the item's own ${status}`)
    t.equal(results[bad]!.error?.code, code, `${what}: ${code}`)
    t.ok(
      results.every((r, i) => i === bad || (r.status === 424 && r.error?.code === 'graph_not_created')),
      `${what}: every other item 424 graph_not_created`,
    )
    t.equal(res.body.created, 0, `${what}: none created`)
  }
  t.equal(await count(), 0, 'no job of any of them exists')
})

t.test('many jobs attach to one parent at once: a batch of 200 and 20 single creates, all created, all activated', async (t) => {
  const parent = await create({ queue: 'g-many-p' })
  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: Array.from({ length: 200 }, () => ({ job_type: 'g-many', payload: {}, queue: 'g-many', depends_on: [parent.id] })),
  })
  t.same(
    batch.body.results.filter((r: { status: number }) => r.status !== 201).map((r: { error?: unknown }) => r.error),
    [],
    'every item of the batch is created',
  )
  const singles = await Promise.all(
    Array.from({ length: 20 }, () =>
      h.request('POST', '/jobsvc/v1/jobs', { job_type: 'g-many', payload: {}, queue: 'g-many', depends_on: [parent.id] }),
    ),
  )
  t.same(
    singles.filter((r) => r.status !== 201).map((r) => r.body),
    [],
    'every single create too',
  )
  await finish(parent)
  const pending = await eventually(
    async () => {
      const [row] = await h.runtime.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE queue = 'g-many' AND state = 'pending'`
      return row!.n === 220 ? row!.n : null
    },
    15_000,
    'all 220 children pending',
  )
  t.equal(pending, 220)
})

t.test('a graph batch holds up to 2,000 items: a fan-out of 1,000 with its fan-ins is one request', async (t) => {
  const item = (extra: Record<string, unknown>) => ({ job_type: 'g', payload: {}, queue: 'g-big', ...extra })
  const children = Array.from({ length: 1000 }, (_, i) => item({ ref: `c${i}`, depends_on_refs: ['root'] }))
  const fanIns = Array.from({ length: 10 }, (_, k) =>
    item({ ref: `in${k}`, depends_on_refs: Array.from({ length: 100 }, (_, i) => `c${k * 100 + i}`) }),
  )
  const sink = item({ depends_on_refs: fanIns.map((_, k) => `in${k}`) })
  const res = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: [item({ ref: 'root' }), ...children, ...fanIns, sink] })
  t.equal(res.status, 200)
  t.equal(res.body.created, 1012, 'every job of the graph created')
  const [root, ...rest] = res.body.results.map((r: { body: { id: string; state: string; waiting_for?: string[] } }) => r.body)
  t.equal(root.state, 'pending', 'the root runs')
  t.same(
    rest.at(-1).waiting_for,
    rest.slice(1000, 1010).map((f: { id: string }) => f.id),
    'the sink waits for the ten fan-ins',
  )
  const over = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: Array.from({ length: 2001 }, (_, i) => item({ ref: `r${i}` })) })
  isError(t, over, 400, 'invalid_request', 'a graph batch of 2,001')
  const plain = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: Array.from({ length: 1001 }, () => item({})) })
  isError(t, plain, 400, 'invalid_request', 'a plain batch of 1,001')
  t.match(plain.body.error.message, /body\.jobs: at most 1,000 items/)
})
