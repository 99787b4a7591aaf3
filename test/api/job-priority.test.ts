import t from 'tap'
import { openSql } from '../../projections/database.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { claimForPolls } from '../../services/use-cases/jobs/claimer.ts'
import { startApiProcess, type ApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'
import { newJobInput } from '../support/job-commands.ts'
import { isError } from '../support/jobs-api.ts'
import { lockJobsTable } from '../support/read-models.ts'

/**
 * Priorities (issue 28, item 5) against the real NATS and Postgres: claim order is due time −
 * priority, on the ready index (jobs claimed with the jobs table locked, so no read-model query can
 * answer) and on the read-model query (the claimer's own query, on a queue no index follows);
 * PATCH re-ranks a waiting job; an old low-priority job beats newer high-priority ones. Due times
 * in the past are made with `run_at` (a past run_at creates the job pending, due then), so nothing
 * here waits for the clock.
 */
const h = await startHarness(t, import.meta.filename, { roles: ['projector', 'scheduler'], tunables: { poll_tick_ms: 600_000 } })
const sql = openSql(h.config.databaseUrl, { max: 2, applicationName: 'job-priority-observer' })
t.teardown(() => sql.end({ timeout: 5 }))
const api: ApiProcess = await startApiProcess(t, h.runtime)

const call = (method: string, path: string, body?: unknown): Promise<HttpResponse> => httpRequest(api.url, h.apiKey, method, path, body)
const create = async (body: Record<string, unknown>): Promise<string> => {
  const res = await call('POST', '/jobsvc/v1/jobs', { job_type: 'prio', payload: {}, ...body })
  if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body.id as string
}
const secondsAgo = (s: number) => new Date(Date.now() - s * 1000).toISOString()

/** A poll on the queue, so that the process follows it, and until its index holds every job of it. */
async function follow(queue: string): Promise<void> {
  const res = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'opener', queues: [queue], wait_seconds: 0 })
  if (res.status !== 200 || res.body.jobs.length !== 0) throw new Error(`opening poll on ${queue} answered ${JSON.stringify(res.body)}`)
  await eventually(async () => api.context.ready.isComplete(h.projectId, [queue]), 15_000, `the index to hold every job of ${queue}`)
}

/** Claims the queue's jobs one poll of capacity 1 at a time, in the order they are handed out. */
async function claimOrder(queue: string, count: number): Promise<string[]> {
  const order: string[] = []
  for (let n = 0; n < count; n++) {
    const res = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_order', queues: [queue], wait_seconds: 2 })
    if (res.body?.jobs?.length !== 1) throw new Error(`poll ${n} on ${queue} answered ${JSON.stringify(res.body)}`)
    order.push(res.body.jobs[0].id)
  }
  return order
}

t.test('priority out of range, not an integer or not a number: 400 invalid_request, alone or as a batch item', async (t) => {
  for (const priority of [601, -601, 1.5, '10', true]) {
    isError(
      t,
      await call('POST', '/jobsvc/v1/jobs', { job_type: 'prio', payload: {}, priority }),
      400,
      'invalid_request',
      `${JSON.stringify(priority)}`,
    )
  }
  const batch = await call('POST', '/jobsvc/v1/jobs/batch', {
    jobs: [
      { job_type: 'prio', payload: {}, queue: 'p-batch', priority: 700 },
      { job_type: 'prio', payload: {}, queue: 'p-batch', priority: -600 },
    ],
  })
  t.equal(batch.status, 200)
  t.equal(batch.body.results[0].status, 400)
  t.equal(batch.body.results[0].error.code, 'invalid_request')
  t.match(batch.body.results[0].error.message, /priority/)
  t.equal(batch.body.results[1].status, 201)
  t.equal((await call('GET', `/jobsvc/v1/jobs/${batch.body.results[1].body.id}`)).body.priority, -600, 'a batch item keeps its priority')
})

