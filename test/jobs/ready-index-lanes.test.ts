import t from 'tap'
import type { Job } from '../../domain/job.ts'
import {
  Lanes,
  maxLanesPerProject,
  type JobView,
  type Lane,
  type QueueSnapshot,
  type ReadyIndexLimits,
} from '../../services/use-cases/jobs/ready-index/lanes.ts'
import { newLaneWakeups, PollSession, Wakeups, type HasWakeups } from '../../services/use-cases/jobs/ready-index/poll-session.ts'

/**
 * The ready index's lanes (services/use-cases/jobs/ready-index/lanes.ts) and poll sessions, with
 * no NATS and no Postgres: bounds, gaps, tombstones, staleness, and who is woken for what. The
 * index against the real servers is test/api/ready-index.test.ts.
 */

/** The lanes never look into a job's state, only whether they hold one: any value stands for it. */
const someState = {} as Job
const t0 = Date.parse('2026-01-01T00:00:00.000Z')

const roomy: ReadyIndexLimits = { jobsPerProject: 100, jobs: 1_000, stateBytes: 1_000_000 }

function lanesWith(limits: Partial<ReadyIndexLimits> = {}) {
  const roomFor: string[] = []
  const lanes = new Lanes<HasWakeups>({ ...roomy, ...limits }, { hasRoom: (lane) => void roomFor.push(`${lane.projectId}/${lane.queue}`) })
  const open = (projectId: string, queues: string[], position = 0) =>
    lanes.open(projectId, queues, position, t0, () => ({ wakeups: newLaneWakeups(t0) }))
  return { lanes, roomFor, open }
}

/** `priority`: the job's, in seconds; it ranks the job `priority` seconds before its due time. */
function view(id: string, dueAt = t0, jobType = 'email', payloadBytes = 0, priority = 0): JobView {
  const payload = payloadBytes === 0 ? null : { value: { id }, bytes: payloadBytes }
  return { id, jobType, dueAt, rankAt: dueAt - priority * 1000, job: someState, payload }
}

function snapshot(through: number, rows: Array<{ id: string; seq: number; dueAt?: number; priority?: number }>, complete = true): QueueSnapshot {
  return {
    through,
    complete,
    rows: rows.map((r) => ({
      id: r.id,
      jobType: 'email',
      dueAt: new Date(r.dueAt ?? t0),
      rankAt: new Date((r.dueAt ?? t0) - (r.priority ?? 0) * 1000),
      seq: r.seq,
      job: someState,
      payload: null,
      payloadBytes: 10,
    })),
  }
}

const ids = (cs: ReadonlyArray<{ jobId: string }>) => cs.map((c) => c.jobId)

t.test('candidates are taken earliest due first, only when due and of the types asked for', async (t) => {
  const { lanes, open } = lanesWith()
  const [a, b] = open('p1', ['a', 'b'])
  lanes.hold(a!, view('j3', t0 + 3), 3, 10)
  lanes.hold(a!, view('j1', t0 + 1), 1, 10)
  lanes.hold(b!, view('j2', t0 + 2, 'sms'), 2, 10)
  lanes.hold(b!, view('j9', t0 + 9), 9, 10)
  t.same(ids(lanes.take([a!, b!], null, 10, t0 + 5)), ['j1', 'j2', 'j3'], 'both lanes merged in due order; j9 is not due')
  t.same(ids(lanes.take([a!, b!], null, 10, t0 + 5)), [], 'taken candidates are out of reach until settled')
  t.same(ids(lanes.take([b!], new Set(['sms']), 10, t0 + 100)), [], 'j9 is not of the type asked for')
  t.same(ids(lanes.take([b!], null, 1, t0 + 100)), ['j9'])
  t.equal(lanes.size, 4, 'taken candidates still count against the bounds')
})

