import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { InvalidState } from '../../domain/errors.ts'
import { cascadeOf, isClaimable, isExpired, jobDecider, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { metricsOfJobEvent } from '../../domain/job-metrics.ts'
import { deciderSpec } from '../support/decider-spec.ts'
import { createJobData } from '../support/job-commands.ts'

// Issue 28, item 4: a job not claimed within its ttl of becoming due ends cancelled (reason
// `expired`). The clock starts each time the job becomes due: at creation, at run_at, at its
// parent's activation, at a retry's retry_at, at a release, at a retry by hand.

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + Math.round(seconds * 1000)).toISOString()
const boom = { type: 'Error', message: 'boom', stack_trace: '' }

const created = (over: { ttl?: number | null; run_at?: string | null; waits?: boolean } = {}): JobEvent => {
  const [event] = jobDecider.decide(
    {
      type: 'create_job',
      data: createJobData({
        job_id: 'job_1',
        project_id: 'prj_1',
        run_at: over.run_at ?? null,
        parent_job_id: over.waits ? 'job_0' : null,
        waits_for_parent: over.waits ?? false,
        ttl_seconds: over.ttl === undefined ? 60 : over.ttl,
      }),
      meta: { now: at(0) },
    },
    null,
  )
  return event!
}
const claimed = (now: number, attempt = 1): JobEvent => ({ type: 'job_claimed', data: { worker_id: 'w1', attempt, started_at: at(now) } })
const expiredEvent = (now: number, previous: 'pending' | 'scheduled' = 'pending'): JobEvent => ({
  type: 'job_cancelled',
  data: { reason: 'expired', previous_state: previous, cancelled_at: at(now) },
})

const cmd = {
  expire: (now: number): JobCommand => ({ type: 'expire_job', data: {}, meta: { now: at(now) } }),
  claim: (now: number): JobCommand => ({ type: 'claim_job', data: { worker_id: 'w1' }, meta: { now: at(now) } }),
  promote: (now: number): JobCommand => ({ type: 'promote_job', data: {}, meta: { now: at(now) } }),
  activate: (now: number): JobCommand => ({ type: 'activate_child', data: { parent_job_id: 'job_0' }, meta: { now: at(now) } }),
  failAck: (now: number): JobCommand => ({
    type: 'ack_job',
    data: { worker_id: 'w1', status: 'failed', duration_ms: 10, error: boom },
    meta: { now: at(now), random: 0 },
  }),
  release: (now: number, runAt: string | null = null): JobCommand => ({
    type: 'release_job',
    data: { worker_id: 'w1', run_at: runAt },
    meta: { now: at(now) },
  }),
  retry: (now: number): JobCommand => ({ type: 'retry_job', data: {}, meta: { now: at(now) } }),
  cancel: (now: number): JobCommand => ({ type: 'cancel_job', data: {}, meta: { now: at(now) } }),
}

t.test('a job without a ttl: the state and the created event keep the shape they had before expiry existed', async (t) => {
  const event = created({ ttl: null })
  t.notOk('ttl_seconds' in event.data, 'job_created carries no ttl_seconds')
  const job = fold(jobDecider, null, [event])!
  t.notOk('ttl_seconds' in job || 'expires_at' in job || 'cancel_reason' in job, 'no expiry fields in the state')
  deciderSpec(t, jobDecider).given([event]).when(cmd.expire(10_000)).then([], 'never expires')
  t.ok(isClaimable(job, at(10_000)))
})

t.test('created pending: the wait starts at creation', async (t) => {
  const job = fold(jobDecider, null, [created()])!
  t.equal(job.ttl_seconds, 60)
  t.equal(job.expires_at, at(60))
  t.ok(isClaimable(job, at(59.999)), 'claimable before its expiry')
  t.notOk(isClaimable(job, at(60)), 'not claimable at its expiry')
  const spec = deciderSpec(t, jobDecider)
  spec.given([created()]).when(cmd.expire(59)).then([], 'not yet expired: nothing')
  const after = spec
    .given([created()])
    .when(cmd.expire(61))
    .then([expiredEvent(61)])
  t.equal(after?.state, 'cancelled')
  t.equal(after?.cancel_reason, 'expired')
  t.equal(after?.expires_at, at(60), 'keeps the deadline it missed')
})

t.test('the claim refuses a job past its expiry even before the sweep records it', async (t) => {
  deciderSpec(t, jobDecider).given([created()]).when(cmd.claim(60)).thenThrows(InvalidState, 'invalid_state')
  deciderSpec(t, jobDecider)
    .given([created()])
    .when(cmd.claim(30))
    .then([claimed(30)])
})

