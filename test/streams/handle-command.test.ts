import t from 'tap'
import { ulid } from 'ulid'
import { InvalidState } from '../../domain/errors.ts'
import { jobDecider, type Job, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { jobProgressDecider, type JobProgress, type JobProgressCommand } from '../../domain/job-progress.ts'
import { ConcurrencyConflict } from '../../streams/errors.ts'
import { EventStore, type AggregateRef, type DomainEventShape, type StoredEvent } from '../../streams/event-store.ts'
import { handleCommand } from '../../streams/handle-command.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'
import { createJobData } from '../support/job-commands.ts'

const { names, nats, store } = await openIsolatedStore(t, import.meta.filename, { database: false })

/** The real store, counting the conflicts its appends meet, to show a race did happen. */
class ConflictCountingStore extends EventStore {
  conflicts = 0
  override async append<E extends DomainEventShape, S>(ref: AggregateRef, events: StoredEvent<E>[], state: S, expectedSeq: number) {
    try {
      return await super.append(ref, events, state, expectedSeq)
    } catch (err) {
      if (err instanceof ConcurrencyConflict) this.conflicts++
      throw err
    }
  }
}

const projectId = 'prj_handlecommand'
const newEventId = () => `evt_${ulid()}`
const meta = () => ({ now: new Date().toISOString(), random: 0 })

function run(command: JobCommand, ref: AggregateRef, on: EventStore = store) {
  return handleCommand<JobCommand, JobEvent, Job>(on, jobDecider, ref, command, newEventId)
}

function createCommand(ref: AggregateRef): JobCommand {
  return { type: 'create_job', data: createJobData({ job_id: ref.id, project_id: projectId }), meta: meta() }
}

async function createJob(): Promise<AggregateRef> {
  const ref: AggregateRef = { aggregate: 'job', projectId, id: `job_${ulid()}` }
  await run(createCommand(ref), ref)
  return ref
}

const claim = (workerId: string): JobCommand => ({ type: 'claim_job', data: { worker_id: workerId }, meta: meta() })
const attach = (childId: string): JobCommand => ({ type: 'attach_child', data: { child_job_id: childId }, meta: meta() })
const report = (value: number): JobProgressCommand => ({
  type: 'report_progress',
  data: { worker_id: 'w1', attempt: 1, job_progress: null, progress: value },
  meta: meta(),
})

t.test('of concurrent claims on one pending job exactly one wins; the others are refused as invalid_state', async (t) => {
  const ref = await createJob()
  const counting = new ConflictCountingStore(names.namespace, nats.nc, nats.jsm)
  const workers = ['w1', 'w2', 'w3', 'w4']
  const outcomes = await Promise.allSettled(workers.map((w) => run(claim(w), ref, counting)))
  const won = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []))
  const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : []))
  t.equal(won.length, 1, 'one claim succeeds')
  t.equal(refused.length, 3)
  t.ok(
    refused.every((e) => e instanceof InvalidState && e.code === 'invalid_state'),
    'the losers, re-decided on fresh state, get the 409 refusal',
  )
  t.ok(counting.conflicts >= 1, `the claims raced (${counting.conflicts} conflicts)`)
  const history = await store.history<JobEvent, Job>(ref)
  t.same(
    history.map((r) => r.message.events.map((e) => e.type)),
    [['job_created'], ['job_claimed']],
  )
  const loaded = await store.load<Job>(ref)
  t.equal(loaded.state!.worker_id, won[0]!.state!.worker_id, 'the stored claim is the winner')
  t.equal(loaded.state!.attempt, 1)
})

t.test('concurrent attach_child on one parent: the losers re-decide and every child is attached', async (t) => {
  const ref = await createJob()
  const counting = new ConflictCountingStore(names.namespace, nats.nc, nats.jsm)
  const children = ['job_c1', 'job_c2', 'job_c3', 'job_c4']
  const results = await Promise.all(children.map((c) => run(attach(c), ref, counting)))
  t.ok(
    results.every((r) => r.appended),
    'every command appended',
  )
  t.ok(counting.conflicts >= 3, `at least three of them first met a conflict (${counting.conflicts})`)
  const loaded = await store.load<Job>(ref)
  t.same([...loaded.state!.children].sort(), children)
  t.equal((await store.history(ref)).length, 1 + children.length)
})

