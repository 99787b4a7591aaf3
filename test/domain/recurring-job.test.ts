import t from 'tap'
import { RecurringJobTypeConflict } from '../../domain/errors.ts'
import {
  recurringIdFor,
  recurringJobDecider,
  type RecurringJobCommand,
  type RecurringJobEvent,
  type RecurringSchedule,
} from '../../domain/recurring-job.ts'
import { sampleRecurringSchedule } from '../support/aggregate-samples.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const first = '2025-03-01T12:00:00.000Z'
const later = '2025-03-02T08:30:00.000Z'

const schedule = sampleRecurringSchedule

function upsert(over: Partial<RecurringSchedule> = {}, now = first): RecurringJobCommand {
  return { type: 'upsert_recurring', data: { ...schedule, ...over, recurring_id: 'rjob_nightly-report', project_id: 'prj_1' }, meta: { now } }
}

function upserted(over: Partial<RecurringSchedule> = {}, now = first): RecurringJobEvent {
  return { type: 'recurring_upserted', data: { ...schedule, ...over, recurring_id: 'rjob_nightly-report', project_id: 'prj_1', upserted_at: now } }
}

t.test('a new schedule is upserted', async (t) => {
  const recurring = deciderSpec(t, recurringJobDecider).given([]).when(upsert()).then([upserted()])
  t.same(recurring, {
    ...schedule,
    id: 'rjob_nightly-report',
    project_id: 'prj_1',
    created_at: first,
    updated_at: first,
    status: 'active',
    next_run_at: null,
    last_occurrence_at: null,
    last_run_at: null,
    last_job_id: null,
  })
})

t.test('registering the same schedule again records nothing', async (t) => {
  deciderSpec(t, recurringJobDecider).given([upserted()]).when(upsert({}, later)).then([])
})

for (const [field, value] of [
  ['cron_expression', '*/5 * * * *'],
  ['queue', 'default'],
  ['timezone', 'UTC'],
  ['max_attempts', 5],
  ['timeout_seconds', 60],
] as const) {
  t.test(`a changed ${field} updates the schedule and keeps created_at`, async (t) => {
    const recurring = deciderSpec(t, recurringJobDecider)
      .given([upserted()])
      .when(upsert({ [field]: value }, later))
      .then([upserted({ [field]: value }, later)])
    t.equal(recurring?.[field], value)
    t.equal(recurring?.created_at, first)
    t.equal(recurring?.updated_at, later)
  })
}

t.test('another job type under the same id is a conflict', async (t) => {
  // `Nightly Report` slugs to the same id as `nightly.report`.
  t.equal(recurringIdFor('Nightly Report'), recurringIdFor('nightly.report'))
  deciderSpec(t, recurringJobDecider)
    .given([upserted()])
    .when(upsert({ job_type: 'Nightly Report' }, later))
    .thenThrows(RecurringJobTypeConflict, 'recurring_job_type_conflict')
})

t.test('recurringIdFor: rjob_ and a slug of the job type', async (t) => {
  t.equal(recurringIdFor('email'), 'rjob_email')
  t.equal(recurringIdFor('Send.Email'), 'rjob_send-email', 'lowercased, dots become dashes')
  t.equal(recurringIdFor('reports:nightly  v2'), 'rjob_reports-nightly-v2', 'each run of other characters is one dash')
  t.equal(recurringIdFor('__cleanup__'), 'rjob_cleanup', 'no leading or trailing dashes')
  t.equal(recurringIdFor('job_type-42'), 'rjob_job-type-42')
  t.equal(recurringIdFor('Ünïcode'), 'rjob_n-code', 'non-ASCII letters are not kept')
  t.equal(recurringIdFor('***'), 'rjob_job', 'a type with no letters or digits still gets an id')
})

t.test('evolve on a missing state: recurring_upserted builds it, any other event throws', async (t) => {
  evolveOnMissingState(t, recurringJobDecider, upserted(), [
    { type: 'recurring_rescheduled', data: { next_run_at: later, rescheduled_at: first } },
    { type: 'recurring_fired', data: { occurrence_at: later, job_id: 'job_1', skipped_reason: null, fired_at: later, next_run_at: null } },
    { type: 'recurring_deleted', data: { recurring_id: 'rjob_nightly-report', deleted_at: later } },
  ])
})
