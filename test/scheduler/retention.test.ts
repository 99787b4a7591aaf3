import { pino } from 'pino'
import t from 'tap'
import type { Plan } from '../../domain/project/index.ts'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { seedEndedJobs } from '../../tools/bench/retention.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { resolvePlans } from '../../domain/plans.ts'
import { rebuildReadModels } from '../../services/roles/projector/rebuild.ts'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import { purgeExpiredJobs, Retention, retentionBatchSize } from '../../services/roles/scheduler/retention.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, httpRequest, startHarness, withClockShifted, type Harness } from '../support/harness.ts'
import { readModels } from '../support/read-models.ts'

const day = 24 * 60 * 60 * 1000

t.test('retention deletes exactly the expired terminal jobs of each plan, from the log and the read model', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const free = await h.newProject()
  const as = (key: string) => (method: string, path: string, body?: unknown) => httpRequest(h.url, key, method, path, body)
  const business = as(h.apiKey)
  const freeApi = as(free.apiKey)

  // In each project: one succeeded, one dead-lettered, one cancelled, one still pending.
  async function populate(api: ReturnType<typeof as>, tag: string) {
    const ids: Record<string, string> = {}
    for (const kind of ['ok', 'dead', 'cancel', 'pending']) {
      const runAt = kind === 'cancel' ? new Date(Date.now() + 3_600_000).toISOString() : undefined
      const res = await api('POST', '/jobsvc/v1/jobs', {
        job_type: `${tag}-${kind}`,
        queue: `q-${tag}-${kind}`,
        payload: {},
        max_attempts: 1,
        ...(runAt ? { run_at: runAt } : {}),
      })
      ids[kind] = res.body.id
    }
    for (const kind of ['ok', 'dead']) {
      const polled = await eventually(async () => {
        const p = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: [`q-${tag}-${kind}`], wait_seconds: 1 })
        return p.body.jobs?.length ? p : null
      })
      const status = kind === 'ok' ? 'succeeded' : 'failed'
      await api('POST', '/jobsvc/v1/workers/ack', { job_id: polled.body.jobs[0].id, worker_id: 'w', status })
    }
    await api('POST', `/jobsvc/v1/jobs/${ids.cancel}/cancel`)
    return ids
  }
  const b = await populate(business, 'b')
  const f = await populate(freeApi, 'f')
  const rowCount = async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs`)[0]!.n as number
  await eventually(
    async () =>
      (await rowCount()) === 8 &&
      (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE state IN ('succeeded','dead_letter','cancelled')`)[0]!.n === 6,
  )

  const stream = eventsStreamName(h.config.namespace)
  const messagesOf = async (projectId: string, jobId: string) => {
    const subject = `${h.config.namespace}.evt.${projectId}.job.${jobId}`
    const info = await h.runtime.nats.jsm.streams.info(stream, { subjects_filter: subject })
    return info.state.subjects?.[subject] ?? 0
  }

  const realNow = h.runtime.now
  t.teardown(() => void (h.runtime.now = realNow))
  h.runtime.now = () => new Date(Date.now() + 29 * day)
  t.equal(await purgeExpiredJobs(h.runtime), 0, 'nothing is 30 days old yet')

  h.runtime.now = () => new Date(Date.now() + 31 * day)
  t.equal(await purgeExpiredJobs(h.runtime), 3, "the free project's three terminal jobs go after 30 days")
  for (const kind of ['ok', 'dead', 'cancel']) {
    t.equal(await messagesOf(free.projectId, f[kind]!), 0, `free ${kind}: purged from the log`)
    t.equal((await freeApi('GET', `/jobsvc/v1/jobs/${f[kind]}`)).status, 404, `free ${kind}: 404`)
  }
  t.ok((await messagesOf(free.projectId, f.pending!)) > 0, 'a pending job stays')
  for (const kind of ['ok', 'dead', 'cancel']) t.ok((await messagesOf(h.projectId, b[kind]!)) > 0, `business ${kind} stays (180 days)`)
  t.equal(await rowCount(), 5)

  h.runtime.now = () => new Date(Date.now() + 181 * day)
  t.equal(await purgeExpiredJobs(h.runtime), 3, "the business project's terminal jobs go after 180 days")
  t.equal(await rowCount(), 2, 'only the two pending jobs are left')
  t.same((await h.runtime.sql`SELECT id FROM jobs ORDER BY id`).map((r) => r.id).sort(), [b.pending, f.pending].sort())
  t.equal(await purgeExpiredJobs(h.runtime), 0, 'and a second pass finds nothing')
  const counted = await h.runtime.sql<{ state: string; n: number }[]>`
    SELECT state, sum(count)::int AS n FROM job_state_counts GROUP BY state HAVING sum(count) <> 0 ORDER BY state`
  t.same(counted, [{ state: 'pending', n: 2 }], 'the metrics state counts lose the deleted jobs too')
})

