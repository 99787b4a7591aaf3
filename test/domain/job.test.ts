import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { InvalidState, JobNotFound, ParentTerminal, WorkerMismatch } from '../../domain/errors.ts'
import {
  assertHeartbeatAllowed,
  cascadeOf,
  errorOf,
  isAttemptStale,
  jobDecider,
  resultOf,
  toJobView,
  upgradeJob,
  type Job,
  type JobCommand,
  type JobError,
  type JobEvent,
} from '../../domain/job.ts'
import { failedJobState } from '../support/job-commands.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
/** The instant `seconds` after t0. */
const at = (seconds: number) => new Date(t0 + Math.round(seconds * 1000)).toISOString()

type CreateData = Extract<JobCommand, { type: 'create_job' }>['data']

const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'

const boom: JobError = { type: 'TimeoutError', message: 'smtp timed out', stack_trace: 'at send (mail.js:1)' }
const reaperError: JobError = { type: 'StaleHeartbeat', message: 'no heartbeat', stack_trace: '' }

function createData(over: Partial<CreateData> = {}): CreateData {
  return {
    job_id: 'job_1',
    project_id: 'prj_1',
    job_type: 'email',
    queue: 'default',
    payload: { to: 'a@b.c' },
    run_at: null,
    max_attempts: 3,
    timeout_seconds: 300,
    tags: null,
    parent_job_id: null,
    waits_for_parent: false,
    idempotency_key: null,
    ...over,
  }
}

const cmd = {
  create: (over: Partial<CreateData> = {}, now = 0): JobCommand => ({ type: 'create_job', data: createData(over), meta: { now: at(now) } }),
  attach: (child: string, now = 0): JobCommand => ({ type: 'attach_child', data: { child_job_id: child }, meta: { now: at(now) } }),
  claim: (worker = 'w1', now = 0): JobCommand => ({ type: 'claim_job', data: { worker_id: worker }, meta: { now: at(now) } }),
  ack: (
    status: 'succeeded' | 'failed',
    opts: { worker?: string; now?: number; random?: number; duration_ms?: number | null; error?: JobError | null; result?: unknown } = {},
  ): JobCommand => ({
    type: 'ack_job',
    data: {
      worker_id: opts.worker ?? 'w1',
      status,
      duration_ms: opts.duration_ms === undefined ? 1200 : opts.duration_ms,
      error: opts.error === undefined ? (status === 'failed' ? boom : null) : opts.error,
      ...(opts.result === undefined ? {} : { result: opts.result }),
    },
    meta: { now: at(opts.now ?? 0), ...(opts.random === undefined ? {} : { random: opts.random }) },
  }),
  cancel: (now = 0): JobCommand => ({ type: 'cancel_job', data: {}, meta: { now: at(now) } }),
  retry: (now = 0): JobCommand => ({ type: 'retry_job', data: {}, meta: { now: at(now) } }),
  promote: (now = 0): JobCommand => ({ type: 'promote_job', data: {}, meta: { now: at(now) } }),
  activate: (parent = 'job_parent', now = 0): JobCommand => ({
    type: 'activate_child',
    data: { parent_job_id: parent },
    meta: { now: at(now) },
  }),
  cancelByParent: (reason: 'parent_cancelled' | 'parent_dead_lettered', now = 0): JobCommand => ({
    type: 'cancel_by_parent',
    data: { reason },
    meta: { now: at(now) },
  }),
  reap: (attempt: number, now = 0, random?: number): JobCommand => ({
    type: 'reap_job',
    data: { attempt, error: reaperError },
    meta: { now: at(now), ...(random === undefined ? {} : { random }) },
  }),
}

/** The one event `command` decides on a fresh aggregate. */
function createdEvent(over: Partial<CreateData> = {}, now = 0): JobEvent {
  const [event] = jobDecider.decide(cmd.create(over, now), null)
  if (event === undefined) throw new Error('create_job decided nothing')
  return event
}

const ev = {
  created: createdEvent,
  claimed: (attempt = 1, worker = 'w1', now = 0): JobEvent => ({
    type: 'job_claimed',
    data: { worker_id: worker, attempt, started_at: at(now) },
  }),
  succeeded: (attempt = 1, now = 0, worker = 'w1'): JobEvent => ({
    type: 'job_succeeded',
    data: { worker_id: worker, attempt, duration_ms: 1200, completed_at: at(now) },
  }),
  attemptFailed: (attempt: number, now: number, retryAfterSeconds: number): JobEvent => ({
    type: 'job_attempt_failed',
    data: { worker_id: 'w1', attempt, error: boom, duration_ms: 1200, retry_at: at(now + retryAfterSeconds), failed_at: at(now), reaped: false },
  }),
  deadLettered: (attempt: number, now = 0): JobEvent => ({
    type: 'job_dead_lettered',
    data: { worker_id: 'w1', attempt, error: boom, duration_ms: 1200, completed_at: at(now), reaped: false },
  }),
  progress: (progress: number, worker = 'w1', now = 0): JobEvent => ({
    type: 'job_progressed',
    data: { worker_id: worker, progress, reported_at: at(now) },
  }),
  cancelled: (now = 0, previous_state: 'pending' | 'scheduled' = 'pending'): JobEvent => ({
    type: 'job_cancelled',
    data: { reason: 'requested', previous_state, cancelled_at: at(now) },
  }),
  promoted: (now: number): JobEvent => ({ type: 'job_promoted', data: { promoted_at: at(now) } }),
}

function failedJob(attempt: number, maxAttempts: number): Job {
  return failedJobState({ attempt, maxAttempts, error: boom, createdAt: at(0), startedAt: at(10), completedAt: at(11) })
}