t.test('settling: claimed and lost forget the candidate, unknown puts it back', async (t) => {
  const { lanes, open } = lanesWith()
  const [q] = open('p1', ['q'])
  const [c1, c2, c3] = ['j1', 'j2', 'j3'].map((id, n) => lanes.hold(q!, view(id), n + 1, 10)!)
  lanes.take([q!], null, 3, t0)
  t.notOk(lanes.settle(c1!, 'claimed'))
  t.notOk(lanes.settle(c2!, 'lost'))
  t.ok(lanes.settle(c3!, 'unknown'), 'an unknown outcome goes back, to be offered again')
  t.same(ids(q!.queued), ['j3'])
  t.equal(lanes.size, 1)
  t.ok(lanes.isStale('j2', 1), 'a lost claim is remembered: a row at its sequence is stale')
  t.notOk(lanes.isStale('j1', 0), 'a claim this process made is not a removal')
  t.notOk(lanes.settle(c3!, 'claimed'), 'a candidate not taken again is settled by no one')
})

t.test('bounds per project: past it a job is dropped and the lane opens a gap at its sequence', async (t) => {
  const { lanes, roomFor, open } = lanesWith({ jobsPerProject: 4 })
  const [q] = open('p1', ['q'])
  const cs = [1, 2, 3, 4].map((n) => lanes.hold(q!, view(`j${n}`), n, 10))
  lanes.fill(q!, 0, snapshot(0, []))
  t.equal(q!.gapSeq, null, 'complete with room to spare')
  t.equal(lanes.hold(q!, view('j5'), 5, 10), null, 'the fifth job finds no room')
  t.equal(q!.gapSeq, 5, 'the lane can vouch for its queue no more, up to that sequence')
  t.notOk(lanes.isComplete('p1', ['q']))
  t.ok(lanes.incomplete.has(q!))
  t.equal(lanes.size, 4)
  t.ok(lanes.held('j4') !== undefined && lanes.held('j5') === undefined, 'what is held stays; the new job is the one dropped')
  lanes.take([q!], null, 4, t0)
  lanes.settle(cs[0]!, 'claimed')
  lanes.settle(cs[1]!, 'claimed')
  t.same(roomFor, [], 'two of four left: not yet half the room back')
  lanes.settle(cs[2]!, 'claimed')
  t.same(roomFor, ['p1/q'], 'one of four left (under half the bound): the lane may be read again')
})

t.test('bounds in all: every project counts against the total', async (t) => {
  const { lanes, open } = lanesWith({ jobsPerProject: 10, jobs: 3 })
  const [p1] = open('p1', ['q'])
  const [p2] = open('p2', ['q'])
  lanes.hold(p1!, view('a1'), 1, 10)
  lanes.hold(p1!, view('a2'), 2, 10)
  lanes.hold(p2!, view('b1'), 3, 10)
  t.equal(lanes.hold(p2!, view('b2'), 4, 10), null, 'the total is reached, whichever project')
  t.equal(p2!.gapSeq, 4)
  t.ok(lanes.hasRoomFor(p1!) === false, 'no lane has room while the total is reached')
})

t.test('the state budget: past it candidates are held without state or payload', async (t) => {
  const { lanes, open } = lanesWith({ stateBytes: 100 })
  const [q] = open('p1', ['q'])
  const first = lanes.hold(q!, view('j1', t0, 'email', 30), 1, 60)!
  const second = lanes.hold(q!, view('j2', t0, 'email', 30), 2, 60)!
  t.same([first.job !== null, first.payload], [true, { id: 'j1' }])
  t.same([second.job, second.payload, second.bytes], [null, null, 0], 'the claim loads it instead')
  t.equal(lanes.stateBytes, 60)
  t.equal(lanes.stateBytesLeft, 40)
  lanes.resize(first, 90)
  t.equal(lanes.stateBytes, 90, "a candidate is counted at its message's size once the log tells it")
})

