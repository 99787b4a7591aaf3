import assert from 'node:assert/strict'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { fold } from '../../domain/decider.ts'
import { decideChecked } from '../support/decider-spec.ts'
import { failedJobState } from '../support/job-commands.ts'
import { metricsOfJobEvent } from '../../domain/job-metrics.ts'
import {
  isTerminal,
  jobDecider,
  jobStates,
  type Job,
  type JobAggregate,
  type JobCommand,
  type JobError,
  type JobEvent,
  type JobState,
} from '../../domain/job.ts'

/**
 * Random command sequences against the job decider. Commands the decider refuses are skipped,
 * as the API would answer them with an error and append nothing; the clock moves forward by
 * random steps so that run_at, backoff and promotion are crossed in both directions.
 */

const numRuns = 300
const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const boom: JobError = { type: 'Error', message: 'boom', stack_trace: '' }

type Op =
  | { type: 'create_job'; runAtInS: number | null; waits: boolean; parent: boolean; maxAttempts: number }
  | { type: 'attach_child'; child: string }
  | { type: 'promote_job' }
  | { type: 'activate_child' }
  | { type: 'cancel_by_parent'; reason: 'parent_cancelled' | 'parent_dead_lettered' }
  | { type: 'claim_job'; worker: string }
  | { type: 'ack_job'; worker: string; status: 'succeeded' | 'failed'; durationMs: number | null; error: JobError | null }
  | { type: 'reap_job'; attempt: number }
  | { type: 'cancel_job' }
  | { type: 'retry_job' }

interface Step {
  op: Op
  advanceS: number
  random: number
}

const worker = fc.constantFrom('w1', 'w2')

const createOp = fc.record({
  type: fc.constant('create_job' as const),
  runAtInS: fc.option(fc.integer({ min: -60, max: 300 })),
  waits: fc.boolean(),
  parent: fc.boolean(),
  maxAttempts: fc.integer({ min: 1, max: 4 }),
})

// Claims and acks are weighted up so that runs get deep into retries and dead-lettering.
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 1, arbitrary: createOp },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('attach_child' as const), child: fc.constantFrom('job_c1', 'job_c2') }) },
  { weight: 2, arbitrary: fc.constant({ type: 'promote_job' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'activate_child' as const }) },
  {
    weight: 1,
    arbitrary: fc.record({
      type: fc.constant('cancel_by_parent' as const),
      reason: fc.constantFrom('parent_cancelled' as const, 'parent_dead_lettered' as const),
    }),
  },
  { weight: 5, arbitrary: fc.record({ type: fc.constant('claim_job' as const), worker }) },
  {
    weight: 5,
    arbitrary: fc.record({
      type: fc.constant('ack_job' as const),
      worker,
      status: fc.constantFrom('succeeded' as const, 'failed' as const, 'failed' as const),
      durationMs: fc.option(fc.integer({ min: 0, max: 10_000 })),
      error: fc.option(fc.constant(boom)),
    }),
  },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('reap_job' as const), attempt: fc.integer({ min: 0, max: 5 }) }) },
  { weight: 1, arbitrary: fc.constant({ type: 'cancel_job' as const }) },
  { weight: 2, arbitrary: fc.constant({ type: 'retry_job' as const }) },
)

const step = (opArb: fc.Arbitrary<Op>): fc.Arbitrary<Step> =>
  fc.record({
    op: opArb,
    advanceS: fc.constantFrom(0, 1, 5, 15, 20, 60, 400, 3600, 2 * 86_400),
    random: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
  })

/** A job in `failed`: no command leads there (spec rule 7), so it is built as a starting point. */
const failedJob: fc.Arbitrary<Job> = fc
  .record({ attempt: fc.integer({ min: 1, max: 4 }), extra: fc.integer({ min: 0, max: 2 }) })
  .map(({ attempt, extra }) =>
    failedJobState({
      attempt,
      maxAttempts: attempt + extra,
      error: boom,
      createdAt: new Date(t0 - 60_000).toISOString(),
      startedAt: new Date(t0 - 30_000).toISOString(),
      completedAt: new Date(t0 - 29_000).toISOString(),
    }),
  )

interface Scenario {
  start: JobAggregate
  steps: Step[]
}

