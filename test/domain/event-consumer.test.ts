import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { EventConsumerExists, EventConsumerLimitReached, EventConsumerNotFound, InvalidState } from '../../domain/errors.ts'
import { eventConsumerDecider, nextHandOut, summaryOf, type EventConsumer, type EventConsumerCommand } from '../../domain/event-consumer.ts'
import type { FeedPosition } from '../../domain/event-feed.ts'

const t0 = '2026-01-01T00:00:00.000Z'
const at = (s: number) => new Date(Date.parse(t0) + s * 1000).toISOString()
const p = (seq: number): FeedPosition => ({ seq, index: 'all' })

/** Decides and folds, as handleCommand does. */
function run(state: EventConsumer | null, command: EventConsumerCommand): EventConsumer {
  return fold(eventConsumerDecider, state, eventConsumerDecider.decide(command, state))!
}

/** A creation of `name` while the project has `live` consumers of at most 3. */
const create = (name: string, live: number): EventConsumerCommand => ({
  type: 'create_consumer',
  data: {
    project_id: 'prj_1',
    name,
    filter: { types: null, queue: null, job_type: null },
    ack_wait_seconds: 30,
    start: p(10),
    live_consumers: live,
    max_consumers: 3,
  },
  meta: { now: t0 },
})

const created = run(null, create('sink', 0))

const deliver = (s: EventConsumer, from: number, to: number, now = 0, empty = false) =>
  run(s, { type: 'deliver_range', data: { from: p(from), to: p(to), empty }, meta: { now: at(now) } })
const commit = (s: EventConsumer, to: number, now = 0) => run(s, { type: 'commit_range', data: { to: p(to) }, meta: { now: at(now) } })

t.test('creation: a name in use and the plan cap are refused', async (t) => {
  t.same(created.committed, p(10))
  t.same(created.delivered, p(10))
  t.throws(() => eventConsumerDecider.decide(create('sink', 1), created), EventConsumerExists)
  t.throws(() => eventConsumerDecider.decide(create('x', 3), null), EventConsumerLimitReached)
})

t.test('successive polls get successive ranges; the position moves only over ranges committed without a gap', async (t) => {
  let s = deliver(created, 10, 20)
  t.same(nextHandOut(s, at(1)), { kind: 'new', from: p(20) })
  s = deliver(s, 20, 30)
  t.throws(() => deliver(s, 20, 40), InvalidState, 'a poll that read from where another began loses')
  s = commit(s, 30)
  t.same(s.committed, p(10), 'the later range committed first: the position waits for the earlier one')
  t.equal(summaryOf(s).outstanding, 1)
  s = commit(s, 20)
  t.same(s.committed, p(30), 'then passes both')
  t.same(s.ranges, [])
  t.same(summaryOf(s).lease_until, null)
  t.same(eventConsumerDecider.decide({ type: 'commit_range', data: { to: p(20) }, meta: { now: t0 } }, s), [], 'committing again changes nothing')
  t.throws(() => commit(s, 35), InvalidState, "a cursor that is no poll's range")
})

t.test('a range not committed within its lease goes, whole, to the next poll', async (t) => {
  let s = deliver(created, 10, 20, 0)
  s = deliver(s, 20, 30, 1)
  t.same(nextHandOut(s, at(29)), { kind: 'new', from: p(30) }, 'within the lease a new range goes out')
  const next = nextHandOut(s, at(31))
  t.equal(next.kind, 'again')
  t.throws(() => deliver(s, 30, 40, 31), InvalidState, 'a new range may not pass an expired one')
  s = run(s, { type: 'redeliver_range', data: { from: p(10), to: p(20) }, meta: { now: at(31) } })
  t.same(nextHandOut(s, at(32)), { kind: 'again', range: s.ranges[1]! }, 'the second range expired too')
  s = commit(s, 20, 40)
  t.same(s.committed, p(20))
})

t.test('an empty range counts as committed; seek drops what is out; a deleted consumer refuses', async (t) => {
  let s = deliver(created, 10, 20, 0, true)
  t.same(s.committed, p(20), 'nothing to commit in it')
  s = deliver(s, 20, 30)
  s = deliver(s, 30, 40, 0, true)
  t.same(s.committed, p(20), 'an empty range behind one still out waits for it')
  s = commit(s, 30)
  t.same(s.committed, p(40))
  s = run(s, { type: 'seek_position', data: { position: p(5) }, meta: { now: t0 } })
  t.same([s.committed, s.delivered, s.ranges], [p(5), p(5), []])
  s = run(s, { type: 'delete_consumer', data: {}, meta: { now: t0 } })
  t.throws(() => deliver(s, 5, 10), EventConsumerNotFound)
})