t.test('gaps: a cold lane is complete once a snapshot at or past its gap is whole', async (t) => {
  const { lanes, open } = lanesWith()
  const [q] = open('p1', ['q'], 40)
  t.equal(q!.gapSeq, 40, 'a new lane may miss every job up to the last message followed')
  t.equal(lanes.fill(q!, 40, snapshot(39, [{ id: 'j1', seq: 12 }])), null, 'a read model behind the gap is of no use')
  t.equal(lanes.size, 0)
  t.same(ids(lanes.fill(q!, 40, snapshot(40, [{ id: 'j1', seq: 12 }], false))!), ['j1'], 'rows are held')
  t.equal(q!.gapSeq, 40, 'but a snapshot cut at the bound leaves the gap open')
  lanes.hold(q!, view('j2'), 45, 10)
  t.same(
    ids(
      lanes.fill(
        q!,
        40,
        snapshot(42, [
          { id: 'j1', seq: 12 },
          { id: 'j2', seq: 41 },
        ]),
      )!,
    ),
    [],
    'what the index knows newer wins over the rows',
  )
  t.equal(q!.gapSeq, null, 'complete: every pending job at the snapshot is held, the follower has the rest')
  t.ok(lanes.isComplete('p1', ['q']))
  t.notOk(lanes.isComplete('p1', ['q', 'other']), 'a queue never opened is not vouched for')
})

t.test('gaps: a bound reached while filling keeps the lane incomplete, up to the snapshot', async (t) => {
  const { lanes, open } = lanesWith({ jobsPerProject: 2 })
  const [q] = open('p1', ['q'], 5)
  const added = lanes.fill(
    q!,
    5,
    snapshot(9, [
      { id: 'j1', seq: 1 },
      { id: 'j2', seq: 2 },
      { id: 'j3', seq: 3 },
    ]),
  )
  t.same(ids(added!), ['j1', 'j2'])
  t.equal(q!.gapSeq, 9, 'the gap moves to the snapshot: a later one at or past it may complete the lane')
})

t.test('tombstones: a removed job is not brought back by an older message or row, until forgotten', async (t) => {
  const { lanes, open } = lanesWith()
  const [q] = open('p1', ['q'])
  lanes.hold(q!, view('j1'), 3, 10)
  lanes.remove('p1', 'j1', 7)
  t.equal(lanes.size, 0)
  t.equal(lanes.floor('j1'), 7)
  lanes.fill(q!, 0, snapshot(5, [{ id: 'j1', seq: 3 }]))
  t.equal(lanes.held('j1'), undefined, "a lagging read model's row does not bring it back")
  lanes.remove('p1', 'j1', 6)
  t.equal(lanes.floor('j1'), 7, 'an older removal does not lower it')
  lanes.remove('p2', 'j9', 8)
  t.equal(lanes.floor('j9'), 0, 'a job of a project no poll asked for is not remembered')
  lanes.forgetRemovalsThrough(6)
  t.equal(lanes.floor('j1'), 7, 'kept while the follower or the read model is before it')
  lanes.forgetRemovalsThrough(7)
  t.equal(lanes.floor('j1'), 0, 'forgotten once both passed it')
})

t.test('staleness: the index tells a read-model row behind what it knows', async (t) => {
  const { lanes, open } = lanesWith()
  const [q] = open('p1', ['q'])
  lanes.hold(q!, view('j1'), 5, 10)
  t.ok(lanes.isStale('j1', 4), 'a row at an older sequence')
  t.notOk(lanes.isStale('j1', 5), 'a row at the held sequence')
  t.notOk(lanes.isStale('unknown', 1), 'a job the index knows nothing of')
  lanes.hold(q!, view('j1'), 8, 10)
  t.equal(lanes.size, 1, 'a newer message replaces the candidate')
  t.ok(lanes.isStale('j1', 5))
})

t.test('idle lanes are dropped with their candidates; busy and recent ones stay', async (t) => {
  const { lanes, open } = lanesWith()
  const [idle, busy, recent] = open('p1', ['idle', 'busy', 'recent'])
  const [other] = open('p2', ['q'])
  recent!.idleSince = t0 + 50
  lanes.hold(idle!, view('j1'), 1, 10)
  const dropped: string[] = []
  lanes.dropIdle(
    t0 + 100,
    100,
    (lane) => lane === busy,
    (lane) => void dropped.push(`${lane.projectId}/${lane.queue}`),
  )
  t.same(dropped.sort(), ['p1/idle', 'p2/q'])
  t.equal(lanes.size, 0, "a dropped lane's candidates are forgotten")
  t.equal(lanes.laneOf('p1', 'idle'), undefined)
  t.notOk(lanes.isFollowed(other!))
  t.notOk(lanes.hasProject('p2'), 'a project without lanes is forgotten')
  t.ok(lanes.hasProject('p1'))
})

