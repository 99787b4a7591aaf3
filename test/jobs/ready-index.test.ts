import t from 'tap'
import { openSql } from '../../projections/database.ts'
import { JobService, type NewJob } from '../../services/use-cases/jobs/job-service.ts'
import type { Deps } from '../../services/infrastructure/runtime.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { answerWithin, eventually, httpRequest, startHarness, withClockShifted, type HttpResponse } from '../support/harness.ts'
import { startApiProcess, type ApiProcess } from '../support/api-process.ts'
import { newJobInput } from '../support/job-commands.ts'
import { lockJobsTable } from '../support/read-models.ts'

/**
 * The ready index (services/use-cases/jobs/ready-index/) against the real NATS and Postgres: claims that
 * need no Postgres, and every way the index can be cold, short or behind the log, in which each
 * job must still be claimed exactly once. The harness runs the projector and scheduler only; API
 * processes are built here, so that each test starts them when it needs (after jobs exist, or
 * with other bounds) and can look at their index.
 *
 * The poll tick is far longer than any wait here: a job is never found by the tick's re-check of
 * the read model, only by the index, its wake-ups, or the fallback the index asks for.
 */
const h = await startHarness(t, import.meta.filename, { roles: ['projector', 'scheduler'], tunables: { poll_tick_ms: 600_000 } })
const sql = openSql(h.config.databaseUrl, { max: 2, applicationName: 'ready-index-observer' })
t.teardown(() => sql.end({ timeout: 5 }))

/** An API process's app (its own ready index, claim line and pool share) on the harness runtime. */
function startApi(deps: Deps = h.runtime): Promise<ApiProcess> {
  return startApiProcess(t, deps)
}

/** The same runtime with other tunables (bounds of the index). */
function withTunables(tunables: Partial<Deps['config']['tunables']>): Deps {
  return { ...h.runtime, config: { ...h.runtime.config, tunables: { ...h.runtime.config.tunables, ...tunables } } }
}

/** Jobs written straight through the job service, as another process would: no API here sees their append. */
const elsewhere = new JobService(h.runtime)
const newJob = (queue: string, n: number): NewJob => newJobInput({ job_type: 'ri', payload: { n }, queue, timeout_seconds: 300 })

async function createElsewhere(queue: string, count: number): Promise<string[]> {
  const ids: string[] = []
  for (let n = 0; n < count; n++) ids.push((await elsewhere.create(h.projectId, newJob(queue, n))).job.id)
  return ids
}

/** Until the read model holds `count` pending jobs of the queue. */
async function projected(queue: string, count: number): Promise<void> {
  await eventually(
    async () => (await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE queue = ${queue} AND state = 'pending'`)[0]!.n === count,
    15_000,
    `${count} pending jobs of ${queue} in the read model`,
  )
}

const poll = (api: ApiProcess, body: Record<string, unknown>): Promise<HttpResponse> =>
  httpRequest(api.url, h.apiKey, 'POST', '/jobsvc/v1/workers/poll', { wait_seconds: 0, ...body })
const ack = (api: ApiProcess, jobId: string, workerId: string, status: 'succeeded' | 'failed' = 'succeeded') =>
  httpRequest(api.url, h.apiKey, 'POST', '/jobsvc/v1/workers/ack', { job_id: jobId, worker_id: workerId, status })

/** A poll on the queue, so that the process follows it, and until its index holds every job of it. */
async function follow(api: ApiProcess, queue: string): Promise<void> {
  const res = await poll(api, { worker_id: 'opener', queues: [queue], capacity: 1 })
  if (res.status !== 200 || res.body.jobs.length !== 0) throw new Error(`opening poll on ${queue} answered ${res.status} ${JSON.stringify(res.body)}`)
  await eventually(async () => api.context.ready.isComplete(h.projectId, [queue]), 15_000, `the index to hold every job of ${queue}`)
}

/**
 * Pollers on every API until `ids` are all claimed and acked; every claim (job and attempt) is
 * recorded with the API that answered it.
 */
async function drain(apis: ApiProcess[], queue: string, ids: readonly string[], pollersPerApi = 4) {
  const claims = new Map<string, string>()
  const duplicates: string[] = []
  const acked = new Set<string>()
  const giveUpAt = Date.now() + 60_000
  const poller = async (api: ApiProcess, a: number, w: number) => {
    const workerId = `api${a}-w${w}`
    while (acked.size < ids.length && Date.now() < giveUpAt) {
      const res = await poll(api, { worker_id: workerId, queues: [queue], capacity: 5, wait_seconds: 1 })
      if (res.status !== 200) throw new Error(`poll answered ${res.status}: ${JSON.stringify(res.body)}`)
      for (const job of res.body.jobs as Array<{ id: string; attempt: number }>) {
        const key = `${job.id}#${job.attempt}`
        if (claims.has(key)) duplicates.push(`${key} by ${claims.get(key)} and ${workerId}`)
        claims.set(key, workerId)
        const done = await ack(api, job.id, workerId)
        if (done.status === 200) acked.add(job.id)
      }
    }
  }
  await Promise.all(apis.flatMap((api, a) => Array.from({ length: pollersPerApi }, (_, w) => poller(api, a, w))))
  return { claims, duplicates, lost: ids.filter((id) => !acked.has(id)) }
}

