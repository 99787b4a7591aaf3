import t from 'tap'
import { InvalidPriority, InvalidState, JobNotFound } from '../../domain/errors.ts'
import { claimRankAtMs, jobDecider, type Job, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { metricsOfJobEvent } from '../../domain/job-metrics.ts'
import { fold } from '../../domain/decider.ts'
import { deciderSpec } from '../support/decider-spec.ts'

// Issue 28, item 5: a job's claim order offset, given at creation and changed while it waits.

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + Math.round(seconds * 1000)).toISOString()

const createCommand = (priority?: number, runAt: string | null = null): JobCommand => ({
  type: 'create_job',
  data: {
    job_id: 'job_1',
    project_id: 'prj_1',
    job_type: 'email',
    queue: 'default',
    payload: {},
    run_at: runAt,
    max_attempts: 3,
    timeout_seconds: 300,
    tags: null,
    parent_job_id: null,
    waits_for_parent: false,
    idempotency_key: null,
    ...(priority === undefined ? {} : { priority }),
  },
  meta: { now: at(0) },
})
const created = (priority?: number, runAt: string | null = null): JobEvent => jobDecider.decide(createCommand(priority, runAt), null)[0]!
const setPriority = (priority: number, now = 5, operationId?: string): JobCommand => ({
  type: 'set_priority',
  data: { priority, ...(operationId === undefined ? {} : { operation_id: operationId }) },
  meta: { now: at(now) },
})
const changed = (priority: number, previous: number, state: 'pending' | 'scheduled' = 'pending', now = 5): JobEvent => ({
  type: 'job_priority_changed',
  data: { priority, previous_priority: previous, state, changed_at: at(now) },
})
const claimed: JobEvent = { type: 'job_claimed', data: { worker_id: 'w1', attempt: 1, started_at: at(1) } }
const stateOf = (events: JobEvent[]) => fold(jobDecider, null, events) as Job

t.test('a job created without a priority, or with 0, records none and its state has none', async (t) => {
  for (const priority of [undefined, 0]) {
    const event = created(priority)
    t.notOk('priority' in event.data, `the job_created of ${String(priority)} has no priority`)
    t.notOk('priority' in stateOf([event]), 'nor has the state: the job detail keeps the shape of the spec')
  }
})

t.test('a non-zero priority is recorded at creation and ranks the job that many seconds before its due time', async (t) => {
  const event = created(60)
  t.equal((event.data as { priority?: number }).priority, 60)
  const job = stateOf([event])
  t.equal(job.priority, 60)
  t.equal(claimRankAtMs(job), t0 - 60_000)
  const later = stateOf([created(-600, at(30))])
  t.equal(later.state, 'scheduled', 'a priority does not make a job due sooner')
  t.equal(claimRankAtMs(later), t0 + 630_000, 'ranked at its run_at + 600 s')
})

t.test('set_priority: a pending or scheduled job records job_priority_changed', async (t) => {
  const spec = deciderSpec(t, jobDecider)
  const job = spec
    .given([created()])
    .when(setPriority(120))
    .then([changed(120, 0)])
  t.equal(job?.priority, 120)
  t.equal(job?.state, 'pending', 'the job keeps its state')
  spec
    .given([created(10, at(60))])
    .when(setPriority(-30))
    .then([changed(-30, 10, 'scheduled')])
  const back = spec
    .given([created(10)])
    .when(setPriority(0))
    .then([changed(0, 10)])
  t.equal(back?.priority, 0, 'a job changed back to 0 shows it: its priority was set')
  spec
    .given([created()])
    .when(setPriority(5, 5, 'op_1'))
    .then([{ type: 'job_priority_changed', data: { priority: 5, previous_priority: 0, state: 'pending', changed_at: at(5), operation_id: 'op_1' } }])
})

t.test('set_priority: the same priority again changes nothing', async (t) => {
  const spec = deciderSpec(t, jobDecider)
  spec
    .given([created(60)])
    .when(setPriority(60))
    .then([])
  spec
    .given([created(), changed(0, 0)])
    .when(setPriority(0))
    .then([])
})

t.test('set_priority: refused for a job that is running or ended, out of range, or unknown', async (t) => {
  const spec = deciderSpec(t, jobDecider)
  spec.given([created(), claimed]).when(setPriority(10)).thenThrows(InvalidState, 'invalid_state')
  spec
    .given([created(), claimed, { type: 'job_succeeded', data: { worker_id: 'w1', attempt: 1, duration_ms: 5, completed_at: at(2) } }])
    .when(setPriority(10))
    .thenThrows(InvalidState, 'invalid_state')
  spec
    .given([created(), { type: 'job_cancelled', data: { reason: 'requested', previous_state: 'pending', cancelled_at: at(2) } }])
    .when(setPriority(10))
    .thenThrows(InvalidState, 'invalid_state')
  for (const bad of [601, -601, 1.5, Number.NaN]) {
    spec.given([created()]).when(setPriority(bad)).thenThrows(InvalidPriority, 'invalid_request', `${bad} is refused`)
  }
  spec.given([]).when(setPriority(10)).thenThrows(JobNotFound, 'job_not_found')
})

t.test('a priority survives a claim, a failed attempt and a retry by hand', async (t) => {
  const failed: JobEvent = {
    type: 'job_attempt_failed',
    data: {
      worker_id: 'w1',
      attempt: 1,
      error: { type: 'E', message: 'm', stack_trace: '' },
      duration_ms: 5,
      retry_at: at(40),
      failed_at: at(2),
      reaped: false,
    },
  }
  const job = stateOf([created(300), claimed, failed])
  t.equal(job.priority, 300)
  t.equal(claimRankAtMs(job), t0 + 40_000 - 300_000, "a retry's backoff ends at its run_at; it ranks 300 s before that")
})

t.test('job_priority_changed moves no state in the metrics', async (t) => {
  t.strictSame(
    metricsOfJobEvent(changed(5, 0)).states,
    metricsOfJobEvent({ type: 'job_child_attached', data: { child_job_id: 'c', attached_at: at(1) } }).states,
  )
})