t.test(`past ${maxLanesPerProject} queues of a project, a lane is never followed`, async (t) => {
  const { lanes, open } = lanesWith()
  open(
    'p1',
    Array.from({ length: maxLanesPerProject }, (_, n) => `q${n}`),
  )
  const [extra] = open('p1', ['one-too-many'])
  t.equal(extra!.gapSeq, Number.POSITIVE_INFINITY, 'always incomplete: its polls use the read model')
  t.notOk(lanes.isFollowed(extra!))
  t.equal(lanes.laneOf('p1', 'one-too-many'), undefined)
})

function sessionsWith(clock: () => number = () => t0) {
  const { lanes, open } = lanesWith()
  const wakeups = new Wakeups(clock)
  let live = true
  const scope = { lanes, wakeups, isLive: () => live, idleNow: () => t0 }
  const session = (lanesOf: Lane<HasWakeups>[], capacity = 1, jobTypes: string[] | null = null) => new PollSession(scope, lanesOf, jobTypes, capacity)
  return { lanes, open, wakeups, session, setLive: (v: boolean) => (live = v) }
}

const never = new AbortController().signal

t.test('a job wakes one waiting poll, of its type and with room, not the herd', async (t) => {
  const { lanes, open, wakeups, session } = sessionsWith()
  const [q] = open('p1', ['q'])
  const smsOnly = session([q!], 1, ['sms'])
  const first = session([q!])
  const second = session([q!])
  const waits = [smsOnly, first, second].map((s) => s.wait(50, never))
  wakeups.offer(q!, [lanes.hold(q!, view('j1'), 1, 10)!])
  t.same(await Promise.all(waits), ['timeout', 'woken', 'timeout'], 'the first poll that takes emails')
  wakeups.offer(q!, [lanes.hold(q!, view('j2'), 2, 10)!])
  t.equal(await second.wait(50, never), 'woken', 'the first, woken already for its capacity, is passed over')
  t.same(ids(first.take(5)), ['j1', 'j2'], 'a take sees every due candidate of its queues')
  for (const s of [smsOnly, first, second]) s.close()
})

t.test('a poll closed before taking what it was woken for passes it on; a future job wakes at its due time', async (t) => {
  const { lanes, open, wakeups, session } = sessionsWith(() => Date.now())
  const [q] = open('p1', ['q'])
  const leaving = session([q!])
  const staying = session([q!])
  wakeups.offer(q!, [lanes.hold(q!, view('j1', Date.now() - 1), 1, 10)!])
  leaving.close()
  t.equal(await staying.wait(50, never), 'woken', 'the next poll is woken for it')
  t.same(ids(staying.take(1)), ['j1'])
  const due = Date.now() + 30
  wakeups.offer(q!, [lanes.hold(q!, view('j2', due), 2, 10)!])
  t.same(staying.take(1), [], 'not before it is due')
  t.equal(await staying.wait(5_000, never), 'woken', "the lane's timer wakes the poll")
  t.ok(Date.now() >= due, 'no earlier than due')
  t.same(ids(staying.take(1)), ['j2'])
  staying.close()
})

t.test('a waiting poll ends at its deadline or on abort, and is complete only while every lane is and the log is followed', async (t) => {
  const { lanes, open, session, setLive } = sessionsWith()
  const [q] = open('p1', ['q'], 3)
  const s = session([q!])
  t.notOk(s.isComplete(), 'a cold lane')
  lanes.fill(q!, 3, snapshot(3, []))
  t.ok(s.isComplete())
  setLive(false)
  t.notOk(s.isComplete(), 'not while the log is not followed')
  const aborting = new AbortController()
  const waiting = s.wait(60_000, aborting.signal)
  aborting.abort()
  t.equal(await waiting, 'aborted')
  t.equal(await s.wait(10, never), 'timeout')
  s.close()
  t.equal(q!.parts.wakeups.sessions.size, 0, 'a closed session leaves its lanes')
})