t.test('a job created in this process is claimed from the index, with the jobs table locked', async (t) => {
  const api = await startApi()
  await follow(api, 'q-fast')
  const unlock = await lockJobsTable(sql, t)
  const waiting = poll(api, { worker_id: 'wrk_fast', queues: ['q-fast'], wait_seconds: 20 })
  const created = await httpRequest(api.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'ri', queue: 'q-fast', payload: { fast: true } })
  t.equal(created.status, 201)
  const res = await answerWithin(waiting)
  t.not(res, 'pending', 'the waiting poll answered while the jobs table was locked')
  if (res === 'pending') return
  t.same(
    res.body.jobs.map((j: any) => [j.id, j.attempt, j.payload]),
    [[created.body.id, 1, { fast: true }]],
    'it claimed the job: no claim query, no row write',
  )
  const acked = await ack(api, created.body.id, 'wrk_fast')
  t.equal(acked.status, 200, 'and the ack needs no Postgres either')
  await unlock()
  await eventually(
    async () => (await sql<{ state: string }[]>`SELECT state FROM jobs WHERE id = ${created.body.id}`)[0]?.state === 'succeeded',
    15_000,
    'the projector to write the row',
  )
  await api.stop()
})

t.test("a followed queue's waiting polls hold no connection and no place in the claim line", async (t) => {
  const api = await startApi()
  await follow(api, 'q-idle')
  const polls = Array.from({ length: 20 }, (_, i) =>
    httpRequest(api.url, h.apiKey, 'POST', '/jobsvc/v1/workers/poll', { worker_id: `idle-${i}`, queues: ['q-idle'], wait_seconds: 30 }).catch(
      () => null,
    ),
  )
  await eventually(async () => api.context.polls.held(h.projectId) === 20, 15_000, 'the 20 polls to be waiting')
  t.equal(
    api.context.claims.running(h.projectId) + api.context.claims.served(h.projectId) + api.context.claims.waiting(h.projectId),
    0,
    'none of them is in the claim line, which is where polls take a connection',
  )
  const created = await httpRequest(api.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'ri', queue: 'q-idle', payload: {} })
  await eventually(async () => api.context.polls.held(h.projectId) === 19, 15_000, 'one poll to answer')
  await api.stop()
  const answers = (await Promise.all(polls)).filter((r) => r !== null && r.status === 200 && r.body.jobs.length > 0)
  t.same(
    answers.map((r) => r!.body.jobs.map((j: any) => j.id)),
    [[created.body.id]],
    'the one job woke one poll, which claimed it',
  )
})