t.test('created scheduled: the wait starts at run_at, and promotion leaves an expired job to the sweep', async (t) => {
  const scheduled = created({ run_at: at(100) })
  const job = fold(jobDecider, null, [scheduled])!
  t.equal(job.state, 'scheduled')
  t.equal(job.expires_at, at(160))
  const spec = deciderSpec(t, jobDecider)
  spec.given([scheduled]).when(cmd.expire(150)).then([], 'waiting for run_at is not waiting to be claimed')
  spec.given([scheduled]).when(cmd.promote(170)).then([], 'an expired job is not promoted')
  spec
    .given([scheduled])
    .when(cmd.expire(170))
    .then([expiredEvent(170, 'scheduled')])
  const promoted: JobEvent = { type: 'job_promoted', data: { promoted_at: at(101) } }
  spec
    .given([scheduled, promoted])
    .when(cmd.expire(161))
    .then([expiredEvent(161)], 'promoted late, still expires at run_at + ttl')
})

t.test('a continuation: no deadline while it waits for its parent; the wait starts at its activation', async (t) => {
  const child = created({ waits: true })
  const waiting = fold(jobDecider, null, [child])!
  t.equal(waiting.expires_at, undefined)
  const spec = deciderSpec(t, jobDecider)
  spec.given([child]).when(cmd.expire(10_000)).then([], 'a child waiting for its parent never expires')
  const active = spec
    .given([child])
    .when(cmd.activate(500))
    .then([{ type: 'job_activated', data: { parent_job_id: 'job_0', state: 'pending', activated_at: at(500) } }])
  t.equal(active?.expires_at, at(560))
})

t.test('a claim ends the wait; a failed attempt waits again from its retry_at (each wait gets the whole ttl)', async (t) => {
  const running = fold(jobDecider, null, [created(), claimed(10)])!
  t.notOk('expires_at' in running, 'no deadline while it runs')
  const spec = deciderSpec(t, jobDecider)
  spec
    .given([created(), claimed(10)])
    .when(cmd.expire(10_000))
    .then([], 'a running job never expires')
  const [failed] = jobDecider.decide(cmd.failAck(20), running)
  t.equal(failed!.type, 'job_attempt_failed')
  const retryAt = (failed!.data as { retry_at: string }).retry_at
  const retried = fold(jobDecider, running, [failed!])!
  t.equal(retried.expires_at, new Date(Date.parse(retryAt) + 60_000).toISOString())
  t.ok(isExpired(retried, new Date(Date.parse(retryAt) + 60_000).toISOString()))
})

t.test('a release waits again from its run_at (or at once); a retry by hand from the retry', async (t) => {
  const released = deciderSpec(t, jobDecider)
    .given([created(), claimed(10)])
    .when(cmd.release(20, at(30)))
    .then([{ type: 'job_released', data: { worker_id: 'w1', attempt: 1, state: 'scheduled', run_at: at(30), released_at: at(20) } }])
  t.equal(released?.expires_at, at(90))
  const dead: JobEvent = {
    type: 'job_dead_lettered',
    data: { worker_id: 'w1', attempt: 1, error: boom, duration_ms: 1, completed_at: at(20), reaped: false },
  }
  const again = deciderSpec(t, jobDecider)
    .given([created(), claimed(10), dead])
    .when(cmd.retry(1000))
    .then([{ type: 'job_retried', data: { attempt: 1, max_attempts: 3, previous_state: 'dead_letter', retried_at: at(1000) } }])
  t.equal(again?.expires_at, at(1060))
})

t.test('a cancel asked for ends the wait without an expiry reason', async (t) => {
  const job = deciderSpec(t, jobDecider)
    .given([created()])
    .when(cmd.cancel(5))
    .then([{ type: 'job_cancelled', data: { reason: 'requested', previous_state: 'pending', cancelled_at: at(5) } }])
  t.notOk('expires_at' in job! || 'cancel_reason' in job!)
  deciderSpec(t, jobDecider)
    .given([created(), expiredEvent(61)])
    .when(cmd.expire(62))
    .then([], 'an ended job does not expire twice')
})

t.test('an expiry cascades to waiting continuations as a cancel does, and counts as a cancel', async (t) => {
  t.same(cascadeOf(expiredEvent(61)), { kind: 'cancel', reason: 'parent_cancelled' })
  t.same(metricsOfJobEvent(expiredEvent(61)).counts, { cancelled: 1 })
})