t.test('priorities: a lane takes due jobs by due time − priority, never one before it is due', async (t) => {
  const { lanes, open } = lanesWith()
  const [q] = open('p1', ['q'])
  lanes.hold(q!, view('plain', t0), 1, 10)
  lanes.hold(q!, view('high', t0 + 5_000, 'email', 0, 60), 2, 10)
  lanes.hold(q!, view('low', t0 - 5_000, 'email', 0, -60), 3, 10)
  t.same(ids(q!.queued), ['high', 'plain', 'low'], 'ranked at t0 − 55 s, t0 and t0 + 55 s')
  t.same(ids(lanes.take([q!], null, 10, t0)), ['plain', 'low'], 'high ranks first but is not due until t0 + 5 s')
  t.same(ids(lanes.take([q!], null, 10, t0 + 5_000)), ['high'])
})

t.test('priorities: equal due times are taken highest priority first, across the lanes of a poll', async (t) => {
  const { lanes, open } = lanesWith()
  const [a, b] = open('p1', ['a', 'b'])
  lanes.hold(a!, view('a0', t0), 1, 10)
  lanes.hold(a!, view('a600', t0, 'email', 0, 600), 2, 10)
  lanes.hold(b!, view('b-600', t0, 'email', 0, -600), 3, 10)
  lanes.hold(b!, view('b30', t0, 'email', 0, 30), 4, 10)
  t.same(ids(lanes.take([a!, b!], null, 10, t0)), ['a600', 'b30', 'a0', 'b-600'])
})

t.test('no starvation: an old low-priority job beats high-priority ones due 1,200 s after it', async (t) => {
  const { lanes, open } = lanesWith({ jobsPerProject: 10_000, jobs: 10_000 })
  const [q] = open('p1', ['q'])
  lanes.hold(q!, view('aged-low', t0, 'email', 0, -600), 1, 10)
  // A steady stream of priority-600 jobs, one per second, from t0 on: each ranks 600 s before its due time.
  for (let s = 0; s <= 1_300; s++) lanes.hold(q!, view(`high-${String(s).padStart(4, '0')}`, t0 + s * 1000, 'email', 0, 600), s + 2, 10)
  const order: string[] = []
  // A worker taking one job a second keeps up with the stream; the old job waits its turn.
  for (let s = 0; s <= 1_300; s++) order.push(...ids(lanes.take([q!], null, 1, t0 + s * 1000)))
  const at = order.indexOf('aged-low')
  t.ok(at >= 0, 'the low-priority job is claimed while the stream goes on')
  t.equal(order[at - 1], 'high-1199', 'after the high jobs due up to 1,199 s after it (ranked before t0 + 600 s)')
  t.equal(order[at + 1], 'high-1200', 'and before those due from 1,200 s after it (a tie of ranks goes by id)')
})

t.test('priorities: a poll is woken at the earliest due time, whatever the ranks, and a re-ranked job moves', async (t) => {
  const { lanes, open, wakeups, session } = sessionsWith(() => Date.now())
  const [q] = open('p1', ['q'])
  const s = session([q!])
  const soon = Date.now() + 40
  // Ranked first, due last; then ranked last, due first: the timer follows the due times.
  wakeups.offer(q!, [lanes.hold(q!, view('late-high', soon + 60_000, 'email', 0, 600), 1, 10)!])
  wakeups.offer(q!, [lanes.hold(q!, view('soon-low', soon, 'email', 0, -600), 2, 10)!])
  t.same(ids(q!.queued), ['late-high', 'soon-low'])
  t.equal(await s.wait(5_000, never), 'woken', 'woken when soon-low is due')
  t.ok(Date.now() >= soon)
  t.same(ids(s.take(5)), ['soon-low'], 'late-high is still not due')
  lanes.hold(q!, view('late-high', soon + 60_000, 'email', 0, -600), 3, 10)
  t.same(ids(q!.queued), ['late-high'], 'held again at its new sequence, once')
  t.equal(q!.queued[0]!.rankAt, soon + 660_000, 'ranked by its new priority')
  s.close()
})
