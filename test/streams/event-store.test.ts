import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { ulid } from 'ulid'
import { fold } from '../../domain/decider.ts'
import { DomainError } from '../../domain/errors.ts'
import { jobDecider, upgradeJob, type Job, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { ConcurrencyConflict } from '../../streams/errors.ts'
import { eventHeaders, type AggregateRef, type StoredEvent } from '../../streams/event-store.ts'
import { handleCommand } from '../../streams/handle-command.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

const { names, nats, store } = await openIsolatedStore(t, import.meta.filename, { database: false })

const projectId = 'prj_eventstore'
const newEventId = () => `evt_${ulid()}`

function newJobRef(): AggregateRef {
  return { aggregate: 'job', projectId, id: `job_${ulid()}` }
}

/** An aggregate whose messages are read back as written (a job's state is upgraded when read: streams/stored-forms.ts). */
function newPlainRef(): AggregateRef {
  return { aggregate: 'webhook', projectId, id: `wh_${ulid()}` }
}

function event(type: string, data: Record<string, unknown> = {}): StoredEvent {
  return { type, data, id: newEventId(), time: new Date().toISOString() }
}

t.test('the first append to an aggregate expects sequence 0', async (t) => {
  const ref = newPlainRef()
  const { seq, duplicate } = await store.append(ref, [event('job_created')], { step: 1 }, 0)
  t.ok(seq > 0)
  t.equal(duplicate, false)
  t.same(await store.load(ref), { state: { step: 1 }, seq })
})

t.test('an append at a stale sequence is a ConcurrencyConflict and stores nothing', async (t) => {
  const ref = newJobRef()
  const first = await store.append(ref, [event('job_created')], { step: 1 }, 0)
  await store.append(ref, [event('job_claimed')], { step: 2 }, first.seq)
  await t.rejects(store.append(ref, [event('job_progressed')], { step: 3 }, first.seq), ConcurrencyConflict)
  await t.rejects(store.append(ref, [event('job_created')], { step: 3 }, 0), ConcurrencyConflict, 'a second "new" aggregate on a used id')
  const history = await store.history(ref)
  t.same(
    history.map((r) => r.message.events[0]!.type),
    ['job_created', 'job_claimed'],
  )
})

t.test('of 50 concurrent appends at the same sequence exactly one is stored', async (t) => {
  const ref = newJobRef()
  const created = await store.append(ref, [event('job_created')], { step: 0 }, 0)
  const attempts = Array.from({ length: 50 }, (_, i) => store.append(ref, [event('job_progressed', { i })], { step: i }, created.seq))
  const outcomes = await Promise.allSettled(attempts)
  const won = outcomes.filter((o) => o.status === 'fulfilled')
  const lost = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected')
  t.equal(won.length, 1, 'one append wins')
  t.equal(lost.length, 49)
  t.ok(
    lost.every((o) => o.reason instanceof ConcurrencyConflict),
    'every other one is a ConcurrencyConflict',
  )
  const history = await store.history(ref)
  t.equal(history.length, 2, 'the log holds the creation and the single winner')
  t.equal(history[1]!.seq, (won[0] as PromiseFulfilledResult<{ seq: number }>).value.seq)
})

t.test('a re-sent message id inside the duplicate window is acknowledged as a duplicate', async (t) => {
  const ref = newJobRef()
  const events = [event('job_created'), event('job_child_attached')]
  const original = await store.append(ref, events, { step: 1 }, 0)
  const resent = await store.append(ref, events, { step: 1 }, 0)
  t.same(resent, { seq: original.seq, duplicate: true }, 'the original sequence, flagged duplicate, not a conflict')
  t.equal((await store.history(ref)).length, 1, 'stored once')
})

t.test('a message carries routing headers and sits on <ns>.evt.<project>.job.<id>', async (t) => {
  const ref = newJobRef()
  const events = [event('job_created'), event('job_child_attached')]
  const { seq } = await store.append(ref, events, { step: 1 }, 0)
  const stored = await nats.jsm.direct.getMessage(store.stream, { seq })
  t.ok(stored)
  t.equal(stored!.subject, `${names.namespace}.evt.${projectId}.job.${ref.id}`)
  t.equal(store.subjectOf(ref), stored!.subject)
  const h = stored!.header
  t.equal(h.get(eventHeaders.eventTypes), 'job_created,job_child_attached', 'every event type, in order')
  t.equal(h.get(eventHeaders.eventIds), events.map((e) => e.id).join(','))
  t.equal(h.get(eventHeaders.schemaVersion), '2')
  t.equal(h.get(eventHeaders.aggregate), 'job')
  t.equal(h.get(eventHeaders.aggregateId), ref.id)
  t.equal(h.get(eventHeaders.projectId), projectId)
  t.equal(h.get(eventHeaders.contentType), 'application/msgpack')
  t.equal(h.get('Nats-Msg-Id'), events[0]!.id, 'the first event id de-duplicates the publish')
})

t.test('loading an aggregate with no events gives null at sequence 0', async (t) => {
  t.same(await store.load(newJobRef()), { state: null, seq: 0 })
  t.same(await store.history(newJobRef()), [])
})

t.test('history lists one aggregate in append order, without its neighbours', async (t) => {
  const ref = newPlainRef()
  const other = newPlainRef()
  let seq = 0
  let otherSeq = 0
  for (let i = 0; i < 5; i++) {
    seq = (await store.append(ref, [event('job_progressed', { i })], { i }, seq)).seq
    otherSeq = (await store.append(other, [event('job_progressed', { i: -i })], { i: -i }, otherSeq)).seq
  }
  const history = await store.history(ref)
  t.same(
    history.map((r) => r.message.events[0]!.data),
    [0, 1, 2, 3, 4].map((i) => ({ i })),
  )
  t.ok(
    history.every((r, i) => i === 0 || r.seq > history[i - 1]!.seq),
    'sequences increase',
  )
  t.ok(history.every((r) => r.subject === store.subjectOf(ref) && r.message.aggregate_id === ref.id))
  t.equal(history.at(-1)!.seq, seq)
  t.same(await store.load(ref), { state: { i: 4 }, seq })
})

/** Job commands that could follow `state` at `now`; decide sorts out which are legal. */
function candidates(state: Job | null, id: string, now: string, pick: number): JobCommand[] {
  const meta = { now, random: (pick % 100) / 100 }
  const hour = 60 * 60 * 1000
  if (state === null) {
    const base = {
      job_id: id,
      project_id: projectId,
      job_type: 'email',
      queue: 'default',
      payload: { n: pick, nested: { list: [1, 'two'] } },
      max_attempts: 1 + (pick % 3),
      timeout_seconds: 60,
      tags: pick % 2 === 0 ? { team: 'a' } : null,
      idempotency_key: null,
    }
    return [
      { type: 'create_job', data: { ...base, run_at: null, parent_job_id: null, waits_for_parent: false }, meta },
      {
        type: 'create_job',
        data: { ...base, run_at: new Date(Date.parse(now) + hour).toISOString(), parent_job_id: null, waits_for_parent: false },
        meta,
      },
      { type: 'create_job', data: { ...base, run_at: null, parent_job_id: 'job_parent', waits_for_parent: true }, meta },
    ]
  }
  const worker = state.worker_id ?? `w${pick % 3}`
  const error = { type: 'Boom', message: `failure ${pick}`, stack_trace: 'at x' }
  const commands: JobCommand[] = [
    { type: 'claim_job', data: { worker_id: `w${pick % 3}` }, meta },
    { type: 'ack_job', data: { worker_id: worker, status: 'succeeded', duration_ms: pick % 500, error: null }, meta },
    { type: 'ack_job', data: { worker_id: worker, status: 'failed', duration_ms: null, error }, meta },
    { type: 'reap_job', data: { attempt: state.attempt, error }, meta },
    { type: 'retry_job', data: {}, meta },
    { type: 'promote_job', data: {}, meta },
    { type: 'activate_child', data: { parent_job_id: 'job_parent' }, meta },
  ]
  // Rarer moves, so that histories run past the first few commands.
  if (pick % 4 === 0) commands.push({ type: 'cancel_job', data: {}, meta }, { type: 'cancel_by_parent', data: { reason: 'parent_cancelled' }, meta })
  if (pick % 3 === 0) commands.push({ type: 'attach_child', data: { child_job_id: `job_child${pick}` }, meta })
  return commands
}

function legalMoves(state: Job | null, commands: JobCommand[]): JobCommand[] {
  return commands.filter((c) => {
    try {
      return jobDecider.decide(c, state).length > 0
    } catch (err) {
      if (err instanceof DomainError) return false
      throw err
    }
  })
}

t.test('loading in one direct get equals folding the whole history', async (t) => {
  let aggregates = 0
  let moves = 0
  await fc.assert(
    fc.asyncProperty(fc.array(fc.nat({ max: 10_000 }), { minLength: 1, maxLength: 20 }), async (picks) => {
      const ref = newJobRef()
      aggregates++
      // A day and more between commands: every retry backoff and run_at is due by the next one.
      let clock = Date.parse('2024-01-01T00:00:00.000Z')
      let state: Job | null = null
      let appended = 0
      for (const pick of picks) {
        clock += 25 * 60 * 60 * 1000 + pick
        const moves = legalMoves(state, candidates(state, ref.id, new Date(clock).toISOString(), pick))
        if (moves.length === 0) continue
        const result = await handleCommand<JobCommand, JobEvent, Job>(store, jobDecider, ref, moves[pick % moves.length]!, newEventId)
        assert.ok(result.appended)
        state = result.state
        appended++
      }
      const history = await store.history<JobEvent, Job>(ref)
      const loaded = await store.load<Job>(ref)
      assert.equal(history.length, appended)
      assert.equal(loaded.seq, history.at(-1)!.seq)
      // Each message's state is the fold up to it, with references to the message itself given its sequence.
      const folded = history.reduce<Job | null>((s, r) => upgradeJob(fold(jobDecider, s, r.message.events)!, r.seq, r.message.events), null)
      assert.deepEqual(loaded.state, folded)
      assert.deepEqual(loaded.state, state, 'and both equal the state handleCommand returned')
      moves += appended
    }),
    { numRuns: 12 },
  )
  t.equal(aggregates, 12, 'twelve aggregates: load equals the fold of history for each')
  t.ok(moves >= 12, `${moves} commands appended`)
})