/** Job ids with at least one message on the log, among `projectIds`. */
async function jobsOnLog(h: Harness, projectIds: readonly string[]): Promise<Set<string>> {
  const ids = new Set<string>()
  for (const projectId of projectIds) {
    const info = await h.runtime.nats.jsm.streams.info(eventsStreamName(h.config.namespace), {
      subjects_filter: `${h.config.namespace}.evt.${projectId}.job.*`,
    })
    for (const subject of Object.keys(info.state.subjects ?? {})) ids.add(subject.split('.').at(-1)!)
  }
  return ids
}

/** job_state_counts beside what the rows themselves count, per project, queue and state. */
async function countsAndRows(h: Harness, exceptQueue = '') {
  const sql = h.runtime.sql
  const counts = await sql`SELECT project_id, queue, state, count FROM job_state_counts WHERE queue <> ${exceptQueue} ORDER BY 1, 2, 3`
  const rows =
    await sql`SELECT project_id, queue, state, count(*)::bigint AS count FROM jobs WHERE queue <> ${exceptQueue} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`
  return { counts: [...counts], rows: [...rows] }
}

const caughtUp = (h: Harness, seq: number) =>
  eventually(async () => (await projectedThrough(h.runtime.sql, projections)) >= seq, 60_000, `the projector to reach ${seq}`)

