import assert from 'node:assert/strict'
import t from 'tap'
import { ulid } from 'ulid'
import type { Job, JobCommand } from '../../domain/job.ts'
import { jobList, upsertJobRows } from '../../projections/job-list.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { jobHandler, progressHandler } from '../../streams/aggregates.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

const { sql, store } = await openIsolatedStore(t, import.meta.filename)
const writer = { store, newUlid: ulid }

const projectId = 'prj_joblist'
let clock = Date.parse('2024-03-01T12:00:00.000Z')
/** A clock that moves a second per command, so every timestamp column is distinguishable. */
const meta = () => ({ now: new Date((clock += 1000)).toISOString(), random: 0.5 })

/** Runs a command and reads its message back from the log, as the projector would receive it. */
async function command(ref: Ref<'job'>, cmd: JobCommand): Promise<EventRecord> {
  const result = await jobHandler.decide(writer, ref, cmd)
  const stored = (await store.history(ref)).at(-1)!
  assert.equal(stored.seq, result.seq)
  return stored
}

/** A worker's progress report on the job's progress subject, as the heartbeat route appends it. */
async function report(ref: Ref<'job'>, attempt: number, progress: number): Promise<EventRecord> {
  const progressRef = progressHandler.ref(ref.projectId, ref.id)
  const data = { worker_id: 'w1', attempt, job_progress: null, progress }
  const result = await progressHandler.decide(writer, progressRef, { type: 'report_progress', data, meta: meta() })
  return (await store.history(progressRef)).find((r) => r.seq === result.seq)!
}

async function createJob(
  overrides: Partial<Extract<JobCommand, { type: 'create_job' }>['data']> = {},
): Promise<{ ref: Ref<'job'>; created: EventRecord }> {
  const ref = jobHandler.ref(projectId, `job_${ulid()}`)
  const created = await command(ref, {
    type: 'create_job',
    data: {
      job_id: ref.id,
      project_id: projectId,
      job_type: 'email',
      queue: 'mail',
      payload: { z: 1, a: { y: 2.5, b: [3, 'x'] } },
      run_at: null,
      max_attempts: 2,
      timeout_seconds: 30,
      tags: { team: 'growth' },
      parent_job_id: null,
      waits_for_parent: false,
      idempotency_key: 'idem-1',
      ...overrides,
    },
    meta: meta(),
  })
  return { ref, created }
}

function apply(records: EventRecord[]): Promise<void> {
  return sql.begin((tx) => jobList.apply(tx, records))
}

async function row(id: string) {
  const rows = await sql`SELECT *, xmin::text AS version FROM jobs WHERE id = ${id}`
  return rows[0]
}

const iso = (d: unknown) => (d instanceof Date ? d.toISOString() : d)