t.test("the job detail shows priority only for jobs that use it: the spec's shape otherwise", async (t) => {
  const plain = await create({ queue: 'p-shape' })
  const zero = await create({ queue: 'p-shape', priority: 0 })
  const high = await create({ queue: 'p-shape', priority: 60 })
  for (const id of [plain, zero]) {
    const detail = (await call('GET', `/jobsvc/v1/jobs/${id}`)).body
    t.notOk('priority' in detail, 'no priority field')
  }
  t.equal((await call('GET', `/jobsvc/v1/jobs/${high}`)).body.priority, 60)
  await eventually(async () => (await call('GET', '/jobsvc/v1/jobs?queue=p-shape')).body.data.length === 3, 15_000, 'the list holds all three')
  const again = new Map(
    ((await call('GET', '/jobsvc/v1/jobs?queue=p-shape')).body.data as Array<Record<string, unknown>>).map((j) => [j.id as string, j] as const),
  )
  t.notOk('priority' in again.get(plain)!, 'the list item of a job without one has none either')
  t.equal(again.get(high)!.priority, 60, 'the list shows it from the read model')
})

t.test('ready index: equal due times are claimed highest priority first, ties in creation order', async (t) => {
  await follow('p-eq')
  const dueAt = secondsAgo(1)
  const ids = {
    zeroA: await create({ queue: 'p-eq', run_at: dueAt }),
    high: await create({ queue: 'p-eq', run_at: dueAt, priority: 60 }),
    low: await create({ queue: 'p-eq', run_at: dueAt, priority: -60 }),
    top: await create({ queue: 'p-eq', run_at: dueAt, priority: 600 }),
    zeroB: await create({ queue: 'p-eq', run_at: dueAt }),
  }
  const unlock = await lockJobsTable(sql, t)
  t.same(await claimOrder('p-eq', 5), [ids.top, ids.high, ids.zeroA, ids.zeroB, ids.low], 'from the index alone: the jobs table is locked')
  await unlock()
})

t.test('ready index: by due time − priority, so an old low-priority job beats newer high-priority ones', async (t) => {
  await follow('p-due')
  const ids = {
    // Due 1,300 s ago at −600: ranked 700 s ago.
    oldLow: await create({ queue: 'p-due', run_at: secondsAgo(1_300), priority: -600 }),
    // Due 1,100 s ago at −600: ranked 500 s ago, behind the high jobs due now.
    lessOldLow: await create({ queue: 'p-due', run_at: secondsAgo(1_100), priority: -600 }),
    // A stream of priority-600 jobs due now: ranked 600 s ago.
    high1: await create({ queue: 'p-due', priority: 600 }),
    high2: await create({ queue: 'p-due', priority: 600 }),
    // Due 30 s ago without priority: ranked 30 s ago.
    plain: await create({ queue: 'p-due', run_at: secondsAgo(30) }),
    // High, but not due for an hour: never claimed before then.
    future: await create({ queue: 'p-due', run_at: new Date(Date.now() + 3_600_000).toISOString(), priority: 600 }),
  }
  const unlock = await lockJobsTable(sql, t)
  t.same(await claimOrder('p-due', 5), [ids.oldLow, ids.high1, ids.high2, ids.lessOldLow, ids.plain])
  await unlock()
  const none = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_order', queues: ['p-due'], wait_seconds: 0 })
  t.same(none.body.jobs, [], 'the future job is not claimable, whatever its priority')
})

t.test('PATCH re-ranks a waiting job: the ready index follows the log', async (t) => {
  await follow('p-patch')
  const a = await create({ queue: 'p-patch' })
  const b = await create({ queue: 'p-patch' })
  const c = await create({ queue: 'p-patch' })
  const res = await call('PATCH', `/jobsvc/v1/jobs/${c}`, { priority: 600 })
  t.equal(res.status, 200)
  t.match(res.body, { id: c, state: 'pending', priority: 600 })
  t.ok(res.headers.get('x-event-seq'), 'X-Event-Seq')
  const lowered = await call('PATCH', `/jobsvc/v1/jobs/${a}`, { priority: -600 })
  t.equal(lowered.body.priority, -600)
  const history = await call('GET', `/jobsvc/v1/jobs/${c}/history`)
  t.match(history.body.data.at(-1), { type: 'job_priority_changed', data: { priority: 600, previous_priority: 0, state: 'pending' } })
  t.same(await claimOrder('p-patch', 3), [c, b, a])
})