t.test(
  'retention at volume: the scheduler drains thousands of expired jobs of every plan back to back, from the log, the rows and the counts',
  async (t) => {
    // A pass every ten minutes: the backlog (over three batches) drains within the wait below only
    // because full passes follow each other at once.
    const h = await startHarness(t, import.meta.filename, {
      roles: ['api', 'projector'],
      suffix: '_volume',
      tunables: { retention_interval_ms: 600_000 },
    })
    const projectOf = async (plan: Plan) =>
      (await createProject(h.runtime, { name: plan, plan, ownerEmail: null, keyEnvironment: 'test' })).project.id
    const firstFree = await createProject(h.runtime, { name: 'free', plan: 'free', ownerEmail: null, keyEnvironment: 'test' })
    const freeKey = firstFree.apiKey
    const projects = {
      free: [firstFree.project.id, await projectOf('free')],
      starter: [await projectOf('starter')],
      pro: [await projectOf('pro'), await projectOf('pro')],
      business: [h.projectId],
    }
    const all = Object.values(projects).flat()
    const longAgo = (days: number) => new Date(Date.now() - days * day)

    // Past every plan's retention; past free and starter's only; past none.
    const old = await seedEndedJobs(h.runtime, { projectIds: all, count: 3000, endedAt: longAgo(200) })
    const middle = await seedEndedJobs(h.runtime, { projectIds: all, count: 300, endedAt: longAgo(60) })
    const recent = await seedEndedJobs(h.runtime, { projectIds: all, count: 120, endedAt: longAgo(10) })
    // Not terminal although created 200 days ago: pending, and scheduled a day ahead.
    const atOld = new JobService({ ...h.runtime, now: () => longAgo(200) })
    const unfinished: string[] = []
    for (const [i, projectId] of all.entries()) {
      const job = {
        job_type: 'unfinished',
        payload: {},
        queue: 'unfinished',
        max_attempts: 3,
        timeout_seconds: 300,
        tags: null,
        parent_job_id: null,
        idempotency_key: null,
      }
      unfinished.push((await atOld.create(projectId, { ...job, run_at: null })).job.id)
      unfinished.push((await atOld.create(projectId, { ...job, run_at: new Date(Date.now() + day + i).toISOString() })).job.id)
    }
    // Dead-lettered 200 days ago, then retried after retention picked it (the projector is stopped,
    // so the row still shows the dead letter): the retry's message must survive the purge.
    const changedProject = projects.free[0]!
    const changedJob = await atOld.create(changedProject, {
      job_type: 'changed',
      payload: {},
      queue: 'changed',
      run_at: null,
      max_attempts: 1,
      timeout_seconds: 300,
      tags: null,
      parent_job_id: null,
      idempotency_key: null,
    })
    await atOld.claim(changedProject, changedJob.job.id, 'w')
    await atOld.ack(changedProject, changedJob.job.id, { worker_id: 'w', status: 'failed', duration_ms: 5, error: null })
    await caughtUp(h, await h.runtime.store.lastSequence())
    const changed = changedJob.job.id
    t.equal((await h.runtime.sql`SELECT state FROM jobs WHERE id = ${changed}`)[0]!.state, 'dead_letter', 'one job is dead-lettered 200 days ago')

    const expired = new Set([
      ...old.jobs.map((j) => j.id),
      ...middle.jobs.filter((j) => [...projects.free, ...projects.starter].includes(j.projectId)).map((j) => j.id),
    ])
    const rowsBefore = (await h.runtime.sql<{ id: string }[]>`SELECT id FROM jobs`).map((r) => r.id)
    const survivors = new Set(rowsBefore.filter((id) => !expired.has(id) && id !== changed))
    t.equal(rowsBefore.length, 3000 + 300 + 120 + 2 * all.length + 1, 'every seeded job has its row')
    t.ok(expired.size > 3 * retentionBatchSize, `${expired.size} jobs are past their plan's retention: more than three passes`)

    await h.stopRole('projector')
    const retried = await new JobService(h.runtime).retry(changedProject, changed)
    t.equal(retried.job.state, 'pending', 'the dead-lettered job is retried while the projector is stopped')
    t.equal((await h.runtime.sql`SELECT state FROM jobs WHERE id = ${changed}`)[0]!.state, 'dead_letter', 'its row still shows the dead letter')

    await h.startRole('scheduler')
    await eventually(
      async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs`)[0]!.n === survivors.size,
      60_000,
      'the scheduler to delete every expired job',
    )
    await h.startRole('projector')
    await caughtUp(h, retried.seq)

    const rowsAfter = new Set((await h.runtime.sql<{ id: string }[]>`SELECT id FROM jobs`).map((r) => r.id))
    t.same(
      [...rowsAfter].sort(),
      [...survivors, changed].sort(),
      'exactly the unexpired and unfinished jobs keep their rows, and the retried one is rebuilt',
    )
    t.same([...(await jobsOnLog(h, all))].sort(), [...rowsAfter].sort(), 'exactly the jobs that keep a row keep messages on the log')
    const changedNow = await httpRequest(h.url, null, 'GET', `/jobsvc/v1/jobs/${changed}`, undefined, { authorization: `Bearer ${freeKey}` })
    t.equal(changedNow.status, 200, 'the retried job is still there')
    t.equal(changedNow.body.state, 'pending', 'in the state its retry gave it')
    const subject = `${h.config.namespace}.evt.${changedProject}.job.${changed}`
    const changedInfo = await h.runtime.nats.jsm.streams.info(eventsStreamName(h.config.namespace), { subjects_filter: subject })
    t.equal(changedInfo.state.subjects?.[subject], 1, 'only its retry is left on the log: what the row had seen is gone')
    t.same(
      (await h.runtime.sql`SELECT state, count FROM job_state_counts WHERE queue = 'changed' ORDER BY state`).map((r) => `${r.state} ${r.count}`),
      ['dead_letter -1', 'pending 1'],
      'the retried job counts as pending; its dead letter stays subtracted (see the replay below)',
    )
    const { counts, rows } = await countsAndRows(h, 'changed')
    t.same(counts, rows, "the state counts equal the rows, queue by queue (the retried job's queue is below)")
    t.ok(recent.jobs.every((j) => rowsAfter.has(j.id)) && unfinished.every((id) => rowsAfter.has(id)), 'unexpired and unfinished jobs stay')
    const activity = await h.runtime
      .sql`SELECT count(*)::int AS n FROM activity WHERE target_type = 'job' AND target_id IN ${h.runtime.sql([...expired].slice(0, 100))}`
    t.ok(activity[0]!.n >= 100, 'activity rows that name deleted jobs stay')

    // A replay no longer sees the deleted jobs: the read models it rebuilds from what is left must
    // equal the live ones. (Activity, throughput and job-type rollups keep the deleted jobs'
    // history live, which a replay cannot rebuild from a log without them.) The retried job's old
    // state stays subtracted in both: the message that survived moves it out of a state that, for a
    // replay, it never entered.
    await h.stopRole('scheduler')
    const live = await readModels(h.runtime.sql)
    await rebuildReadModels(h.runtime, () => undefined)
    const rebuilt = await readModels(h.runtime.sql)
    for (const table of ['jobs', 'job_state_counts', 'projects', 'api_keys', 'recurring_jobs'] as const)
      t.same(rebuilt[table], live[table], `a replay after retention rebuilds ${table} as it is live`)
  },
)

t.test('two retention runs at once share the backlog: each expired job is deleted and subtracted once', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], suffix: '_two' })
  const free = (await h.newProject()).projectId
  const projectIds = [h.projectId, free]
  const seeded = await seedEndedJobs(h.runtime, { projectIds, count: 2500, endedAt: new Date(Date.now() - 200 * day) })
  const kept = await seedEndedJobs(h.runtime, { projectIds, count: 50, endedAt: new Date(Date.now() - 10 * day) })
  await caughtUp(h, Math.max(seeded.lastSeq, kept.lastSeq))
  // A second scheduler process: its own connections to NATS and Postgres.
  const other = await openRuntime(h.config, pino({ level: 'silent' }), 'jobsvc-test-second-scheduler')
  t.teardown(() => other.close())

  const [mine, theirs] = await Promise.all([purgeExpiredJobs(h.runtime), purgeExpiredJobs(other)])
  t.equal(mine + theirs, 2500, `the two runs deleted ${mine} and ${theirs}: every expired job once`)
  const left = (await h.runtime.sql<{ id: string }[]>`SELECT id FROM jobs ORDER BY id`).map((r) => r.id)
  t.same(left, kept.jobs.map((j) => j.id).sort(), 'only the unexpired jobs are left')
  t.same([...(await jobsOnLog(h, projectIds))].sort(), left, 'and only they keep messages on the log')
  const { counts, rows } = await countsAndRows(h)
  t.same(counts, rows, 'the state counts equal the rows: nothing subtracted twice')
  t.equal(await purgeExpiredJobs(other), 0, 'a later run finds nothing')
})

t.test('a plan keeping jobs a day deletes their heartbeat entries too (the bucket TTL is two days)', async (t) => {
  const h = await startHarness(t, import.meta.filename, {
    roles: ['api', 'projector'],
    suffix: '_heartbeat',
    config: { plans: resolvePlans({ free: { retention_days: 1 } }) },
  })
  const free = await h.newProject()
  const api = (method: string, path: string, body?: unknown) => httpRequest(h.url, free.apiKey, method, path, body)
  const created = await api('POST', '/jobsvc/v1/jobs', { job_type: 'beating', queue: 'hb', payload: {} })
  const polled = await eventually(async () => {
    const p = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['hb'], wait_seconds: 1 })
    return p.body.jobs?.length ? p : null
  })
  t.equal(polled.body.jobs[0].id, created.body.id)
  t.equal((await api('POST', '/jobsvc/v1/workers/heartbeat', { job_id: created.body.id, worker_id: 'w' })).status, 200)
  await api('POST', '/jobsvc/v1/workers/ack', { job_id: created.body.id, worker_id: 'w', status: 'succeeded' })
  await eventually(async () => (await h.runtime.sql`SELECT state FROM jobs WHERE id = ${created.body.id}`)[0]?.state === 'succeeded')
  t.ok(await h.runtime.heartbeats.get(created.body.id), 'the heartbeat entry is there after the ack')

  const deleted = await withClockShifted(h.runtime, 1.5 * day, () => purgeExpiredJobs(h.runtime))
  t.equal(deleted, 1, 'the job is deleted after a day')
  const entry = await h.runtime.heartbeats.get(created.body.id)
  t.ok(entry === null || entry.operation !== 'PUT', 'and its heartbeat entry with it')
})

t.test('a project with a large backlog does not hold up another: passes take the projects in turn', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], suffix: '_turns' })
  // Project ids grow with creation, so the large backlog's project comes first in id order.
  const large = (await h.newProject()).projectId
  const small = (await h.newProject()).projectId
  t.ok(large < small, 'the large backlog is first in id order')
  const endedAt = new Date(Date.now() - 200 * day)
  const big = await seedEndedJobs(h.runtime, { projectIds: [large], count: 2500, endedAt })
  const few = await seedEndedJobs(h.runtime, { projectIds: [small], count: 10, endedAt })
  await caughtUp(h, Math.max(big.lastSeq, few.lastSeq))
  const left = async (projectId: string) => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${projectId}`)[0]!.n as number

  const retention = new Retention(h.runtime)
  t.teardown(() => retention.close())
  t.same(
    await retention.pass(),
    { jobs: retentionBatchSize, messages: 2900, purgedBySubject: 0, full: true },
    'the first pass fills its batch from the first project',
  )
  t.same([await left(large), await left(small)], [1500, 10])
  t.equal((await retention.pass()).jobs, retentionBatchSize, 'the second pass starts after it')
  t.same([await left(large), await left(small)], [510, 0], "and takes the other project's jobs before more of the first's")
})