const scenario: fc.Arbitrary<Scenario> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc
      .tuple(step(createOp), fc.array(step(op), { maxLength: 40, size: 'max' }))
      .map(([first, rest]) => ({ start: null, steps: [first, ...rest] })),
  },
  { weight: 1, arbitrary: fc.array(step(op), { maxLength: 20, size: 'max' }).map((steps) => ({ start: null, steps })) },
  { weight: 2, arbitrary: fc.tuple(failedJob, fc.array(step(op), { maxLength: 20, size: 'max' })).map(([start, steps]) => ({ start, steps })) },
)

function toCommand(op: Op, now: string, random: number): JobCommand {
  const meta = { now, random }
  switch (op.type) {
    case 'create_job':
      return {
        type: 'create_job',
        data: {
          job_id: 'job_1',
          project_id: 'prj_1',
          job_type: 'email',
          queue: 'default',
          payload: {},
          run_at: op.runAtInS === null ? null : new Date(Date.parse(now) + op.runAtInS * 1000).toISOString(),
          max_attempts: op.maxAttempts,
          timeout_seconds: 300,
          tags: null,
          parent_job_id: op.waits || op.parent ? 'job_parent' : null,
          waits_for_parent: op.waits,
          idempotency_key: null,
        },
        meta,
      }
    case 'attach_child':
      return { type: 'attach_child', data: { child_job_id: op.child }, meta }
    case 'promote_job':
    case 'cancel_job':
    case 'retry_job':
      return { type: op.type, data: {}, meta }
    case 'activate_child':
      return { type: 'activate_child', data: { parent_job_id: 'job_parent' }, meta }
    case 'cancel_by_parent':
      return { type: 'cancel_by_parent', data: { reason: op.reason }, meta }
    case 'claim_job':
      return { type: 'claim_job', data: { worker_id: op.worker }, meta }
    case 'ack_job':
      return { type: 'ack_job', data: { worker_id: op.worker, status: op.status, duration_ms: op.durationMs, error: op.error }, meta }
    case 'reap_job':
      return { type: 'reap_job', data: { attempt: op.attempt, error: boom }, meta }
  }
}

interface Decision {
  command: JobCommand
  before: JobAggregate
  events: JobEvent[]
  /** A deep copy of the state right after the decision, taken before any later step ran. */
  after: JobAggregate
}

/** Runs a scenario, skipping refusals; anything thrown that is not a DomainError is a bug. */
function run({ start, steps }: Scenario): { decisions: Decision[]; final: JobAggregate } {
  let state = structuredClone(start)
  let clock = t0
  const decisions: Decision[] = []
  for (const { op, advanceS, random } of steps) {
    clock += advanceS * 1000
    const command = toCommand(op, new Date(clock).toISOString(), random)
    const step = decideChecked(jobDecider, command, state)
    if ('refusal' in step) continue
    state = step.next
    decisions.push({ command, before: step.before, events: structuredClone(step.events), after: structuredClone(state) })
  }
  return { decisions, final: state }
}

const withWorker: readonly JobState[] = ['processing', 'succeeded', 'dead_letter']
const withoutWorker: readonly JobState[] = ['pending', 'scheduled', 'cancelled']

/** The legal-state rules, for every state reached through the decider (`failed` is only ever built). */
function assertLegal(job: Job, now: string): void {
  // The job is serialized only on failure: building the message eagerly dominated the run time.
  const expect = (holds: boolean, rule: string) => {
    if (!holds) throw new Error(`${rule}: ${JSON.stringify(job)}`)
  }
  const ran = withWorker.includes(job.state)
  expect(jobStates.includes(job.state), 'the state is one of the seven')
  if (ran) expect(job.worker_id !== null, `a ${job.state} job names its worker`)
  if (withoutWorker.includes(job.state)) expect(job.worker_id === null, `a ${job.state} job has no worker`)
  expect(job.attempt >= 0 && job.attempt <= job.max_attempts, '0 <= attempt <= max_attempts')
  if (ran) expect(job.attempt >= 1, 'a job that ran has attempt >= 1')
  if (job.state !== 'failed') {
    expect((job.completed_at !== null) === (job.state === 'succeeded' || job.state === 'dead_letter'), 'completed_at iff succeeded or dead_letter')
  }
  if (job.state === 'processing') {
    expect(job.started_at !== null, 'processing has started_at')
    expect(job.duration_ms === null, 'processing has no duration yet')
  }
  if (job.state === 'succeeded') expect(job.error_seq === null && job.error === undefined, 'succeeded has no error')
  if (job.state === 'dead_letter') {
    expect(job.error_seq !== null || (job.error ?? null) !== null, 'dead_letter keeps its error')
    expect(job.attempt === job.max_attempts, 'dead_letter only after the last attempt')
  }
  if (job.waiting_for_parent) expect(job.state === 'scheduled', 'only a scheduled job waits for its parent')
  if (job.state === 'scheduled' && !job.waiting_for_parent) expect(job.run_at !== null, 'a scheduled job not waiting for a parent has a run_at')
  expect(job.progress === null || (job.progress >= 0 && job.progress <= 1), 'progress in [0, 1]')
  expect(new Set(job.children).size === job.children.length, 'children are unique')
  expect(Date.parse(job.updated_at) <= Date.parse(now), 'updated_at is not in the future')
}

