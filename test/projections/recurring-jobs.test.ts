import t from 'tap'
import { ulid } from 'ulid'
import type { RecurringJobCommand, RecurringSchedule } from '../../domain/recurring-job.ts'
import { applyRecurringRows, recurringJobs } from '../../projections/recurring-jobs.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { recurringHandler } from '../../streams/aggregates.ts'
import { sampleRecurringSchedule } from '../support/aggregate-samples.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, recurringJobs)

const projectId = 'prj_recurring'
const schedule: RecurringSchedule = { ...sampleRecurringSchedule, payload: { z: 1, a: [2] } }
const day = (n: number) => `2024-06-${String(n).padStart(2, '0')}T00:00:00.000Z`

const decide = (ref: Ref<'recurring'>, command: RecurringJobCommand) => bench.decide(recurringHandler, ref, command)
const upsert = (ref: Ref<'recurring'>, n: number, over: Partial<RecurringSchedule> = {}) =>
  decide(ref, {
    type: 'upsert_recurring',
    data: { ...schedule, ...over, recurring_id: ref.id, project_id: projectId, next_run_at: day(n + 1) },
    meta: { now: day(n) },
  })
const fire = (ref: Ref<'recurring'>, n: number, jobId: string | null) =>
  decide(ref, {
    type: 'record_fire',
    data: { occurrence_at: day(n), job_id: jobId, skipped_reason: jobId === null ? 'monthly_allowance_exceeded' : null, next_run_at: day(n + 1) },
    meta: { now: day(n) },
  })
const reschedule = (ref: Ref<'recurring'>, n: number) => decide(ref, { type: 'reschedule', data: { next_run_at: day(n) }, meta: { now: day(n - 1) } })
const remove = (ref: Ref<'recurring'>, n: number) => decide(ref, { type: 'delete_recurring', data: { recurring_id: ref.id }, meta: { now: day(n) } })

const newSchedule = (): Ref<'recurring'> => recurringHandler.ref(projectId, `rjob_${ulid().toLowerCase()}`)
const row = async (id: string) => (await bench.sql`SELECT * FROM recurring_jobs WHERE project_id = ${projectId} AND id = ${id}`)[0]
const iso = (d: Date | null) => d?.toISOString() ?? null

t.test('a schedule row follows the schedule: upserted, fired, skipped, rescheduled, changed', async (t) => {
  const ref = newSchedule()
  const upserted = await upsert(ref, 1)
  await bench.project([upserted])
  const r = await row(ref.id)
  t.match(r, { status: 'active', job_type: 'nightly.report', cron_expression: '0 2 * * *', queue: 'reports', timezone: 'Europe/Paris' })
  t.match(r, { max_attempts: 3, timeout_seconds: 600, last_run_at: null, last_occurrence_at: null, last_job_id: null, last_seq: upserted.seq })
  t.same(r!.payload, { z: 1, a: [2] })
  t.equal(iso(r!.next_run_at), day(2))

  const fired = await fire(ref, 2, 'job_1')
  await bench.project([fired])
  const afterFire = await row(ref.id)
  t.match(afterFire, { last_job_id: 'job_1', last_seq: fired.seq })
  t.same([iso(afterFire!.last_occurrence_at), iso(afterFire!.last_run_at), iso(afterFire!.next_run_at)], [day(2), day(2), day(3)])

  const skipped = await fire(ref, 3, null)
  const rescheduled = await reschedule(ref, 5)
  const changed = await upsert(ref, 4, { cron_expression: '0 3 * * *' })
  await bench.project([skipped, rescheduled, changed])
  const after = await row(ref.id)
  t.match(after, { cron_expression: '0 3 * * *', last_job_id: 'job_1', last_seq: changed.seq }, 'one batch: the newest message wins')
  t.same([iso(after!.last_occurrence_at), iso(after!.last_run_at)], [day(3), day(2)], 'a skipped occurrence counts as fired, not as run')
  t.equal(iso(after!.created_at), day(1), 'a change keeps the creation time')
})

t.test('a deleted schedule keeps its row as a tombstone that an older snapshot cannot revive', async (t) => {
  const ref = newSchedule()
  const upserted = await upsert(ref, 1)
  const deleted = await remove(ref, 2)
  await bench.project([upserted, deleted])
  t.match(await row(ref.id), { status: 'deleted', next_run_at: null, last_seq: deleted.seq })
  await applyRecurringRows(bench.sql, [upserted])
  t.match(await row(ref.id), { status: 'deleted', last_seq: deleted.seq }, 'written late by a use case, the upsert changes nothing')
})

t.test('re-delivering the same sequences changes nothing', async (t) => {
  const ref = newSchedule()
  await bench.redeliveryChangesNothing(t, [await upsert(ref, 1), await fire(ref, 2, 'job_2')])
})
