import t from 'tap'
import { InvalidState, WorkerMismatch } from '../../domain/errors.ts'
import { assertHeartbeatAllowed, cascadeOf, isCancelRequested, jobDecider, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { metricsOfJobEvent } from '../../domain/job-metrics.ts'
import { deciderSpec } from '../support/decider-spec.ts'

// Issue 28: cancelling a running job (asked for, then ended by the worker's ack or the end of the
// grace period) and a worker handing a job back without spending its attempt.

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + Math.round(seconds * 1000)).toISOString()
const boom = { type: 'Error', message: 'stopped', stack_trace: '' }

const created = (over: { max_attempts?: number } = {}): JobEvent => {
  const [event] = jobDecider.decide(
    {
      type: 'create_job',
      data: {
        job_id: 'job_1',
        project_id: 'prj_1',
        job_type: 'email',
        queue: 'default',
        payload: {},
        run_at: null,
        max_attempts: over.max_attempts ?? 3,
        timeout_seconds: 300,
        tags: null,
        parent_job_id: null,
        waits_for_parent: false,
        idempotency_key: null,
      },
      meta: { now: at(0) },
    },
    null,
  )
  return event!
}
const claimed = (attempt = 1, worker = 'w1', now = 1): JobEvent => ({
  type: 'job_claimed',
  data: { worker_id: worker, attempt, started_at: at(now) },
})
const cancelRequested = (attempt = 1, now = 5): JobEvent => ({
  type: 'job_cancel_requested',
  data: { worker_id: 'w1', attempt, requested_at: at(now) },
})
const cancelledRunning = (acknowledged: boolean, now: number, attempt = 1): JobEvent => ({
  type: 'job_cancelled',
  data: { reason: 'requested', previous_state: 'processing', cancelled_at: at(now), attempt, acknowledged },
})

const cmd = {
  cancel: (includeRunning: boolean, now = 5): JobCommand => ({
    type: 'cancel_job',
    data: includeRunning ? { include_running: true } : {},
    meta: { now: at(now) },
  }),
  ack: (status: 'succeeded' | 'failed', now = 6, worker = 'w1'): JobCommand => ({
    type: 'ack_job',
    data: { worker_id: worker, status, duration_ms: 100, error: status === 'failed' ? boom : null },
    meta: { now: at(now) },
  }),
  expire: (attempt: number, now = 40): JobCommand => ({ type: 'expire_cancel', data: { attempt }, meta: { now: at(now) } }),
  release: (runAt: string | null = null, now = 6, worker = 'w1'): JobCommand => ({
    type: 'release_job',
    data: { worker_id: worker, run_at: runAt },
    meta: { now: at(now) },
  }),
  reap: (attempt: number, now = 400): JobCommand => ({ type: 'reap_job', data: { attempt, error: boom }, meta: { now: at(now) } }),
  claim: (worker = 'w2', now = 10): JobCommand => ({ type: 'claim_job', data: { worker_id: worker }, meta: { now: at(now) } }),
}

t.test('cancel of a processing job', async (t) => {
  t.test('without include_running it is refused, as the spec says (rules 1 and 4)', async (t) => {
    deciderSpec(t, jobDecider).given([created(), claimed()]).when(cmd.cancel(false)).thenThrows(InvalidState, 'invalid_state')
  })

  t.test('with include_running it is asked to stop: job_cancel_requested naming the attempt; still processing', async (t) => {
    const job = deciderSpec(t, jobDecider).given([created(), claimed()]).when(cmd.cancel(true)).then([cancelRequested()])
    t.equal(job?.state, 'processing')
    t.equal(job?.cancel_requested_at, at(5))
    t.ok(isCancelRequested(job!))
    t.strictSame(metricsOfJobEvent(cancelRequested()).states, {}, 'no state count moves')
  })

  t.test('asked again: nothing more is recorded', async (t) => {
    deciderSpec(t, jobDecider).given([created(), claimed(), cancelRequested()]).when(cmd.cancel(true, 7)).then([])
  })

  t.test('pending and scheduled jobs are cancelled at once with the opt-in too', async (t) => {
    deciderSpec(t, jobDecider)
      .given([created()])
      .when(cmd.cancel(true, 2))
      .then([{ type: 'job_cancelled', data: { reason: 'requested', previous_state: 'pending', cancelled_at: at(2) } }])
  })

  t.test('ended jobs stay refused with the opt-in', async (t) => {
    deciderSpec(t, jobDecider)
      .given([created(), claimed(), { type: 'job_succeeded', data: { worker_id: 'w1', attempt: 1, duration_ms: 1, completed_at: at(2) } }])
      .when(cmd.cancel(true))
      .thenThrows(InvalidState, 'invalid_state')
  })

  t.test('the heartbeat of the worker holding it is still allowed (it answers cancel)', async (t) => {
    const job = jobDecider.evolve(jobDecider.evolve(jobDecider.evolve(null, created()), claimed()), cancelRequested())!
    t.doesNotThrow(() => assertHeartbeatAllowed(job, 'w1'))
  })
})

