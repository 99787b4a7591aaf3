import t from 'tap'
import { jobDecider, type JobCommand } from '../../domain/job.ts'
import { applyBatchIsolatingFailures, isDataError, projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { handleCommand } from '../../streams/handle-command.ts'
import { startHarness } from '../support/harness.ts'
import { createJobData } from '../support/job-commands.ts'

t.test('a message the read models cannot hold is recorded and skipped, not retried forever', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: [] })
  const { store, sql } = h.runtime
  let n = 0
  const create = async (jobType: string): Promise<EventRecord> => {
    const id = `job_01J0000000000000000000000${n++}`
    const command: JobCommand = {
      type: 'create_job',
      data: createJobData({ job_id: id, project_id: h.projectId, job_type: jobType }),
      meta: { now: new Date().toISOString() },
    }
    return (await handleCommand(store, jobDecider, { aggregate: 'job', projectId: h.projectId, id }, command, () => `evt_${h.runtime.newUlid()}`))
      .record as EventRecord
  }
  // The API refuses U+0000 in text fields; this message comes from elsewhere (an older version, a bug).
  const records = [await create('fine'), await create('bad\u0000type'), await create('also-fine')]
  const skipped: number[] = []
  const through = await applyBatchIsolatingFailures(sql, projections, records, (r) => skipped.push(r.seq))
  t.equal(through, records[2]!.seq, 'the checkpoint reaches the end of the batch')
  t.same(skipped, [records[1]!.seq], 'only the unstorable message is skipped')
  const rows = await sql<{ job_type: string }[]>`SELECT job_type FROM jobs ORDER BY id`
  t.same(
    rows.map((r) => r.job_type),
    ['fine', 'also-fine'],
    'the messages around it are applied',
  )
  const failures = await sql<{ seq: number; error_code: string }[]>`SELECT seq, error_code FROM projection_failures`
  t.same(
    failures.map((f) => f.seq),
    [records[1]!.seq],
  )
  t.match(failures[0]!.error_code, /^22/, 'the failure keeps its SQLSTATE')
  t.equal(await projectedThrough(sql, projections), records[2]!.seq)

  const again = await applyBatchIsolatingFailures(sql, projections, records, (r) => skipped.push(r.seq))
  t.equal(again, records[2]!.seq, 're-delivery of the same batch is harmless')
  t.equal(skipped.length, 1, 'a re-delivered poison message is skipped by the checkpoint, not recorded again')
})

t.test('only errors about the data itself count as unstorable', async (t) => {
  t.ok(isDataError({ code: '22021' }), 'invalid byte sequence')
  t.ok(isDataError({ code: '23505' }), 'unique violation')
  t.ok(isDataError({ code: '54000' }), 'program limit')
  t.notOk(isDataError({ code: '57P01' }), 'admin shutdown is transient')
  t.notOk(isDataError({ code: 'ECONNREFUSED' }), 'a refused connection is transient')
  t.notOk(isDataError(new Error('x')))
})