function check(t: Pick<Test, 'equal'>, name: string, property: (s: Scenario) => void) {
  const details = fc.check(fc.property(scenario, property), { numRuns })
  t.equal(details.failed, false, fc.defaultReportMessage(details) ?? `${name} (${numRuns} runs)`)
}

t.test('random command sequences only reach legal states', async (t) => {
  const reached = new Set<JobState>()
  check(t, 'legal states', (s) => {
    const { decisions } = run(s)
    for (const { command, before, events, after } of decisions) {
      if (after === null) {
        assert.equal(before, null, 'a job never disappears')
        continue
      }
      if (events.length > 0) {
        assert.notEqual(after.state, 'failed', 'no event leads into failed (spec rule 7)')
        reached.add(after.state)
      }
      assertLegal(after, command.meta.now)
      if (before === null) continue
      assert.ok(after.attempt >= before.attempt, `attempt never decreases: ${before.attempt} -> ${after.attempt}`)
      assert.ok(after.max_attempts >= before.max_attempts, 'max_attempts never decreases')
      assert.ok(Date.parse(after.updated_at) >= Date.parse(before.updated_at), 'updated_at never goes back')
      for (const key of ['id', 'project_id', 'job_type', 'queue', 'created_at', 'timeout_seconds', 'parent_job_id'] as const) {
        assert.deepEqual(after[key], before[key], `${key} never changes`)
      }
      if (after.state === 'processing' && before.state !== 'processing') {
        assert.equal(after.attempt, before.attempt + 1, 'each claim starts the next attempt')
        assert.equal(before.state, 'pending', 'only a pending job is claimed')
        assert.ok(before.run_at === null || Date.parse(before.run_at) <= Date.parse(command.meta.now), 'a job is claimed only once due')
      }
    }
  })
  t.same(
    [...reached].sort(),
    ['cancelled', 'dead_letter', 'pending', 'processing', 'scheduled', 'succeeded'],
    'the generator enters every state the decider can reach',
  )
})

t.test('folding every emitted event reproduces the state carried after each decision', async (t) => {
  check(t, 'fold', (s) => {
    const { decisions, final } = run(s)
    const history: JobEvent[] = []
    for (const { events, after } of decisions) {
      history.push(...events)
      assert.deepEqual(fold(jobDecider, structuredClone(s.start), history), after)
    }
    assert.deepEqual(final, decisions.at(-1)?.after ?? s.start, 'no later step changed an earlier state')
  })
})

t.test('nothing leaves a terminal state except a retry from failed or dead_letter', async (t) => {
  check(t, 'terminal', (s) => {
    for (const { command, before, events, after } of run(s).decisions) {
      if (before === null || !isTerminal(before.state)) continue
      if (events.length === 0) continue
      assert.equal(command.type, 'retry_job', `${command.type} changed a ${before.state} job: ${JSON.stringify(events)}`)
      assert.ok(before.state === 'failed' || before.state === 'dead_letter', `retried a ${before.state} job`)
      assert.equal(after?.state, 'pending', 'a retry leads to pending')
    }
  })
})

t.test("the metrics state deltas of a decision's events move exactly one job from its state before to its state after", async (t) => {
  check(t, 'metrics deltas', (s) => {
    for (const { before, events, after } of run(s).decisions) {
      const summed: Record<string, number> = {}
      for (const e of events) {
        for (const [state, n] of Object.entries(metricsOfJobEvent(e).states)) summed[state] = (summed[state] ?? 0) + n
      }
      const expected: Record<string, number> = {}
      if (before?.state !== after?.state) {
        if (before) expected[before.state] = -1
        if (after) expected[after.state] = 1
      }
      const nonZero = Object.fromEntries(Object.entries(summed).filter(([, n]) => n !== 0))
      assert.deepEqual(nonZero, expected, `${JSON.stringify(events.map((e) => e.type))}`)
    }
  })
})