t.test('PATCH: 409 for a job that is not waiting, 404 for an unknown one, 400 for a bad body; a scheduled job takes it', async (t) => {
  const running = await create({ queue: 'p-patch-err' })
  await claimOrder('p-patch-err', 1)
  isError(t, await call('PATCH', `/jobsvc/v1/jobs/${running}`, { priority: 5 }), 409, 'invalid_state', 'processing')
  isError(t, await call('PATCH', '/jobsvc/v1/jobs/job_01J00000000000000000000000', { priority: 5 }), 404, 'job_not_found')
  isError(t, await call('PATCH', '/jobsvc/v1/jobs/nothing-like-an-id', { priority: 5 }), 404, 'job_not_found')
  const waiting = await create({ queue: 'p-patch-err', run_at: new Date(Date.now() + 600_000).toISOString() })
  for (const body of [{}, { priority: 601 }, { priority: 'high' }, { priority: 2.5 }, { priority: 1, queue: 'other' }]) {
    isError(t, await call('PATCH', `/jobsvc/v1/jobs/${waiting}`, body), 400, 'invalid_request', JSON.stringify(body))
  }
  const res = await call('PATCH', `/jobsvc/v1/jobs/${waiting}`, { priority: -30 })
  t.equal(res.status, 200)
  t.match(res.body, { state: 'scheduled', priority: -30 })
  const same = await call('PATCH', `/jobsvc/v1/jobs/${waiting}`, { priority: -30 })
  t.equal(same.status, 200, 'the same priority again: 200, nothing appended')
  t.equal(same.headers.get('x-event-seq'), res.headers.get('x-event-seq'))
})

t.test('read-model query: the same order, on a queue no index follows', async (t) => {
  // Written straight through the job service, as another process would, on a queue no poll opened.
  const elsewhere = new JobService(h.runtime)
  const make = async (runAt: string | null, priority?: number) =>
    (
      await elsewhere.create(
        h.projectId,
        newJobInput({ job_type: 'prio', queue: 'p-cold', run_at: runAt, ...(priority === undefined ? {} : { priority }) }),
      )
    ).job.id
  const ids = {
    plain: await make(secondsAgo(30)),
    lessOldLow: await make(secondsAgo(1_100), -600),
    high: await make(secondsAgo(0), 600),
    oldLow: await make(secondsAgo(1_300), -600),
    equalHigh: await make(secondsAgo(30), 20),
  }
  await eventually(
    async () => (await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE queue = 'p-cold' AND state = 'pending'`)[0]!.n === 5,
    15_000,
    'the read model holds the jobs',
  )
  const ranks = await sql<{ id: string; ranked: boolean }[]>`
    SELECT id, claim_rank_at = available_at - coalesce(priority, 0) * interval '1 second' AS ranked FROM jobs WHERE queue = 'p-cold'`
  t.ok(
    ranks.every((r) => r.ranked),
    'claim_rank_at is available_at − priority on every row',
  )
  const order: string[] = []
  for (let n = 0; n < 5; n++) {
    const [claimed] = await claimForPolls(h.runtime, elsewhere, { projectId: h.projectId, queues: ['p-cold'], jobTypes: null }, [
      { workerId: 'wrk_cold', capacity: 1 },
    ])
    order.push(...claimed!.map((c) => c.job.id))
  }
  t.same(order, [ids.oldLow, ids.high, ids.lessOldLow, ids.equalHigh, ids.plain])
})

t.test('recurring schedules take a priority and show it only when set', async (t) => {
  const res = await call('PUT', '/jobsvc/v1/recurring/rjob_prio-nightly', { job_type: 'prio-nightly', cron_expression: '0 3 * * *', priority: -120 })
  t.ok(res.status === 200 || res.status === 201, `upserted (${res.status})`)
  t.equal(res.body.priority, -120)
  const plain = await call('PUT', '/jobsvc/v1/recurring/rjob_prio-plain', { job_type: 'prio-plain', cron_expression: '0 3 * * *' })
  t.notOk('priority' in plain.body, 'a schedule without one has no field')
  isError(
    t,
    await call('PUT', '/jobsvc/v1/recurring/rjob_prio-bad', { job_type: 'prio-bad', cron_expression: '0 3 * * *', priority: 900 }),
    400,
    'invalid_request',
  )
  await eventually(
    async () => ((await call('GET', '/jobsvc/v1/recurring')).body.data as Array<{ id: string }>).some((s) => s.id === 'rjob_prio-nightly'),
    15_000,
    'listed',
  )
  const listed = ((await call('GET', '/jobsvc/v1/recurring')).body.data as Array<Record<string, unknown>>).find((s) => s.id === 'rjob_prio-nightly')
  t.equal(listed!.priority, -120, 'the list reads it from the read model')
})
