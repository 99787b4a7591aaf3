import { Writable } from 'node:stream'
import { pino } from 'pino'
import t from 'tap'
import type { JobCommand } from '../../domain/job.ts'
import { applyBatchIsolatingFailures, isDataError, projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { jobList } from '../../projections/job-list.ts'
import type { ProjectionFailure } from '../../projections/projection-failures.ts'
import { jobHandler } from '../../streams/aggregates.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { metricsRegistry } from '../../services/infrastructure/metrics.ts'
import { claimForPolls } from '../../services/use-cases/jobs/claimer.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { eventually, httpRequest, startHarness, type Harness } from '../support/harness.ts'
import { createJobData } from '../support/job-commands.ts'

// Issue 23, item 2: a message a read model cannot hold (here U+0000 in a payload, which a log
// written before the API refused it may hold) costs neither its job nor the rest of its batch,
// and is visible: projection_failures with its project and subject, a log line, a counter, the
// readiness probe.

/** Appends a job as an older version of the API would have, bypassing today's edge. */
function jobAppender(h: Harness) {
  let n = 0
  return async (data: { job_type?: string; payload?: Record<string, unknown>; queue?: string }): Promise<EventRecord> => {
    const id = `job_01J00000000000000000000${String(n++).padStart(3, '0')}`
    const command: JobCommand = {
      type: 'create_job',
      data: createJobData({ job_id: id, project_id: h.projectId, ...data }),
      meta: { now: new Date().toISOString() },
    }
    const ref = jobHandler.ref(h.projectId, id)
    return (await jobHandler.decide(h.runtime, ref, command)).record as EventRecord
  }
}

// U+0000 is what such a log holds: an unpaired surrogate does not even survive the log's encoding.
const poisoned = { 'k\u0000': 'v\u0000', nested: ['a\u0000b'] }
const asStored = { 'k\ufffd': 'v\ufffd', nested: ['a\ufffdb'] }

t.test('one bad message: its job is written from a storable copy, the batch is applied in one transaction, the failure recorded', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: [] })
  const { sql } = h.runtime
  const append = jobAppender(h)
  // Which transaction wrote each job row: isolation must not cost a transaction per message.
  await sql`CREATE TABLE written_by (id text, xid bigint)`
  await sql`CREATE FUNCTION note_writer() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO written_by VALUES (NEW.id, txid_current()); RETURN NEW; END $$`
  await sql`CREATE TRIGGER note_writer AFTER INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION note_writer()`

  const records = [
    await append({ job_type: 'fine', queue: 'q' }),
    await append({ job_type: 'poisoned', queue: 'q', payload: poisoned }),
    await append({ job_type: 'also-fine', queue: 'q' }),
  ]
  const bad = records[1]!
  const reported: ProjectionFailure[] = []
  const through = await applyBatchIsolatingFailures(sql, projections, records, (f) => reported.push(f))
  t.equal(through, records[2]!.seq, 'the checkpoint reaches the end of the batch')
  t.equal(await projectedThrough(sql, projections), records[2]!.seq)

  const rows = await sql<{ id: string; job_type: string; payload: unknown; last_seq: number; sanitised_seq: number | null }[]>`
    SELECT id, job_type, payload, last_seq, sanitised_seq FROM jobs ORDER BY id`
  t.same(
    rows.map((r) => r.job_type),
    ['fine', 'poisoned', 'also-fine'],
    'every job has its row, the poisoned one too',
  )
  t.strictSame(rows[1]!.payload, asStored, 'the poisoned row holds the storable copy of its payload')
  t.equal(rows[1]!.sanitised_seq, bad.seq, 'and is marked as a copy')
  t.equal(rows[0]!.sanitised_seq, null, 'the others are not')
  const writers = await sql<{ xid: number }[]>`SELECT DISTINCT xid FROM written_by`
  t.equal(writers.length, 1, 'all three rows were written by one transaction')

  const failures = await sql`SELECT seq, projection, subject, project_id, projected, error_code FROM projection_failures`
  t.same(failures, [
    { seq: bad.seq, projection: 'job-list', subject: bad.subject, project_id: h.projectId, projected: 'sanitised', error_code: '22P05' },
  ])
  t.same(
    reported.map((f) => [f.record.seq, f.projection, f.projected]),
    [[bad.seq, 'job-list', 'sanitised']],
    'the failure is reported once, after the commit',
  )

  const again = await applyBatchIsolatingFailures(sql, projections, records, (f) => reported.push(f))
  t.equal(again, records[2]!.seq, 're-delivery of the same batch is harmless')
  t.equal(reported.length, 1, 'a re-delivered bad message is skipped by the checkpoint, not recorded again')
})