t.test('a job row follows the job through its events', async (t) => {
  const { ref, created } = await createJob()
  await apply([created])
  let r = await row(ref.id)
  t.match(r, {
    project_id: projectId,
    state: 'pending',
    job_type: 'email',
    queue: 'mail',
    attempt: 0,
    max_attempts: 2,
    timeout_seconds: 30,
    progress: null,
    worker_id: null,
    idempotency_key: 'idem-1',
    waiting_for_parent: false,
    parent_job_id: null,
    last_seq: created.seq,
  })
  t.same(r!.tags, { team: 'growth' })
  t.same(Object.keys(r!.payload), ['z', 'a'], 'the payload keeps its key order')
  t.same(r!.payload, { z: 1, a: { y: 2.5, b: [3, 'x'] } })
  t.equal(iso(r!.available_at), iso(r!.created_at), 'a job due now is available from its creation')

  const claimed = await command(ref, { type: 'claim_job', data: { worker_id: 'w1' }, meta: meta() })
  await apply([claimed])
  r = await row(ref.id)
  t.match(r, { state: 'processing', worker_id: 'w1', attempt: 1, last_seq: claimed.seq })
  t.equal(iso(r!.started_at), (claimed.message.state as Job).started_at)

  const progressed = await report(ref, 1, 0.425)
  await apply([progressed])
  t.match(await row(ref.id), { progress: 0.425, progress_seq: progressed.seq, last_seq: claimed.seq }, 'a report sets the progress, not the job')

  const failed = await command(ref, {
    type: 'ack_job',
    data: { worker_id: 'w1', status: 'failed', duration_ms: 1500, error: { type: 'Timeout', message: 'smtp', stack_trace: 'at send' } },
    meta: meta(),
  })
  await apply([failed])
  r = await row(ref.id)
  t.match(r, { state: 'pending', worker_id: null, attempt: 1, duration_ms: 1500, last_seq: failed.seq })
  t.same(r!.error, { type: 'Timeout', message: 'smtp', stack_trace: 'at send' })
  t.equal(r!.error_seq, failed.seq, 'the row knows which message holds the error')
  t.equal(r!.progress, 0.425, 'a failed attempt keeps its progress')
  t.equal(iso(r!.run_at), (failed.message.state as Job).run_at, 'the retry time is the run_at')
  t.equal(iso(r!.available_at), iso(r!.run_at), 'and the row is claimable only from then')

  clock += 60_000
  const reclaimed = await command(ref, { type: 'claim_job', data: { worker_id: 'w2' }, meta: meta() })
  await apply([reclaimed])
  r = await row(ref.id)
  t.match(r, { attempt: 2, progress: null, error_seq: failed.seq }, 'a new attempt starts without progress')
  t.same(r!.error, { type: 'Timeout', message: 'smtp', stack_trace: 'at send' }, 'and keeps the last error, which no later message carries')
  t.same(r!.payload, { z: 1, a: { y: 2.5, b: [3, 'x'] } }, 'and the payload, which only job_created carries')
  const stale = await report(ref, 1, 0.9)
  await apply([stale])
  t.equal((await row(ref.id))!.progress, null, "a report of the attempt before is not the new attempt's")
  const succeeded = await command(ref, {
    type: 'ack_job',
    data: { worker_id: 'w2', status: 'succeeded', duration_ms: 250, error: null },
    meta: meta(),
  })
  await apply([succeeded])
  r = await row(ref.id)
  t.match(r, { state: 'succeeded', worker_id: 'w2', attempt: 2, duration_ms: 250, error: null, last_seq: succeeded.seq })
  t.equal(iso(r!.completed_at), (succeeded.message.state as Job).completed_at)
  t.equal(iso(r!.updated_at), (succeeded.message.state as Job).updated_at)
})

t.test('scheduled, waiting, promoted, activated and cancelled jobs', async (t) => {
  const runAt = new Date(clock + 3_600_000).toISOString()
  const { ref: later, created: laterCreated } = await createJob({ run_at: runAt })
  await apply([laterCreated])
  t.match(await row(later.id), { state: 'scheduled', waiting_for_parent: false })
  t.equal(iso((await row(later.id))!.available_at), runAt)
  clock += 2 * 3_600_000
  const promoted = await command(later, { type: 'promote_job', data: {}, meta: meta() })
  await apply([promoted])
  t.match(await row(later.id), { state: 'pending', last_seq: promoted.seq })

  const { ref: child, created: childCreated } = await createJob({ parent_job_id: later.id, waits_for_parent: true })
  await apply([childCreated])
  t.match(await row(child.id), { state: 'scheduled', waiting_for_parent: true, parent_job_id: later.id })
  const activated = await command(child, { type: 'activate_child', data: { parent_job_id: later.id }, meta: meta() })
  await apply([activated])
  t.match(await row(child.id), { state: 'pending', waiting_for_parent: false })
  const cancelled = await command(child, { type: 'cancel_job', data: {}, meta: meta() })
  await apply([cancelled])
  t.match(await row(child.id), { state: 'cancelled', last_seq: cancelled.seq })
})