t.test('the end of a running job whose cancel was asked for', async (t) => {
  const asked = [created(), claimed(), cancelRequested()]

  t.test("the worker's failure ack ends it cancelled, never retried, and cascades to its children", async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given(asked)
      .when(cmd.ack('failed'))
      .then([cancelledRunning(true, 6)])
    t.equal(job?.state, 'cancelled')
    t.strictSame(cascadeOf(cancelledRunning(true, 6)), { kind: 'cancel', reason: 'parent_cancelled' })
    t.strictSame(metricsOfJobEvent(cancelledRunning(true, 6)).states, { processing: -1, cancelled: 1 })
  })

  t.test('a success ack still succeeds: the work was done before the worker heard', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given(asked)
      .when(cmd.ack('succeeded'))
      .then([{ type: 'job_succeeded', data: { worker_id: 'w1', attempt: 1, duration_ms: 100, completed_at: at(6) } }])
    t.equal(job?.state, 'succeeded')
  })

  t.test('another worker is refused', async (t) => {
    deciderSpec(t, jobDecider)
      .given(asked)
      .when(cmd.ack('failed', 6, 'w9'))
      .thenThrows(WorkerMismatch, 'worker_mismatch')
  })

  t.test('the end of the grace period ends it cancelled, unacknowledged', async (t) => {
    deciderSpec(t, jobDecider)
      .given(asked)
      .when(cmd.expire(1))
      .then([cancelledRunning(false, 40)])
  })

  t.test('the grace period names the attempt: another attempt, or a job not asked to stop, is left alone', async (t) => {
    deciderSpec(t, jobDecider).given(asked).when(cmd.expire(2)).then([])
    deciderSpec(t, jobDecider).given([created(), claimed()]).when(cmd.expire(1)).then([])
  })

  t.test('after the grace period a late ack is refused (409 invalid_state)', async (t) => {
    deciderSpec(t, jobDecider)
      .given([...asked, cancelledRunning(false, 40)])
      .when(cmd.ack('failed', 41))
      .thenThrows(InvalidState, 'invalid_state')
    deciderSpec(t, jobDecider)
      .given([...asked, cancelledRunning(false, 40)])
      .when(cmd.ack('succeeded', 41))
      .thenThrows(InvalidState, 'invalid_state')
  })

  t.test('a worker whose heartbeats stopped is not retried but cancelled by the reaper', async (t) => {
    deciderSpec(t, jobDecider)
      .given(asked)
      .when(cmd.reap(1))
      .then([cancelledRunning(false, 400)])
  })

  t.test('a release ends it cancelled', async (t) => {
    deciderSpec(t, jobDecider)
      .given(asked)
      .when(cmd.release())
      .then([cancelledRunning(true, 6)])
  })
})

t.test('release (a worker hands a running job back)', async (t) => {
  t.test('pending again, its attempt not spent: the next claim is the same attempt', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([created(), claimed()])
      .when(cmd.release())
      .then([{ type: 'job_released', data: { worker_id: 'w1', attempt: 1, state: 'pending', run_at: null, released_at: at(6) } }])
    t.match(job, { state: 'pending', attempt: 0, worker_id: null, started_at: null, run_at: null })
    deciderSpec(t, jobDecider)
      .givenState(job)
      .when(cmd.claim())
      .then([claimed(1, 'w2', 10)])
  })

  t.test('on the last attempt the budget is kept too: a failure after the re-claim dead-letters only then', async (t) => {
    const last = [created({ max_attempts: 1 }), claimed()]
    const released: JobEvent = { type: 'job_released', data: { worker_id: 'w1', attempt: 1, state: 'pending', run_at: null, released_at: at(6) } }
    const job = deciderSpec(t, jobDecider)
      .given([...last, released])
      .when(cmd.claim())
      .then([claimed(1, 'w2', 10)])
    t.equal(job?.attempt, 1)
  })

  t.test('with a delay: scheduled until run_at, then promoted as any scheduled job', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([created(), claimed()])
      .when(cmd.release(at(66)))
      .then([{ type: 'job_released', data: { worker_id: 'w1', attempt: 1, state: 'scheduled', run_at: at(66), released_at: at(6) } }])
    t.match(job, { state: 'scheduled', run_at: at(66) })
    deciderSpec(t, jobDecider)
      .givenState(job)
      .when({ type: 'promote_job', data: {}, meta: { now: at(70) } })
      .then([{ type: 'job_promoted', data: { promoted_at: at(70) } }])
    t.strictSame(
      metricsOfJobEvent({ type: 'job_released', data: { worker_id: 'w1', attempt: 1, state: 'scheduled', run_at: at(66), released_at: at(6) } })
        .states,
      { processing: -1, scheduled: 1 },
    )
  })

  t.test('acks and heartbeats of the released attempt are refused', async (t) => {
    const released: JobEvent = { type: 'job_released', data: { worker_id: 'w1', attempt: 1, state: 'pending', run_at: null, released_at: at(6) } }
    deciderSpec(t, jobDecider).given([created(), claimed(), released]).when(cmd.ack('succeeded', 7)).thenThrows(InvalidState, 'invalid_state')
    const job = jobDecider.evolve(jobDecider.evolve(jobDecider.evolve(null, created()), claimed()), released)!
    t.throws(() => assertHeartbeatAllowed(job, 'w1'), InvalidState)
  })

  t.test('only the worker holding a processing job may release it', async (t) => {
    deciderSpec(t, jobDecider)
      .given([created(), claimed()])
      .when(cmd.release(null, 6, 'w9'))
      .thenThrows(WorkerMismatch, 'worker_mismatch')
    deciderSpec(t, jobDecider).given([created()]).when(cmd.release()).thenThrows(InvalidState, 'invalid_state')
  })
})