t.test('concurrent progress reports of different values both land', async (t) => {
  const ref = await createJob()
  await run(claim('w1'), ref)
  const progressRef: AggregateRef = { aggregate: 'progress', projectId, id: ref.id }
  const counting = new ConflictCountingStore(names.namespace, nats.nc, nats.jsm)
  const reportOn = (value: number) => handleCommand(counting, jobProgressDecider, progressRef, report(value), newEventId)
  const [a, b] = await Promise.all([reportOn(0.3), reportOn(0.6)])
  t.ok(a.appended && b.appended)
  t.equal(counting.conflicts, 1, 'the second one conflicted once and was re-decided')
  const history = await store.history<JobEvent, JobProgress>(progressRef)
  const reported = history.flatMap((r) => r.message.events).filter((e) => e.type === 'job_progressed')
  t.same(reported.map((e) => (e.data as { progress: number }).progress).sort(), [0.3, 0.6])
  const last = reported.at(-1)!.data as { progress: number }
  t.same((await store.load<JobProgress>(progressRef)).state, { attempt: 1, progress: last.progress }, 'the state is the later report')
  t.equal((await store.history(ref)).length, 2, "the job's own subject holds only its creation and claim")
})

t.test('a decision with no events appends nothing', async (t) => {
  const ref = await createJob()
  const attached = await run(attach('job_child'), ref)
  const again = await run(attach('job_child'), ref)
  t.equal(again.appended, false)
  t.same(again.events, [])
  t.equal(again.seq, attached.seq, 'it reports the sequence it loaded')
  t.same(again.state, again.before)
  t.same(again.record.message.events, [])
  const promoted = await run({ type: 'promote_job', data: {}, meta: meta() }, ref)
  t.equal(promoted.appended, false, 'promoting a pending job is a no-op too')
  t.equal((await store.history(ref)).length, 2, 'the log holds only the creation and the one attachment')
  t.equal((await store.load(ref)).seq, attached.seq)
})

t.test('a refused command appends nothing', async (t) => {
  const ref = await createJob()
  const before = await store.load(ref)
  const ack: JobCommand = { type: 'ack_job', data: { worker_id: 'w1', status: 'succeeded', duration_ms: null, error: null }, meta: meta() }
  await t.rejects(run(ack, ref), InvalidState, 'an ack of a pending job')
  t.same(await store.load(ref), before)
})

/** Each append is preceded by a rival's successful command on the same aggregate: a real conflict every time. */
class AlwaysOvertakenStore extends EventStore {
  attempts = 0
  override async append<E extends DomainEventShape, S>(ref: AggregateRef, events: StoredEvent<E>[], state: S, expectedSeq: number) {
    this.attempts++
    await run(attach(`job_rival${this.attempts}`), ref)
    return super.append(ref, events, state, expectedSeq)
  }
}

t.test('after three re-decisions that all conflict, ConcurrencyConflict escapes', async (t) => {
  const ref = await createJob()
  const overtaken = new AlwaysOvertakenStore(names.namespace, nats.nc, nats.jsm)
  await t.rejects(run(attach('job_mine'), ref, overtaken), ConcurrencyConflict)
  t.equal(overtaken.attempts, 4, 'the first decision and three retries')
  const children = (await store.load<Job>(ref)).state!.children
  t.same(children, ['job_rival1', 'job_rival2', 'job_rival3', 'job_rival4'], 'only the rivals were stored')
})