t.test('re-delivering the same sequence changes nothing', async (t) => {
  const { ref, created } = await createJob()
  const claimed = await command(ref, { type: 'claim_job', data: { worker_id: 'w1' }, meta: meta() })
  await apply([created, claimed])
  const before = await row(ref.id)
  await apply([claimed])
  await upsertJobRows(sql, [created, claimed])
  const after = await row(ref.id)
  t.equal(after!.version, before!.version, 'no new row version was written')
  t.same(after, before)
})

t.test('an older message applied after a newer one leaves the newer row', async (t) => {
  const { ref, created } = await createJob()
  const claimed = await command(ref, { type: 'claim_job', data: { worker_id: 'w1' }, meta: meta() })
  await apply([claimed])
  await apply([created])
  t.match(await row(ref.id), { state: 'processing', worker_id: 'w1', last_seq: claimed.seq })
  await apply([claimed, created])
  t.match(await row(ref.id), { state: 'processing', last_seq: claimed.seq }, 'within one batch the newest message wins whatever the order')
})

t.test('one batch writes one row per job, each at its newest message', async (t) => {
  const jobs = await Promise.all([createJob(), createJob(), createJob()])
  const claims = await Promise.all(jobs.map((j) => command(j.ref, { type: 'claim_job', data: { worker_id: 'w9' }, meta: meta() })))
  await apply([...jobs.map((j) => j.created), ...claims])
  for (const [i, j] of jobs.entries()) {
    t.match(await row(j.ref.id), { state: 'processing', worker_id: 'w9', last_seq: claims[i]!.seq })
    t.same((await row(j.ref.id))!.payload, { z: 1, a: { y: 2.5, b: [3, 'x'] } }, "the payload comes from the batch's job_created")
  }
})

t.test('a batch with a report and the end of its attempt ends with the report shown', async (t) => {
  const { ref, created } = await createJob()
  const claimed = await command(ref, { type: 'claim_job', data: { worker_id: 'w1' }, meta: meta() })
  const progressed = await report(ref, 1, 0.5)
  const failed = await command(ref, {
    type: 'ack_job',
    data: { worker_id: 'w1', status: 'failed', duration_ms: 10, error: { type: 'E', message: 'm', stack_trace: '' } },
    meta: meta(),
  })
  await apply([created, claimed, progressed, failed])
  t.match(await row(ref.id), { state: 'pending', progress: 0.5, error_seq: failed.seq, last_seq: failed.seq })
  t.same((await row(ref.id))!.error, { type: 'E', message: 'm', stack_trace: '' })
})

t.test('a row is not moved past an error it cannot see: the projector brings it in order', async (t) => {
  const { ref, created } = await createJob()
  const claimed = await command(ref, { type: 'claim_job', data: { worker_id: 'w1' }, meta: meta() })
  const failed = await command(ref, {
    type: 'ack_job',
    data: { worker_id: 'w1', status: 'failed', duration_ms: 10, error: { type: 'E', message: 'm', stack_trace: '' } },
    meta: meta(),
  })
  await apply([created, claimed])
  // What the scheduler writes after a promotion that decided nothing: the loaded state, no events.
  await upsertJobRows(sql, [{ ...failed, message: { ...failed.message, events: [] } }])
  t.match(await row(ref.id), { last_seq: claimed.seq, error: null }, 'not moved to a state whose error it does not have')
  await apply([failed])
  t.match(await row(ref.id), { last_seq: failed.seq, error_seq: failed.seq })
})

t.test('messages of other aggregates leave the job list alone', async (t) => {
  const before = await sql`SELECT count(*)::int AS n FROM jobs`
  const { created } = await createJob()
  await upsertJobRows(sql, [{ ...created, message: { ...created.message, aggregate: 'project' } }])
  t.same(await sql`SELECT count(*)::int AS n FROM jobs`, before)
})
