import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { isAttemptStale, jobDecider, type Job, type JobAggregate, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { jobList } from '../../projections/job-list.ts'
import { eventSchemaVersion, type EventRecord } from '../../streams/event-store.ts'
import { createJobData } from '../support/job-commands.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

// The job list's queries: jobs in through the projection's apply, answers out. Messages are built
// from the decider alone (no log): the projection needs only their sequence, state and events.
const { sql } = await openIsolatedStore(t, import.meta.filename)

let seq = 0
const states = new Map<string, JobAggregate>()

/** Decides `command` on the job's state and applies the message it would be, as the projector does. */
async function run(projectId: string, jobId: string, command: JobCommand): Promise<Job> {
  const before = states.get(jobId) ?? null
  const events = jobDecider.decide(command, before)
  const state = fold(jobDecider, before, events)
  states.set(jobId, state)
  const record: EventRecord = {
    seq: ++seq,
    subject: `t.evt.${projectId}.job.${jobId}`,
    message: {
      schema_version: eventSchemaVersion,
      aggregate: 'job',
      aggregate_id: jobId,
      project_id: projectId,
      events: events.map((e, i) => ({ ...(e as JobEvent), id: `evt_${seq}_${i}`, time: command.meta.now })),
      state,
    },
  }
  await sql.begin((tx) => jobList.apply(tx, [record]))
  return state!
}

const at = (ms: number) => new Date(ms).toISOString()
const t0 = Date.parse('2024-05-01T00:00:00.000Z')

function create(projectId: string, jobId: string, nowMs: number, data: Partial<ReturnType<typeof createJobData>> = {}) {
  return run(projectId, jobId, {
    type: 'create_job',
    data: createJobData({ job_id: jobId, project_id: projectId, ...data }),
    meta: { now: at(nowMs) },
  })
}

function claim(projectId: string, jobId: string, nowMs: number) {
  return run(projectId, jobId, { type: 'claim_job', data: { worker_id: 'w1' }, meta: { now: at(nowMs) } })
}

t.test('staleProcessing finds exactly the attempts isAttemptStale calls stale had their worker heartbeated as it started', async (t) => {
  const projectId = 'prj_stale'
  const timeouts = [1, 5, 14, 15, 16, 29, 30, 31, 45, 300, 3600]
  const jobs: Job[] = []
  for (const [i, timeout] of timeouts.entries()) {
    await create(projectId, `job_stale_${i}`, t0, { timeout_seconds: timeout })
    jobs.push(await claim(projectId, `job_stale_${i}`, t0 + 1000))
  }
  const offsetsMs = [0, 999, 1000, 1001, 4999, 5000, 5001, 20_000, 20_001, 29_999, 30_000, 30_001, 40_000, 200_000, 200_001, 2_400_001]
  for (const graceMs of [0, 10_000]) {
    for (const offset of offsetsMs) {
      for (const skew of [-1, 0, 1]) {
        const now = new Date(t0 + 1000 + offset + graceMs + skew)
        const found = (await jobList.staleProcessing(sql, now, graceMs, [], 100)).map((r) => r.id).sort()
        const expected = jobs
          .filter((j) => isAttemptStale(j, j.started_at, now.toISOString(), graceMs))
          .map((j) => j.id)
          .sort()
        t.same(found, expected, `grace ${graceMs} ms, ${offset + skew} ms after the start`)
      }
    }
  }
  const now = new Date(t0 + 1000 + 2_400_001)
  const all = await jobList.staleProcessing(sql, now, 0, ['job_stale_0'], 100)
  t.notOk(
    all.some((r) => r.id === 'job_stale_0'),
    'held back ones are left out',
  )
  t.equal((await jobList.staleProcessing(sql, now, 0, [], 3)).length, 3, 'at most the limit')
})

t.test('page: filters, newest first, and a cursor that continues after the last row', async (t) => {
  const projectId = 'prj_page'
  for (let i = 0; i < 5; i++) await create(projectId, `job_page_${i}`, t0 + i * 1000, { queue: i % 2 === 0 ? 'even' : 'odd' })
  await create('prj_other', 'job_page_other', t0)
  const first = await jobList.page(sql, projectId, {}, null, 2)
  t.same(
    first.rows.map((j) => j.id),
    ['job_page_4', 'job_page_3'],
  )
  t.equal(first.hasMore, true)
  const last = first.rows.at(-1)!
  const second = await jobList.page(sql, projectId, {}, { created_at: last.created_at, id: last.id }, 10)
  t.same(
    second.rows.map((j) => j.id),
    ['job_page_2', 'job_page_1', 'job_page_0'],
  )
  t.equal(second.hasMore, false)
  const even = await jobList.page(sql, projectId, { queue: 'even', created_after: at(t0) }, null, 10)
  t.same(
    even.rows.map((j) => j.id),
    ['job_page_4', 'job_page_2'],
  )
  t.same((await jobList.page(sql, projectId, { state: 'processing' }, null, 10)).rows, [])
})

t.test('claimCandidates, dueScheduled and the alert measures read the pending and scheduled jobs', async (t) => {
  const projectId = 'prj_claim'
  await create(projectId, 'job_claim_a', t0, { queue: 'q', job_type: 'a' })
  await create(projectId, 'job_claim_b', t0 + 1000, { queue: 'q', job_type: 'b' })
  await create(projectId, 'job_claim_later', t0, { queue: 'q', run_at: at(t0 + 60_000) })
  const now = new Date(t0 + 2000)
  const candidates = await sql.begin((tx) => jobList.claimCandidates(tx, { projectId, queues: ['q'], jobTypes: null }, now, [], 10))
  t.same(
    candidates.map((r) => r.id),
    ['job_claim_a', 'job_claim_b'],
  )
  const typed = await sql.begin((tx) => jobList.claimCandidates(tx, { projectId, queues: ['q'], jobTypes: ['b'] }, now, [], 10))
  t.same(
    typed.map((r) => r.id),
    ['job_claim_b'],
  )
  const unseen = await sql.begin((tx) => jobList.claimCandidates(tx, { projectId, queues: ['q'], jobTypes: null }, now, ['job_claim_a'], 10))
  t.same(
    unseen.map((r) => r.id),
    ['job_claim_b'],
  )

  t.same(await jobList.dueScheduled(sql, now, [], 10), [])
  t.same(await jobList.dueScheduled(sql, new Date(t0 + 60_000), [], 10), [{ project_id: projectId, id: 'job_claim_later' }])

  t.equal(await jobList.pendingCount(sql, projectId, 'q'), 2)
  t.equal(await jobList.pendingCount(sql, projectId, 'elsewhere'), 0)
  t.same(await jobList.oldestDueAt(sql, projectId, null, now), new Date(t0))
  t.equal(await jobList.oldestDueAt(sql, projectId, null, new Date(t0 - 1)), null)
})

t.test('expiredWaiting: overdue waiting jobs round-robin across projects; claimCandidates and dueScheduled skip them', async (t) => {
  // prj_big has a backlog of 6 overdue jobs, all older than prj_small's 2: the small one still
  // gets its turn in the first pass.
  for (let i = 0; i < 6; i++) await create('prj_exp_big', `job_exp_big_${i}`, t0 + i, { ttl_seconds: 10 })
  for (let i = 0; i < 2; i++) await create('prj_exp_small', `job_exp_small_${i}`, t0 + 1000 + i, { ttl_seconds: 10 })
  await create('prj_exp_small', 'job_exp_later', t0, { ttl_seconds: 3600 })
  await create('prj_exp_small', 'job_exp_child', t0, { ttl_seconds: 1, parent_job_id: 'job_exp_big_0', waits_for_parent: true })
  await create('prj_exp_small', 'job_exp_sched', t0, { ttl_seconds: 1, run_at: at(t0 + 5_000) })
  await create('prj_exp_small', 'job_exp_claimed', t0, { ttl_seconds: 1 })
  await claim('prj_exp_small', 'job_exp_claimed', t0 + 10)
  const now = new Date(t0 + 20_000)
  const ids = (rows: { id: string }[]) => rows.map((r) => r.id)
  // prj_small's first is its scheduled job (run_at + 1 s), its second the first of its pending ones.
  const roundRobin = ['job_exp_sched', 'job_exp_big_0', 'job_exp_big_1', 'job_exp_small_0']
  t.same(ids(await jobList.expiredWaiting(sql, now, [], 4, 50)), roundRobin, "each project's first (earliest first), then each project's second")
  t.same(ids(await jobList.expiredWaiting(sql, now, [], 100, 2)), roundRobin, 'at most perProject of each project')
  const all = ids(await jobList.expiredWaiting(sql, now, ['job_exp_big_2'], 100, 50))
  t.notOk(all.includes('job_exp_later'), 'a job within its ttl')
  t.notOk(all.includes('job_exp_child'), 'a child waiting for its parent')
  t.notOk(all.includes('job_exp_claimed'), 'a claimed job')
  t.notOk(all.includes('job_exp_big_2'), 'a held-back job')
  t.ok(all.includes('job_exp_sched'), 'a scheduled job past run_at + ttl')
  const target = { projectId: 'prj_exp_small', queues: ['default'], jobTypes: null }
  const candidates = await sql.begin((tx) => jobList.claimCandidates(tx, target, now, [], 100))
  t.same(ids(candidates as unknown as { id: string }[]), ['job_exp_later'], 'the claim query skips the expired')
  const due = await jobList.dueScheduled(sql, now, [], 100)
  t.notOk(ids(due).includes('job_exp_sched'), 'promotion skips the expired')
})