t.test('a {null, 0} hint skips the first load; an id that exists after all is loaded on the conflict', async (t) => {
  const fresh: AggregateRef = { aggregate: 'job', projectId, id: `job_${ulid()}` }
  const counting = new ConflictCountingStore(names.namespace, nats.nc, nats.jsm)
  const created = await handleCommand<JobCommand, JobEvent, Job>(counting, jobDecider, fresh, createCommand(fresh), newEventId, {
    hint: { state: null, seq: 0 },
  })
  t.ok(created.appended)
  t.equal(counting.conflicts, 0)
  t.same(await store.load(fresh), { state: created.state, seq: created.seq })
  const existing = await createJob()
  const again = handleCommand<JobCommand, JobEvent, Job>(counting, jobDecider, existing, createCommand(existing), newEventId, {
    hint: { state: null, seq: 0 },
  })
  await t.rejects(again, InvalidState, 'the retry decides on the loaded job and refuses a second creation')
  t.equal(counting.conflicts, 1, 'the blind append at sequence 0 conflicted')
  t.equal((await store.history(existing)).length, 1)
})

t.test('a stale hint never decides the answer: refusals and no-ops are decided again on loaded state', async (t) => {
  const ref = await createJob()
  const loaded = await store.load<Job>(ref)
  const staleAsSucceeded = { state: { ...loaded.state!, state: 'succeeded' as const }, seq: loaded.seq }
  const cancelled = await handleCommand<JobCommand, JobEvent, Job>(
    store,
    jobDecider,
    ref,
    { type: 'cancel_job', data: {}, meta: { now: new Date().toISOString() } },
    newEventId,
    { hint: staleAsSucceeded },
  )
  t.equal(cancelled.state!.state, 'cancelled', 'the refusal the hint implied was not answered')

  const other = await createJob()
  const fresh = await store.load<Job>(other)
  await run({ type: 'claim_job', data: { worker_id: 'w-real' }, meta: { now: new Date().toISOString() } }, other)
  const claim = handleCommand<JobCommand, JobEvent, Job>(
    store,
    jobDecider,
    other,
    { type: 'claim_job', data: { worker_id: 'w-late' }, meta: { now: new Date().toISOString() } },
    newEventId,
    { hint: fresh },
  )
  await t.rejects(claim, InvalidState, 'a hint that lags the log conflicts on append and the loaded state refuses')
  t.equal((await store.load<Job>(other)).state!.worker_id, 'w-real')
})

t.test('a trusted hint is decided on alone: a stale one is a ConcurrencyConflict with no load, nothing appended', async (t) => {
  const ref = await createJob()
  const fresh = await store.load<Job>(ref)
  await run(claim('w-real'), ref)
  let loads = 0
  const counting = new (class extends ConflictCountingStore {
    override async load<S>(r: AggregateRef) {
      loads++
      return super.load<S>(r)
    }
  })(names.namespace, nats.nc, nats.jsm)
  const late = handleCommand<JobCommand, JobEvent, Job>(counting, jobDecider, ref, claim('w-late'), newEventId, { hint: fresh, trustHint: true })
  await t.rejects(late, ConcurrencyConflict, 'the append at the hinted sequence conflicts and is not retried')
  t.equal(loads, 0, 'no load')
  t.equal(counting.conflicts, 1, 'one append')

  const processing = await store.load<Job>(ref)
  const refused = handleCommand<JobCommand, JobEvent, Job>(counting, jobDecider, ref, claim('w-other'), newEventId, {
    hint: processing,
    trustHint: true,
  })
  await t.rejects(refused, InvalidState, "the hint's refusal is answered as decided")
  t.equal(loads, 0, 'still no load')
  t.same(
    (await store.history<JobEvent, Job>(ref)).map((r) => r.message.events.map((e) => e.type)),
    [['job_created'], ['job_claimed']],
    'nothing appended',
  )

  const next = await createJob()
  const won = await handleCommand<JobCommand, JobEvent, Job>(counting, jobDecider, next, claim('w-fresh'), newEventId, {
    hint: await store.load<Job>(next),
    trustHint: true,
  })
  t.ok(won.appended, 'a current hint claims with one append')
  t.equal(won.state!.worker_id, 'w-fresh')
})