/** Event histories ending in each state the decider can reach. */
const histories: Record<'pending' | 'scheduled' | 'processing' | 'succeeded' | 'cancelled' | 'dead_letter', JobEvent[]> = {
  pending: [ev.created()],
  scheduled: [ev.created({ run_at: at(60) })],
  processing: [ev.created(), ev.claimed()],
  succeeded: [ev.created(), ev.claimed(), ev.succeeded()],
  cancelled: [ev.created(), ev.cancelled()],
  dead_letter: [ev.created({ max_attempts: 1 }), ev.claimed(), ev.deadLettered(1)],
}

t.test('create job', async (t) => {
  t.test('without run_at or parent: pending', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const job = spec
      .given([])
      .when(cmd.create({ tags: { team: 'growth' }, idempotency_key: 'k-1', traceparent }, 5))
      .then([
        {
          type: 'job_created',
          data: {
            job_id: 'job_1',
            project_id: 'prj_1',
            job_type: 'email',
            queue: 'default',
            payload: { to: 'a@b.c' },
            state: 'pending',
            run_at: null,
            max_attempts: 3,
            timeout_seconds: 300,
            tags: { team: 'growth' },
            parent_job_id: null,
            waiting_for_parent: false,
            idempotency_key: 'k-1',
            traceparent,
            created_at: at(5),
          },
        },
      ])
    t.same(job, {
      id: 'job_1',
      project_id: 'prj_1',
      state: 'pending',
      job_type: 'email',
      queue: 'default',
      created_at: at(5),
      run_at: null,
      started_at: null,
      completed_at: null,
      attempt: 0,
      max_attempts: 3,
      timeout_seconds: 300,
      progress: null,
      duration_ms: null,
      error_seq: null,
      tags: { team: 'growth' },
      parent_job_id: null,
      waiting_for_parent: false,
      children: [],
      worker_id: null,
      idempotency_key: 'k-1',
      traceparent,
      updated_at: at(5),
    })
  })

  t.test('an invalid traceparent is dropped, not refused', async (t) => {
    const [created] = jobDecider.decide(cmd.create({ traceparent: traceparent.toUpperCase() }), null)
    t.equal(created?.type === 'job_created' && created.data.traceparent, null)
  })

  t.test('a job_created written before trace context was kept evolves to traceparent null', async (t) => {
    const [created] = jobDecider.decide(cmd.create(), null)
    if (created?.type !== 'job_created') throw new Error('expected job_created')
    const { traceparent: _dropped, ...legacy } = created.data
    t.equal(jobDecider.evolve(null, { type: 'job_created', data: legacy })?.traceparent, null)
  })

  t.test('with a future run_at: scheduled, run_at echoed', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([])
      .when(cmd.create({ run_at: at(60) }))
      .then([ev.created({ run_at: at(60) })])
    t.equal(job?.state, 'scheduled')
    t.equal(job?.run_at, at(60))
    t.equal(job?.waiting_for_parent, false)
  })

  t.test('with a run_at already past (or now): pending, run_at echoed', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    t.equal(
      spec
        .given([])
        .when(cmd.create({ run_at: at(-60) }))
        .then([ev.created({ run_at: at(-60) })])?.state,
      'pending',
    )
    t.equal(
      spec
        .given([])
        .when(cmd.create({ run_at: at(0) }))
        .then([ev.created({ run_at: at(0) })])?.state,
      'pending',
    )
  })

  t.test('under a parent that has yet to succeed: scheduled, waiting for the parent', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([])
      .when(cmd.create({ parent_job_id: 'job_parent', waits_for_parent: true }))
      .then([ev.created({ parent_job_id: 'job_parent', waits_for_parent: true })])
    t.equal(job?.state, 'scheduled')
    t.equal(job?.waiting_for_parent, true)
    t.equal(job?.parent_job_id, 'job_parent')
  })

  t.test('under a parent that already succeeded: pending, runs immediately', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([])
      .when(cmd.create({ parent_job_id: 'job_parent', waits_for_parent: false }))
      .then([ev.created({ parent_job_id: 'job_parent' })])
    t.equal(job?.state, 'pending')
    t.equal(job?.waiting_for_parent, false)
  })

  t.test('waiting for a parent with its own future run_at: scheduled and waiting', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([])
      .when(cmd.create({ parent_job_id: 'job_parent', waits_for_parent: true, run_at: at(60) }))
      .then([ev.created({ parent_job_id: 'job_parent', waits_for_parent: true, run_at: at(60) })])
    t.equal(job?.state, 'scheduled')
    t.equal(job?.waiting_for_parent, true)
  })

  t.test('a second create of the same job is refused', async (t) => {
    deciderSpec(t, jobDecider).given([ev.created()]).when(cmd.create()).thenThrows(InvalidState, 'invalid_state')
  })
})