t.test('jobs created while no API process ran are claimed exactly once by two started later', async (t) => {
  const ids = await createElsewhere('q-late', 120)
  await projected('q-late', ids.length)
  const apis = [await startApi(), await startApi()]
  const { claims, duplicates, lost } = await drain(apis, 'q-late', ids)
  t.same(duplicates, [], 'no job claimed twice for one attempt')
  t.same(lost, [], 'no job left unclaimed')
  t.equal(claims.size, ids.length, 'one claim per job')
  for (const [i, api] of apis.entries()) {
    await eventually(async () => api.context.ready.isComplete(h.projectId, ['q-late']), 15_000, `API ${i}'s index warmed from the read model`)
  }
  t.pass('both indexes hold the queue whole after reading it from the read model')
  await Promise.all(apis.map((api) => api.stop()))
})

t.test('a queue past the index bound: the read model answers for the rest, every job once, then the index recovers', async (t) => {
  const bound = 10
  const api = await startApi(withTunables({ ready_index_jobs_per_project: bound }))
  await follow(api, 'q-big')
  const ids: string[] = []
  for (let n = 0; n < 60; n++) {
    const res = await httpRequest(api.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'ri', queue: 'q-big', payload: { n } })
    ids.push(res.body.id)
  }
  t.ok(api.context.ready.size <= bound, `the index holds at most ${bound} jobs of the project (${api.context.ready.size})`)
  t.notOk(api.context.ready.isComplete(h.projectId, ['q-big']), 'and no longer vouches for the queue')
  await projected('q-big', ids.length)
  const { claims, duplicates, lost } = await drain([api], 'q-big', ids)
  t.same(duplicates, [], 'no job claimed twice for one attempt')
  t.same(lost, [], 'no job left unclaimed')
  t.equal(claims.size, ids.length, 'one claim per job')
  await poll(api, { worker_id: 'opener', queues: ['q-big'], wait_seconds: 0 })
  await eventually(async () => api.context.ready.isComplete(h.projectId, ['q-big']), 15_000, 'the drained queue read again, whole')
  t.pass('the queue is whole in the index again once it had room')
  await api.stop()
})

t.test('a poll served by the read model gets its whole capacity past rows the projector has not caught up with', async (t) => {
  // A bound of one keeps the queue incomplete in the index, so polls also run the read-model
  // query; with the projector stopped, a job claimed a moment ago still reads pending there.
  const api = await startApi(withTunables({ ready_index_jobs_per_project: 1 }))
  const ids = await createElsewhere('q-stale', 4)
  await projected('q-stale', ids.length)
  await h.stopRole('projector')
  t.teardown(() => h.startRole('projector'))
  const first = await poll(api, { worker_id: 'wrk_s', queues: ['q-stale'] })
  t.equal(first.body.jobs.length, 1, 'the first poll claims one job, whose row still reads pending')
  const two = await poll(api, { worker_id: 'wrk_s', queues: ['q-stale'], capacity: 2 })
  t.equal(two.body.jobs.length, 2, 'a capacity-2 poll gets 2 of the 3 claimable jobs, not the stale row in their place')
  const rest = await poll(api, { worker_id: 'wrk_s', queues: ['q-stale'], capacity: 50 })
  t.equal(rest.body.jobs.length, 1, 'and the last one is left for the next')
  const claimed = [...first.body.jobs, ...two.body.jobs, ...rest.body.jobs].map((j: any) => j.id)
  t.same([...claimed].sort(), [...ids].sort(), 'each job claimed exactly once')
  await api.stop()
})