t.test('a storable copy is shown but never decided on: a claim loads the job from the log', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: [], suffix: '_claim' })
  const { sql } = h.runtime
  const bad = await jobAppender(h)({ job_type: 'poisoned', queue: 'copies', payload: poisoned })
  await applyBatchIsolatingFailures(sql, projections, [bad], () => undefined)

  const pending = await jobList.pendingQueue(sql, h.projectId, 'copies', 10, 1 << 20)
  t.equal(pending.rows.length, 1, 'the job is pending in the read model')
  t.equal(pending.rows[0]!.job, null, 'the ready index is not handed the copy as the job state')

  const jobs = new JobService(h.runtime)
  const polls = [{ workerId: 'w', capacity: 1 }]
  const claimed = (await claimForPolls(h.runtime, jobs, { projectId: h.projectId, queues: ['copies'], jobTypes: null }, polls))[0]?.[0]
  t.ok(claimed, 'the job is claimed from its row')
  t.strictSame(claimed!.payload, poisoned, 'the worker gets the payload the log holds')
  t.equal(claimed!.job.state, 'processing')
  const logged = await jobs.get(h.projectId, bad.message.aggregate_id)
  t.equal(logged.job.state, 'processing')
  t.strictSame(logged.job.payload, poisoned, 'the log still holds the real payload, not the copy')
})

t.test('the live projector: the job is listed, and the failure is logged, counted and shown by readiness', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], suffix: '_live' })
  const lines: Array<Record<string, unknown>> = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)))
      done()
    },
  })
  h.runtime.log = pino({ level: 'error' }, sink)
  const counted = async () =>
    (await metricsRegistry.getSingleMetric('jobsvc_projection_failures_total')!.get()).values.find(
      (v) => v.labels.projection === 'job-list' && v.labels.projected === 'sanitised',
    )?.value ?? 0
  const before = await counted()

  const bad = await jobAppender(h)({ job_type: 'poisoned', queue: 'live', payload: poisoned })
  const listed = await eventually(
    async () => {
      const res = await h.request('GET', '/jobsvc/v1/jobs?queue=live')
      return res.body.data?.length === 1 ? res.body.data[0] : null
    },
    15_000,
    'the poisoned job in the list',
  )
  t.equal(listed.id, bad.message.aggregate_id, 'the job is listed')
  t.strictSame(listed.payload, asStored, 'with its storable copy')

  const ready = await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')
  t.equal(ready.status, 200, 'a projection failure does not make the process unready')
  t.match(ready.body.projection_failures, { messages: 1, subjects: 1, latest: [{ seq: bad.seq, projection: 'job-list', projected: 'sanitised' }] })
  t.notOk(JSON.stringify(ready.body).includes(h.projectId), 'the public probe names no project')

  t.equal((await counted()) - before, 1, 'jobsvc_projection_failures_total counted it')
  const line = lines.find((l) => l.seq === bad.seq)
  t.match(
    line,
    { project_id: h.projectId, subject: bad.subject, projection: 'job-list', projected: 'sanitised' },
    'an error line names project and subject',
  )
})

t.test('only errors about the data itself count as unstorable', async (t) => {
  t.ok(isDataError({ code: '22021' }), 'invalid byte sequence')
  t.ok(isDataError({ code: '23505' }), 'unique violation')
  t.ok(isDataError({ code: '54000' }), 'program limit')
  t.notOk(isDataError({ code: '57P01' }), 'admin shutdown is transient')
  t.notOk(isDataError({ code: 'ECONNREFUSED' }), 'a refused connection is transient')
  t.notOk(isDataError(new Error('x')))
})