t.test('attach child (create job under a parent, decided on the parent first)', async (t) => {
  for (const state of ['pending', 'scheduled', 'processing'] as const) {
    t.test(`a ${state} parent records the child`, async (t) => {
      const parent = deciderSpec(t, jobDecider)
        .given(histories[state])
        .when(cmd.attach('job_child', 7))
        .then([{ type: 'job_child_attached', data: { child_job_id: 'job_child', attached_at: at(7) } }])
      t.same(parent?.children, ['job_child'])
      t.equal(parent?.state, state, 'the parent keeps its state')
    })
  }

  t.test('attaching the same child twice records it once', async (t) => {
    const attached: JobEvent = { type: 'job_child_attached', data: { child_job_id: 'job_child', attached_at: at(0) } }
    deciderSpec(t, jobDecider).given([ev.created(), attached]).when(cmd.attach('job_child', 3)).then([])
  })

  t.test('a succeeded parent records nothing: the child runs immediately', async (t) => {
    deciderSpec(t, jobDecider).given(histories.succeeded).when(cmd.attach('job_child')).then([])
  })

  for (const state of ['cancelled', 'dead_letter'] as const) {
    t.test(`a ${state} parent refuses with parent_terminal`, async (t) => {
      deciderSpec(t, jobDecider).given(histories[state]).when(cmd.attach('job_child')).thenThrows(ParentTerminal, 'parent_terminal')
    })
  }

  t.test('a failed parent refuses with parent_terminal', async (t) => {
    deciderSpec(t, jobDecider).givenState(failedJob(1, 3)).when(cmd.attach('job_child')).thenThrows(ParentTerminal, 'parent_terminal')
  })

  t.test('a missing parent is not found', async (t) => {
    deciderSpec(t, jobDecider).given([]).when(cmd.attach('job_child')).thenThrows(JobNotFound, 'job_not_found')
  })
})

t.test('claim (worker poll)', async (t) => {
  t.test('a pending job is claimed: processing, worker set, attempt 1', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given(histories.pending)
      .when(cmd.claim('w1', 4))
      .then([ev.claimed(1, 'w1', 4)])
    t.equal(job?.state, 'processing')
    t.equal(job?.worker_id, 'w1')
    t.equal(job?.attempt, 1)
    t.equal(job?.started_at, at(4))
  })

  t.test('a pending job whose run_at has passed is claimable', async (t) => {
    deciderSpec(t, jobDecider)
      .given([ev.created({ run_at: at(-1) })])
      .when(cmd.claim('w1', 0))
      .then([ev.claimed(1, 'w1', 0)])
  })

  t.test('a pending job with a future run_at (backoff) is not claimable before it', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const history = [ev.created(), ev.claimed(), ev.attemptFailed(1, 0, 15)]
    spec.given(history).when(cmd.claim('w2', 14)).thenThrows(InvalidState, 'invalid_state')
    spec
      .given(history)
      .when(cmd.claim('w2', 15))
      .then([ev.claimed(2, 'w2', 15)])
  })

  for (const state of ['scheduled', 'processing', 'succeeded', 'cancelled', 'dead_letter'] as const) {
    t.test(`a ${state} job cannot be claimed`, async (t) => {
      deciderSpec(t, jobDecider).given(histories[state]).when(cmd.claim('w2', 1)).thenThrows(InvalidState, 'invalid_state')
    })
  }

  t.test('a missing job is not found', async (t) => {
    deciderSpec(t, jobDecider).given([]).when(cmd.claim()).thenThrows(JobNotFound, 'job_not_found')
  })

  t.test("a claim under flow gates names its hold and the attempt they were taken for; another attempt's gates are refused", async (t) => {
    const gated = (attempt: number): JobCommand => ({
      type: 'claim_job',
      data: { worker_id: 'w1', gates: ['fgt_a'], hold: 'h1', attempt },
      meta: { now: at(4) },
    })
    const job = deciderSpec(t, jobDecider)
      .given(histories.pending)
      .when(gated(1))
      .then([{ type: 'job_claimed', data: { worker_id: 'w1', attempt: 1, started_at: at(4), gates: ['fgt_a'], hold: 'h1' } }])
    t.same([job?.gates, job?.gate_hold], [['fgt_a'], 'h1'], "the job holds the gates under the claim's hold")
    // Gates taken for attempt 1 on a state since moved on (the attempt ran and failed) must not cover attempt 2.
    const retried = [ev.created(), ev.claimed(), ev.attemptFailed(1, 0, 0)]
    deciderSpec(t, jobDecider).given(retried).when(gated(1)).thenThrows(InvalidState, 'invalid_state')
  })
})

t.test('ack with status succeeded', async (t) => {
  t.test('the claiming worker completes the job', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(cmd.ack('succeeded', { now: 2 }))
      .then([ev.succeeded(1, 2)])
    t.equal(job?.state, 'succeeded')
    t.equal(job?.completed_at, at(2))
    t.equal(job?.duration_ms, 1200)
    t.equal(job?.error_seq, null, 'no error')
  })

  t.test('what the handler returned is on the job_succeeded; nothing (or null) leaves it out', async (t) => {
    const result = { rows: 3, ok: true }
    const ok = ev.succeeded(1, 2)
    deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(cmd.ack('succeeded', { now: 2, result }))
      .then([{ ...ok, data: { ...ok.data, result } } as JobEvent])
    deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(cmd.ack('succeeded', { now: 2, result: null }))
      .then([ok])
    t.same(resultOf([{ ...ok, data: { ...ok.data, result } }]), result)
    t.equal(resultOf([ok]), null)
  })

  t.test('without a duration the elapsed time since the claim is recorded', async (t) => {
    deciderSpec(t, jobDecider)
      .given([ev.created(), ev.claimed(1, 'w1', 10)])
      .when(cmd.ack('succeeded', { now: 12.5, duration_ms: null }))
      .then([{ type: 'job_succeeded', data: { worker_id: 'w1', attempt: 1, duration_ms: 2500, completed_at: at(12.5) } }])
  })

  t.test('a parent success activates its waiting children (cascade)', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const [succeeded] = jobDecider.decide(cmd.ack('succeeded', { now: 5 }), stateAfter(histories.processing))
    t.same(succeeded && cascadeOf(succeeded), { kind: 'activate' })
    const child = spec
      .given([ev.created({ job_id: 'job_child', parent_job_id: 'job_1', waits_for_parent: true })])
      .when(cmd.activate('job_1', 5))
      .then([{ type: 'job_activated', data: { parent_job_id: 'job_1', state: 'pending', activated_at: at(5) } }])
    t.equal(child?.state, 'pending')
    t.equal(child?.waiting_for_parent, false)
  })
})