t.test("a gap in the index's consumer: jobs created meanwhile are claimed once, and the index resumes where it stopped", async (t) => {
  const api = await startApi()
  await follow(api, 'q-gap')
  const stream = eventsStreamName(h.config.namespace)
  const ephemeral = async () => {
    const names: string[] = []
    for await (const info of h.runtime.nats.jsm.consumers.list(stream)) if (info.config.durable_name === undefined) names.push(info.name)
    return names
  }
  const [gone, ...others] = await ephemeral()
  t.same(others, [], "the index's own consumer is the only ephemeral one")
  await h.runtime.nats.jsm.consumers.delete(stream, gone!)
  const during = await createElsewhere('q-gap', 8)
  await eventually(
    async () => {
      const now = await ephemeral()
      return now.length === 1 && now[0] !== gone
    },
    15_000,
    'a new consumer for the index',
  )
  const last = (await elsewhere.get(h.projectId, during.at(-1)!)).seq
  await eventually(async () => api.context.ready.position >= last, 15_000, 'the index to follow past the jobs created during the gap')
  await eventually(async () => api.context.ready.isComplete(h.projectId, ['q-gap']), 15_000, 'the index to vouch for the queue')
  const { duplicates, lost } = await drain([api], 'q-gap', during, 2)
  t.same(duplicates, [], 'none claimed twice')
  t.same(lost, [], 'none left unclaimed: the new consumer started where the old one stopped')
  await api.stop()
})

t.test("a job this process was creating, whose append's answer never came, is taken from the log's copy", async (t) => {
  const api = await startApi()
  await follow(api, 'q-lost')
  const jobId = elsewhere.newJobId()
  // As this process's own create does before its append; the append then lands in the log, but
  // its answer never reaches this process (a timeout, a lost connection).
  api.context.ready.observer.creating(jobId)
  const { seq } = await elsewhere.create(h.projectId, newJob('q-lost', 0), { jobId })
  await eventually(async () => api.context.ready.position >= seq, 15_000, 'the index to follow the create')
  t.equal(api.context.ready.size, 0, "the log's copy waits for the append's answer, undecoded")
  api.context.ready.observer.created(jobId)
  t.equal(api.context.ready.size, 1, 'the append settled without an answer: the job is held from the copy')
  const res = await poll(api, { worker_id: 'wrk_lost', queues: ['q-lost'] })
  t.same(
    res.body.jobs.map((j: any) => j.id),
    [jobId],
    'and claimed',
  )
  await api.stop()
})

t.test("a retry whose backoff ends wakes a waiting poll of the index's own accord", async (t) => {
  const api = await startApi()
  const [id] = await createElsewhere('q-retry', 1)
  const first = await poll(api, { worker_id: 'wrk_r', queues: ['q-retry'], wait_seconds: 10 })
  t.same(
    first.body.jobs.map((j: any) => j.id),
    [id],
  )
  const failed = await ack(api, id!, 'wrk_r', 'failed')
  t.equal(failed.body.action, 'retry')
  const retryAt = Date.parse(failed.body.retry_at)
  await eventually(async () => api.context.ready.isComplete(h.projectId, ['q-retry']), 15_000, 'the index to hold the queue')

  // The service's clock is moved to a second before the retry is due, so the wait is short.
  await withClockShifted(h.runtime, retryAt - Date.now() - 1_000, async () => {
    const session = api.context.ready.open(h.projectId, ['q-retry'], null, 1)
    try {
      t.same(session.take(1), [], 'not claimable before retry_at')
      const woken = await session.wait(30_000, new AbortController().signal)
      t.equal(woken, 'woken', 'the index woke the waiting poll when the retry came due (no tick: it is 10 minutes)')
      const [candidate] = session.take(1)
      t.equal(candidate?.jobId, id, 'and offers the job')
      if (candidate !== undefined) session.settle(candidate, 'unknown')
    } finally {
      session.close()
    }
    const second = await poll(api, { worker_id: 'wrk_r2', queues: ['q-retry'], wait_seconds: 5 })
    t.same(
      second.body.jobs.map((j: any) => [j.id, j.attempt]),
      [[id, 2]],
      'a poll claims the second attempt',
    )
  })
  await api.stop()
})