t.test('ack with status failed', async (t) => {
  t.test('attempt < max_attempts: back to pending with a backoff run_at, worker cleared', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(cmd.ack('failed', { now: 2, random: 0 }))
      .then([ev.attemptFailed(1, 2, 15)])
    t.equal(job?.state, 'pending')
    t.equal(job?.worker_id, null)
    t.equal(job?.run_at, at(17))
    t.equal(job?.error_seq, 0, 'the error is the one this message records')
    t.equal(job?.attempt, 1, 'the attempt counts up on the next claim, not on the failure')
  })

  t.test('the backoff doubles with each attempt: 15 s, 30 s, 60 s', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const history: JobEvent[] = [ev.created({ max_attempts: 4 }), ev.claimed(1)]
    spec
      .given(history)
      .when(cmd.ack('failed', { random: 0 }))
      .then([ev.attemptFailed(1, 0, 15)])
    history.push(ev.attemptFailed(1, 0, 15), ev.claimed(2, 'w1', 15))
    spec
      .given(history)
      .when(cmd.ack('failed', { now: 15, random: 0 }))
      .then([ev.attemptFailed(2, 15, 30)])
    history.push(ev.attemptFailed(2, 15, 30), ev.claimed(3, 'w1', 45))
    spec
      .given(history)
      .when(cmd.ack('failed', { now: 45, random: 0 }))
      .then([ev.attemptFailed(3, 45, 60)])
  })

  t.test('the jitter adds 0 ms at random 0 and under 3 s at random 0.999', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    spec
      .given(histories.processing)
      .when(cmd.ack('failed', { random: 0.999 }))
      .then([ev.attemptFailed(1, 0, 17.997)])
    const [failed] = jobDecider.decide(cmd.ack('failed', { random: 0.999 }), stateAfter(histories.processing))
    const delayMs = failed?.type === 'job_attempt_failed' ? Date.parse(failed.data.retry_at) - t0 : NaN
    t.ok(delayMs >= 15_000 && delayMs < 18_000, `retry after ${delayMs} ms is within 15 s + [0, 3 s)`)
  })

  t.test('without meta.random there is no jitter', async (t) => {
    deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(cmd.ack('failed', {}))
      .then([ev.attemptFailed(1, 0, 15)])
  })

  t.test('without an error object a generic one is recorded', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(cmd.ack('failed', { error: null, random: 0 }))
      .then([
        {
          type: 'job_attempt_failed',
          data: {
            worker_id: 'w1',
            attempt: 1,
            error: { type: 'Error', message: 'the worker reported a failure', stack_trace: '' },
            duration_ms: 1200,
            retry_at: at(15),
            failed_at: at(0),
            reaped: false,
          },
        },
      ])
    t.equal(job?.error_seq, 0)
  })

  t.test('attempt >= max_attempts: dead_letter with completed_at', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([ev.created({ max_attempts: 2 }), ev.claimed(1), ev.attemptFailed(1, 0, 15), ev.claimed(2, 'w1', 15)])
      .when(cmd.ack('failed', { now: 20 }))
      .then([ev.deadLettered(2, 20)])
    t.equal(job?.state, 'dead_letter')
    t.equal(job?.completed_at, at(20))
    t.equal(job?.error_seq, 0)
  })

  t.test('max_attempts 1 dead-letters on the first failure', async (t) => {
    deciderSpec(t, jobDecider)
      .given([ev.created({ max_attempts: 1 }), ev.claimed()])
      .when(cmd.ack('failed'))
      .then([ev.deadLettered(1)])
  })

  t.test('a parent dead-lettering cancels its waiting children (cascade)', async (t) => {
    const [deadLettered] = jobDecider.decide(cmd.ack('failed'), stateAfter([ev.created({ max_attempts: 1 }), ev.claimed()]))
    t.same(deadLettered && cascadeOf(deadLettered), { kind: 'cancel', reason: 'parent_dead_lettered' })
    const child = deciderSpec(t, jobDecider)
      .given([ev.created({ job_id: 'job_child', parent_job_id: 'job_1', waits_for_parent: true })])
      .when(cmd.cancelByParent('parent_dead_lettered', 1))
      .then([{ type: 'job_cancelled', data: { reason: 'parent_dead_lettered', previous_state: 'scheduled', cancelled_at: at(1) } }])
    t.equal(child?.state, 'cancelled')
  })
})

t.test('ack refusals', async (t) => {
  t.test('another worker is refused with worker_mismatch', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    spec
      .given(histories.processing)
      .when(cmd.ack('succeeded', { worker: 'w2' }))
      .thenThrows(WorkerMismatch, 'worker_mismatch')
    spec
      .given(histories.processing)
      .when(cmd.ack('failed', { worker: 'w2' }))
      .thenThrows(WorkerMismatch, 'worker_mismatch')
  })

  for (const state of ['pending', 'scheduled', 'succeeded', 'cancelled', 'dead_letter'] as const) {
    t.test(`a ${state} job cannot be acknowledged (rule 3)`, async (t) => {
      deciderSpec(t, jobDecider).given(histories[state]).when(cmd.ack('succeeded')).thenThrows(InvalidState, 'invalid_state')
    })
  }

  t.test('a failed job cannot be acknowledged (rule 3)', async (t) => {
    deciderSpec(t, jobDecider).givenState(failedJob(1, 3)).when(cmd.ack('failed')).thenThrows(InvalidState, 'invalid_state')
  })

  t.test('a job back in pending after a failure cannot be acknowledged by its former worker', async (t) => {
    deciderSpec(t, jobDecider)
      .given([...histories.processing, ev.attemptFailed(1, 0, 15)])
      .when(cmd.ack('succeeded', { now: 1 }))
      .thenThrows(InvalidState, 'invalid_state')
  })

  t.test('a missing job is not found', async (t) => {
    deciderSpec(t, jobDecider).given([]).when(cmd.ack('succeeded')).thenThrows(JobNotFound, 'job_not_found')
  })
})

t.test('cancel', async (t) => {
  for (const state of ['pending', 'scheduled'] as const) {
    t.test(`a ${state} job is cancelled`, async (t) => {
      const job = deciderSpec(t, jobDecider)
        .given(histories[state])
        .when(cmd.cancel(3))
        .then([ev.cancelled(3, state)])
      t.equal(job?.state, 'cancelled')
      const cascades = jobDecider.decide(cmd.cancel(3), stateAfter(histories[state])).map(cascadeOf)
      t.same(cascades, [{ kind: 'cancel', reason: 'parent_cancelled' }], 'its waiting children are cancelled in turn')
    })
  }

  t.test('a child waiting for its parent can be cancelled, and stops waiting', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([ev.created({ parent_job_id: 'job_parent', waits_for_parent: true })])
      .when(cmd.cancel(1))
      .then([ev.cancelled(1, 'scheduled')])
    t.equal(job?.waiting_for_parent, false)
  })

  for (const state of ['processing', 'succeeded', 'cancelled', 'dead_letter'] as const) {
    t.test(`a ${state} job cannot be cancelled (rules 1 and 4)`, async (t) => {
      deciderSpec(t, jobDecider).given(histories[state]).when(cmd.cancel()).thenThrows(InvalidState, 'invalid_state')
    })
  }

  t.test('a failed job cannot be cancelled (rule 1)', async (t) => {
    deciderSpec(t, jobDecider).givenState(failedJob(1, 3)).when(cmd.cancel()).thenThrows(InvalidState, 'invalid_state')
  })

  t.test('a missing job is not found', async (t) => {
    deciderSpec(t, jobDecider).given([]).when(cmd.cancel()).thenThrows(JobNotFound, 'job_not_found')
  })
})

t.test('retry', async (t) => {
  const cleared = {
    state: 'pending',
    run_at: null,
    started_at: null,
    completed_at: null,
    duration_ms: null,
    progress: null,
    error_seq: null,
    worker_id: null,
  }

  t.test('a dead-lettered job at its last attempt gets one more: max_attempts = attempt + 1', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const history = [ev.created({ max_attempts: 1 }), ev.claimed(1, 'w1', 0), ev.progress(0.4), ev.deadLettered(1, 2)]
    const job = spec
      .given(history)
      .when(cmd.retry(9))
      .then([{ type: 'job_retried', data: { attempt: 1, max_attempts: 2, previous_state: 'dead_letter', retried_at: at(9) } }])
    t.match(job, { ...cleared, attempt: 1, max_attempts: 2, updated_at: at(9) }, 'error, timing and worker are cleared')
    const retried: JobEvent = { type: 'job_retried', data: { attempt: 1, max_attempts: 2, previous_state: 'dead_letter', retried_at: at(9) } }
    spec
      .given([...history, retried])
      .when(cmd.claim('w2', 10))
      .then([ev.claimed(2, 'w2', 10)])
  })

  for (const [name, attempt, maxAttempts] of [
    ['a failed job below its max_attempts keeps max_attempts', 1, 3],
    ['a failed job at its max_attempts gets max_attempts = attempt + 1', 3, 4],
  ] as const) {
    t.test(name, async (t) => {
      const job = deciderSpec(t, jobDecider)
        .givenState(failedJob(attempt, 3))
        .when(cmd.retry(20))
        .then([{ type: 'job_retried', data: { attempt, max_attempts: maxAttempts, previous_state: 'failed', retried_at: at(20) } }])
      t.match(job, { ...cleared, attempt, max_attempts: maxAttempts })
    })
  }

  for (const state of ['pending', 'scheduled', 'processing', 'succeeded', 'cancelled'] as const) {
    t.test(`a ${state} job cannot be retried (rule 2)`, async (t) => {
      deciderSpec(t, jobDecider).given(histories[state]).when(cmd.retry()).thenThrows(InvalidState, 'invalid_state')
    })
  }

  t.test('a missing job is not found', async (t) => {
    deciderSpec(t, jobDecider).given([]).when(cmd.retry()).thenThrows(JobNotFound, 'job_not_found')
  })
})

t.test('activate child (parent succeeded)', async (t) => {
  const waiting = (over: Partial<CreateData> = {}) => ev.created({ parent_job_id: 'job_parent', waits_for_parent: true, ...over })

  t.test('a waiting child without run_at becomes pending', async (t) => {
    deciderSpec(t, jobDecider)
      .given([waiting()])
      .when(cmd.activate('job_parent', 4))
      .then([{ type: 'job_activated', data: { parent_job_id: 'job_parent', state: 'pending', activated_at: at(4) } }])
  })

  t.test('a waiting child whose run_at has passed becomes pending', async (t) => {
    deciderSpec(t, jobDecider)
      .given([waiting({ run_at: at(2) })])
      .when(cmd.activate('job_parent', 4))
      .then([{ type: 'job_activated', data: { parent_job_id: 'job_parent', state: 'pending', activated_at: at(4) } }])
  })

  t.test('a waiting child with its own future run_at stays scheduled, no longer waiting, and is promoted at run_at', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const activated: JobEvent = { type: 'job_activated', data: { parent_job_id: 'job_parent', state: 'scheduled', activated_at: at(4) } }
    const job = spec
      .given([waiting({ run_at: at(60) })])
      .when(cmd.activate('job_parent', 4))
      .then([activated])
    t.equal(job?.state, 'scheduled')
    t.equal(job?.waiting_for_parent, false)
    spec
      .given([waiting({ run_at: at(60) }), activated])
      .when(cmd.promote(60))
      .then([ev.promoted(60)])
  })

  t.test('a job not waiting for a parent is left alone', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const activated: JobEvent = { type: 'job_activated', data: { parent_job_id: 'job_parent', state: 'pending', activated_at: at(1) } }
    spec.given([waiting(), activated]).when(cmd.activate('job_parent', 2)).then([], 'already activated')
    spec.given(histories.scheduled).when(cmd.activate('job_parent', 2)).then([], 'scheduled by run_at only')
    spec.given(histories.pending).when(cmd.activate('job_parent', 2)).then([], 'pending')
    spec
      .given([waiting(), ev.cancelled(1)])
      .when(cmd.activate('job_parent', 2))
      .then([], 'cancelled')
    spec.given([]).when(cmd.activate('job_parent', 2)).then([], 'missing')
  })
})

t.test('cancel by parent (parent dead-lettered or cancelled)', async (t) => {
  const waiting = ev.created({ parent_job_id: 'job_parent', waits_for_parent: true })

  for (const reason of ['parent_cancelled', 'parent_dead_lettered'] as const) {
    t.test(`a waiting child is cancelled with reason ${reason}`, async (t) => {
      const job = deciderSpec(t, jobDecider)
        .given([waiting])
        .when(cmd.cancelByParent(reason, 3))
        .then([{ type: 'job_cancelled', data: { reason, previous_state: 'scheduled', cancelled_at: at(3) } }])
      t.equal(job?.state, 'cancelled')
      t.equal(job?.waiting_for_parent, false)
    })
  }

  t.test('a job not waiting for a parent is left alone', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const activated: JobEvent = { type: 'job_activated', data: { parent_job_id: 'job_parent', state: 'pending', activated_at: at(1) } }
    spec.given([waiting, activated]).when(cmd.cancelByParent('parent_cancelled', 2)).then([], 'already activated')
    spec
      .given([waiting, ev.cancelled(1)])
      .when(cmd.cancelByParent('parent_cancelled', 2))
      .then([], 'already cancelled')
    spec.given(histories.scheduled).when(cmd.cancelByParent('parent_cancelled', 2)).then([], 'scheduled by run_at only')
    spec.given(histories.processing).when(cmd.cancelByParent('parent_cancelled', 2)).then([], 'processing')
    spec.given([]).when(cmd.cancelByParent('parent_cancelled', 2)).then([], 'missing')
  })
})

t.test('promote (scheduled job whose run_at arrived)', async (t) => {
  t.test('a due scheduled job becomes pending', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const job = spec
      .given(histories.scheduled)
      .when(cmd.promote(60))
      .then([ev.promoted(60)])
    t.equal(job?.state, 'pending')
    spec
      .given(histories.scheduled)
      .when(cmd.promote(61))
      .then([ev.promoted(61)])
  })

  t.test('nothing happens before run_at, while waiting for a parent, or outside scheduled', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    spec.given(histories.scheduled).when(cmd.promote(59)).then([], 'before run_at')
    spec
      .given([ev.created({ parent_job_id: 'job_parent', waits_for_parent: true })])
      .when(cmd.promote(60))
      .then([], 'waiting for a parent')
    spec.given(histories.pending).when(cmd.promote(60)).then([], 'pending')
    spec.given(histories.cancelled).when(cmd.promote(60)).then([], 'cancelled')
    spec.given([]).when(cmd.promote(60)).then([], 'missing')
  })
})

t.test("a failed attempt waits as the retry policy of the job's queue says", async (t) => {
  const slowQueue = { queue: 'slow', base_delay_seconds: 60, factor: 3, max_delay_seconds: 500, jitter_seconds: 10, max_attempts: 5 }
  const policies = { project: { base_delay_seconds: 5, factor: 1, max_delay_seconds: 5, jitter_seconds: 0, max_attempts: 2 }, queues: [slowQueue] }
  const failWith = (random: number, now = 0): JobCommand => {
    const ack = cmd.ack('failed', { now, random })
    return ack.type === 'ack_job' ? { ...ack, data: { ...ack.data, retry_policies: policies } } : ack
  }

  t.test("the project's policy for a queue without its own", async (t) => {
    deciderSpec(t, jobDecider)
      .given(histories.processing)
      .when(failWith(0.999))
      .then([ev.attemptFailed(1, 0, 5)], 'a constant 5 s, no jitter')
  })

  t.test("the queue's own: base × factor^(attempt−1), capped, plus the jitter", async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const history: JobEvent[] = [ev.created({ queue: 'slow', max_attempts: 5 }), ev.claimed(1)]
    spec
      .given(history)
      .when(failWith(0))
      .then([ev.attemptFailed(1, 0, 60)], 'attempt 1: 60 s')
    history.push(ev.attemptFailed(1, 0, 60), ev.claimed(2, 'w1', 60))
    spec
      .given(history)
      .when(failWith(0, 60))
      .then([ev.attemptFailed(2, 60, 180)], 'attempt 2: 180 s')
    history.push(ev.attemptFailed(2, 60, 180), ev.claimed(3, 'w1', 240))
    spec
      .given(history)
      .when(failWith(0, 240))
      .then([ev.attemptFailed(3, 240, 500)], 'attempt 3: 540 s capped at 500 s')
    spec
      .given(history)
      .when(failWith(0.5, 240))
      .then([ev.attemptFailed(3, 240, 505)], 'the jitter comes on top of the cap')
  })

  t.test('a reaped attempt follows the same policy', async (t) => {
    const reap = cmd.reap(1, 400, 0)
    const command: JobCommand = reap.type === 'reap_job' ? { ...reap, data: { ...reap.data, retry_policies: policies } } : reap
    const [failed] = jobDecider.decide(command, fold(jobDecider, null, [ev.created({ queue: 'slow' }), ev.claimed(1)]))
    t.equal(failed?.type === 'job_attempt_failed' ? failed.data.retry_at : null, at(460))
  })

  t.test("dead-lettering still counts the job's own max_attempts, not the policy's", async (t) => {
    deciderSpec(t, jobDecider)
      .given([ev.created({ queue: 'slow', max_attempts: 1 }), ev.claimed(1)])
      .when(failWith(0))
      .then([ev.deadLettered(1)])
  })
})

t.test('reap (stuck-job reaper)', async (t) => {
  t.test('a stale attempt below max_attempts goes back to pending, marked reaped', async (t) => {
    const job = deciderSpec(t, jobDecider)
      .given([ev.created(), ev.claimed(1, 'w1', 0)])
      .when(cmd.reap(1, 400, 0))
      .then([
        {
          type: 'job_attempt_failed',
          data: { worker_id: 'w1', attempt: 1, error: reaperError, duration_ms: 400_000, retry_at: at(415), failed_at: at(400), reaped: true },
        },
      ])
    t.equal(job?.state, 'pending')
    t.equal(job?.worker_id, null)
  })

  t.test('a stale last attempt dead-letters, marked reaped', async (t) => {
    deciderSpec(t, jobDecider)
      .given([ev.created({ max_attempts: 1 }), ev.claimed(1, 'w1', 0)])
      .when(cmd.reap(1, 400))
      .then([
        {
          type: 'job_dead_lettered',
          data: { worker_id: 'w1', attempt: 1, error: reaperError, duration_ms: 400_000, completed_at: at(400), reaped: true },
        },
      ])
  })

  t.test('a reap for another attempt, or of a job no longer processing, does nothing', async (t) => {
    const spec = deciderSpec(t, jobDecider)
    const reclaimed = [ev.created(), ev.claimed(1), ev.attemptFailed(1, 0, 15), ev.claimed(2, 'w2', 15)]
    spec.given(reclaimed).when(cmd.reap(1, 400)).then([], 'the worker of attempt 2 keeps its job')
    spec.given(histories.succeeded).when(cmd.reap(1, 400)).then([], 'succeeded')
    spec.given(histories.pending).when(cmd.reap(0, 400)).then([], 'pending')
    spec.given([]).when(cmd.reap(1, 400)).then([], 'missing')
  })
})

t.test('heartbeat is allowed only to the worker holding a processing job', async (t) => {
  t.doesNotThrow(() => assertHeartbeatAllowed(stateAfter(histories.processing) as Job, 'w1'))
  t.throws(() => assertHeartbeatAllowed(stateAfter(histories.processing) as Job, 'w2'), { code: 'worker_mismatch' })
  t.throws(() => assertHeartbeatAllowed(stateAfter(histories.succeeded) as Job, 'w1'), { code: 'invalid_state' })
})

t.test('isAttemptStale: the reaper rule', async (t) => {
  const processing = { state: 'processing' as const, started_at: at(0), timeout_seconds: 300 }

  t.test('without a heartbeat the whole timeout (plus grace) is allowed', async (t) => {
    t.equal(isAttemptStale(processing, null, at(300), 0), false)
    t.equal(isAttemptStale(processing, null, at(300.001), 0), true)
    t.equal(isAttemptStale(processing, null, at(310), 10_000), false, 'grace extends the window')
    t.equal(isAttemptStale(processing, null, at(310.001), 10_000), true)
  })

  t.test('after a heartbeat, two missed heartbeats (never more than the timeout) make it stale', async (t) => {
    // 300 s timeout: heartbeat every 100 s, so stale 200 s after the last one.
    t.equal(isAttemptStale(processing, at(250), at(450), 0), false)
    t.equal(isAttemptStale(processing, at(250), at(450.001), 0), true)
    t.equal(isAttemptStale(processing, at(250), at(455), 5_000), false, 'grace extends the window')
    t.equal(isAttemptStale(processing, at(250), at(455.001), 5_000), true)
  })

  t.test('short timeouts: the interval is at least 10 s and the window at most the timeout', async (t) => {
    const short = { state: 'processing' as const, started_at: at(0), timeout_seconds: 30 }
    t.equal(isAttemptStale(short, at(5), at(25), 0), false, '30 s timeout: 2 x 10 s after the heartbeat')
    t.equal(isAttemptStale(short, at(5), at(25.001), 0), true)
    const tiny = { state: 'processing' as const, started_at: at(0), timeout_seconds: 10 }
    t.equal(isAttemptStale(tiny, at(5), at(15), 0), false, '10 s timeout: the window is the timeout, not 2 x 10 s')
    t.equal(isAttemptStale(tiny, at(5), at(15.001), 0), true)
  })

  t.test('a heartbeat older than the claim (a previous attempt) counts from the claim, not from the heartbeat', async (t) => {
    t.equal(isAttemptStale(processing, at(-1000), at(200), 0), false)
    t.equal(isAttemptStale(processing, at(-1000), at(200.001), 0), true)
  })

  t.test('a job that is not processing is never stale', async (t) => {
    for (const state of ['pending', 'scheduled', 'succeeded', 'failed', 'cancelled', 'dead_letter'] as const) {
      t.equal(isAttemptStale({ ...processing, state }, null, at(100_000), 0), false, state)
    }
    t.equal(isAttemptStale({ ...processing, started_at: null }, null, at(100_000), 0), false, 'never started')
  })
})

t.test('cascadeOf: what a parent event does to its continuations', async (t) => {
  t.same(cascadeOf(ev.succeeded()), { kind: 'activate' })
  t.same(cascadeOf(ev.deadLettered(1)), { kind: 'cancel', reason: 'parent_dead_lettered' })
  t.same(cascadeOf(ev.cancelled()), { kind: 'cancel', reason: 'parent_cancelled' })
  t.same(
    cascadeOf({ type: 'job_cancelled', data: { reason: 'parent_dead_lettered', previous_state: 'scheduled', cancelled_at: at(0) } }),
    {
      kind: 'cancel',
      reason: 'parent_cancelled',
    },
    'a child cancelled by its parent cancels its own children as cancelled',
  )
  for (const event of [ev.created(), ev.claimed(), ev.attemptFailed(1, 0, 15), ev.promoted(1), ev.progress(0.1)]) {
    t.equal(cascadeOf(event), null, event.type)
  }
  t.equal(
    cascadeOf({ type: 'job_retried', data: { attempt: 1, max_attempts: 2, previous_state: 'dead_letter', retried_at: at(0) } }),
    null,
    'job_retried',
  )
  t.equal(cascadeOf({ type: 'job_child_attached', data: { child_job_id: 'c', attached_at: at(0) } }), null, 'job_child_attached')
  t.equal(cascadeOf({ type: 'job_activated', data: { parent_job_id: 'p', state: 'pending', activated_at: at(0) } }), null, 'job_activated')
})

t.test('evolve on a missing state: job_created builds it, any other event throws', async (t) => {
  evolveOnMissingState(t, jobDecider, ev.created(), [
    ev.claimed(),
    ev.progress(0.5),
    ev.succeeded(),
    ev.attemptFailed(1, 0, 15),
    ev.deadLettered(1),
    ev.cancelled(),
    ev.promoted(1),
    { type: 'job_retried', data: { attempt: 1, max_attempts: 2, previous_state: 'dead_letter', retried_at: at(0) } },
    { type: 'job_child_attached', data: { child_job_id: 'c', attached_at: at(0) } },
    { type: 'job_activated', data: { parent_job_id: 'p', state: 'pending', activated_at: at(0) } },
  ])
})

t.test('what a message stores of a job: the error once, the payload never past job_created', async (t) => {
  t.test('the state of the message that records an error refers to that message; its sequence is given once stored', async (t) => {
    const failed = ev.attemptFailed(1, 2, 15)
    const job = stateAfter([...histories.processing, failed])!
    t.equal(job.error_seq, 0, 'the decision says: this message')
    t.notOk('error' in job, 'and carries no error itself')
    t.equal(upgradeJob(job, 42, [failed]).error_seq, 42, 'stored at 42, it refers to 42')
    t.equal(upgradeJob(job, null, [failed]).error_seq, 0, 'seen without its sequence, it stays as written')
    t.same(errorOf([failed]), boom, 'the error is read from the events of that message')
    t.equal(errorOf([ev.claimed()]), null)
    const later = upgradeJob({ ...job, error_seq: 42 }, 50, [ev.claimed(2)])
    t.equal(later.error_seq, 42, 'a later message keeps referring to it')
  })

  t.test('a success or a retry clears the reference', async (t) => {
    t.equal(stateAfter([...histories.processing, ev.attemptFailed(1, 2, 15), ev.claimed(2, 'w1', 20), ev.succeeded(2, 21)])!.error_seq, null)
  })

  t.test('a state written before errors and payloads were kept once is upgraded when read', async (t) => {
    const today = stateAfter(histories.processing)!
    const { error_seq: _ref, ...fields } = today
    const v1 = { ...fields, payload: { to: 'a@b.c' }, error: boom, progress: 0.5 } as unknown as Job
    const failed = ev.attemptFailed(1, 2, 15)
    t.strictSame(upgradeJob(v1, 7, [failed]), { ...fields, progress: 0.5, error_seq: 7 }, 'its own failure: a reference to it, no payload')
    t.strictSame(
      upgradeJob(v1, 9, [ev.claimed(2)]),
      { ...fields, progress: 0.5, error_seq: null, error: boom },
      'an error recorded earlier stays inline, since only the message holding it knows where it is',
    )
    const clean = { ...fields, payload: {}, error: null, progress: null } as unknown as Job
    t.strictSame(upgradeJob(clean, 3, []), { ...fields, progress: null, error_seq: null })
    const carried = upgradeJob(v1, 9, [ev.claimed(2)])
    t.strictSame(upgradeJob(carried, 10, []), carried, 'an upgraded state is left as it is')
    t.notOk('error' in stateAfterFrom(carried, [ev.succeeded(1, 30)])!, 'and loses the inline error when the job leaves it')
  })

  t.test('the view the API shows: the state with the facts kept once', async (t) => {
    const job = stateAfter([...histories.processing, ev.attemptFailed(1, 2, 15)])!
    const view = toJobView(job, { payload: { to: 'a@b.c' }, error: boom, progress: 0.25, result: null })
    t.same(view.payload, { to: 'a@b.c' })
    t.same(view.error, boom)
    t.equal(view.progress, 0.25)
    t.notOk('error_seq' in view, 'without the reference')
  })
})

function stateAfterFrom(state: Job, events: readonly JobEvent[]) {
  return fold(jobDecider, state, events)
}

function stateAfter(events: readonly JobEvent[]) {
  return fold(jobDecider, jobDecider.initialState, events)
}
