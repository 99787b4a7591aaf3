import t from 'tap'
import { InvalidState } from '../../domain/errors.ts'
import {
  flowGateDecider,
  gateNameOf,
  gatesOf,
  GateRefusal,
  holdGateOf,
  isHolderEnded,
  keyOf,
  queueOfGateName,
  tokensAt,
  type AttemptRef,
  type BucketRule,
  type FlowGateCommand,
  type FlowGateEvent,
  type FlowGateAggregate,
} from '../../domain/flow-gate.ts'
import type { FlowLimits } from '../../domain/project/index.ts'
import { deciderSpec } from '../support/decider-spec.ts'

// The flow gate (issue 29): slots, tokens and holds, decided without I/O.

const t0 = Date.parse('2026-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()
const address = { queue: 'emails', by: 'concurrency_key' as const, key: 'cust-1' }

const take = (
  jobId: string,
  options: { attempt?: number; concurrency?: number | null; rate?: BucketRule | null; seconds?: number; ended?: AttemptRef[] } = {},
): FlowGateCommand => ({
  type: 'take_gate',
  data: {
    ...address,
    job_id: jobId,
    attempt: options.attempt ?? 1,
    concurrency: options.concurrency === undefined ? 2 : options.concurrency,
    rate: options.rate ?? null,
    ended: options.ended ?? [],
  },
  meta: { now: at(options.seconds ?? 0) },
})
const free = (
  jobId: string,
  reason: 'ended' | 'unclaimed' | 'reconciled' = 'ended',
  rate: BucketRule | null = null,
  seconds = 0,
): FlowGateCommand => ({
  type: 'free_gate',
  data: { job_id: jobId, attempt: 1, reason, rate },
  meta: { now: at(seconds) },
})
const taken = (jobId: string, seconds = 0, token: number | null = null): FlowGateEvent => ({
  type: 'gate_slot_taken',
  data: { ...address, job_id: jobId, attempt: 1, taken_at: at(seconds), slot: true, token: token !== null, tokens: token },
})

/** Decides `command` on the state the events make, expecting a refusal; resolves to it. */
function refusalOf(given: FlowGateEvent[], command: FlowGateCommand): GateRefusal {
  const state = given.reduce<FlowGateAggregate>((s, e) => flowGateDecider.evolve(s, e), null)
  try {
    flowGateDecider.decide(command, state)
  } catch (err) {
    if (err instanceof GateRefusal) return err
    throw err
  }
  throw new Error('not refused')
}

t.test('slots up to the limit, then a refusal naming the oldest holder', async (t) => {
  const state = deciderSpec(t, flowGateDecider)
    .given([taken('job_a')])
    .when(take('job_b', { seconds: 1 }))
    .then([taken('job_b', 1)])
  t.same(
    state!.holders.map((h) => h.job_id),
    ['job_a', 'job_b'],
    'two holders, oldest first',
  )
  const refusal = refusalOf([taken('job_a'), taken('job_b', 1)], take('job_c'))
  t.equal(refusal.reason, 'concurrency')
  t.equal(refusal.oldestHolder?.job_id, 'job_a', 'the oldest holder is named (cancel_in_progress asks it to stop)')
  t.equal(refusal.retryAtMs, null, 'no time: a slot frees when an attempt ends')
})

t.test("another claim of the same attempt cannot count the first one's slot as its own", async (t) => {
  deciderSpec(t, flowGateDecider)
    .given([taken('job_a')])
    .when(take('job_a'))
    .thenThrows(InvalidState, 'invalid_state')
})

t.test('a freed slot makes room; a free of an attempt holding none changes nothing', async (t) => {
  const state = deciderSpec(t, flowGateDecider)
    .given([taken('job_a'), taken('job_b')])
    .when(free('job_a'))
    .then([{ type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, freed_at: at(0), reason: 'ended' } }])
  t.same(
    state!.holders.map((h) => h.job_id),
    ['job_b'],
  )
  deciderSpec(t, flowGateDecider)
    .given([taken('job_b')])
    .when(free('job_a'))
    .then([])
})

t.test("a free names its claim's hold: one meant for a claim handed back never frees the next claim of the same attempt", async (t) => {
  const takeHeld = (jobId: string, hold: string, seconds = 0): FlowGateCommand => {
    const command = take(jobId, { seconds })
    return { ...command, data: { ...(command.data as Extract<FlowGateCommand, { type: 'take_gate' }>['data']), hold } } as FlowGateCommand
  }
  const freeHeld = (jobId: string, hold: string, reason: 'ended' | 'unclaimed' = 'ended'): FlowGateCommand => ({
    type: 'free_gate',
    data: { job_id: jobId, attempt: 1, hold, reason, rate: null },
    meta: { now: at(0) },
  })
  const takenHeld = (jobId: string, hold: string, seconds = 0): FlowGateEvent => ({
    type: 'gate_slot_taken',
    data: { ...address, job_id: jobId, attempt: 1, hold, taken_at: at(seconds), slot: true, token: false, tokens: null },
  })
  deciderSpec(t, flowGateDecider)
    .given([])
    .when(takeHeld('job_a', 'h1'))
    .then([takenHeld('job_a', 'h1')])
  // Two claims of job_a's attempt 1 raced: h1's take stood and its job append lost; h2's job
  // append stood and its take did not. h2's hand-back frees nothing of h1's ...
  deciderSpec(t, flowGateDecider)
    .given([takenHeld('job_a', 'h1')])
    .when(freeHeld('job_a', 'h2'))
    .then([])
  // ... h1's give-back frees its own slot ...
  const freed = deciderSpec(t, flowGateDecider)
    .given([takenHeld('job_a', 'h1')])
    .when(freeHeld('job_a', 'h1', 'unclaimed'))
    .then([{ type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, hold: 'h1', freed_at: at(0), reason: 'unclaimed' } }])
  t.same(freed!.holders, [], 'the slot is free')
  // ... and once the next claim of the same number (h3) holds it, a late free of h1 or h2 changes nothing.
  const retaken: FlowGateEvent[] = [
    takenHeld('job_a', 'h1'),
    { type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, hold: 'h1', freed_at: at(0), reason: 'unclaimed' } },
    takenHeld('job_a', 'h3', 1),
  ]
  for (const late of ['h1', 'h2']) deciderSpec(t, flowGateDecider).given(retaken).when(freeHeld('job_a', late)).then([])
  const state = deciderSpec(t, flowGateDecider)
    .given(retaken)
    .when(freeHeld('job_a', 'h3'))
    .then([{ type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, hold: 'h3', freed_at: at(0), reason: 'ended' } }])
  t.same(state!.holders, [], "h3's own free frees it")
  // A holder written before holds were named is freed by its attempt alone.
  deciderSpec(t, flowGateDecider)
    .given([taken('job_a')])
    .when(freeHeld('job_a', 'h9'))
    .then([{ type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, hold: 'h9', freed_at: at(0), reason: 'ended' } }])
})

t.test('a take frees the ended holders its caller names, in its own event, before it counts the room', async (t) => {
  const ended = { job_id: 'job_a', attempt: 1 }
  const state = deciderSpec(t, flowGateDecider)
    .given([taken('job_a'), taken('job_b')])
    .when(take('job_c', { seconds: 2, ended: [ended, { job_id: 'job_gone', attempt: 3 }] }))
    .then([
      {
        type: 'gate_slot_taken',
        data: { ...address, job_id: 'job_c', attempt: 1, taken_at: at(2), slot: true, token: false, tokens: null, freed: [ended] },
      },
    ])
  t.same(
    state!.holders.map((h) => h.job_id),
    ['job_b', 'job_c'],
    'the ended holder is gone, the running one stays; an attempt the gate does not hold frees nothing',
  )
  const refusal = refusalOf([taken('job_a'), taken('job_b')], take('job_c', { ended: [{ job_id: 'job_a', attempt: 2 }] }))
  t.equal(refusal.reason, 'concurrency', "another attempt of a holder's job is not the holder")
  t.equal(refusal.oldestHolder?.job_id, 'job_a')
  const ofLiveOnly = refusalOf([taken('job_a'), taken('job_b'), taken('job_c')], take('job_d', { ended: [ended] }))
  t.equal(ofLiveOnly.oldestHolder?.job_id, 'job_b', 'a refusal names the oldest holder still running (cancel_in_progress asks it to stop)')
  deciderSpec(t, flowGateDecider)
    .given([taken('job_a')])
    .when(take('job_a', { ended: [ended] }))
    .then([
      {
        type: 'gate_slot_taken',
        data: { ...address, job_id: 'job_a', attempt: 1, taken_at: at(0), slot: true, token: false, tokens: null, freed: [ended] },
      },
    ])
})

t.test('one decision frees several ended holders, one event each (the reaper, once per idle gate)', async (t) => {
  const state = deciderSpec(t, flowGateDecider)
    .given([taken('job_a'), taken('job_b'), taken('job_c')])
    .when({
      type: 'free_gate_slots',
      data: {
        holders: [
          { job_id: 'job_c', attempt: 1 },
          { job_id: 'job_a', attempt: 1 },
          { job_id: 'job_x', attempt: 1 },
        ],
        reason: 'reconciled',
      },
      meta: { now: at(30) },
    })
    .then([
      { type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, freed_at: at(30), reason: 'reconciled' } },
      { type: 'gate_slot_freed', data: { job_id: 'job_c', attempt: 1, freed_at: at(30), reason: 'reconciled' } },
    ])
  t.same(
    state!.holders.map((h) => h.job_id),
    ['job_b'],
  )
  deciderSpec(t, flowGateDecider)
    .given([taken('job_b')])
    .when({ type: 'free_gate_slots', data: { holders: [{ job_id: 'job_a', attempt: 1 }], reason: 'reconciled' }, meta: { now: at(30) } })
    .then([], 'nothing held, nothing freed')
})

t.test('a holder ended when its job has moved past the attempt or stopped running it, or is gone', async (t) => {
  const holder = { job_id: 'job_a', attempt: 2 }
  t.equal(isHolderEnded({ attempt: 2, state: 'processing' }, holder), false, 'running it')
  t.equal(isHolderEnded({ attempt: 1, state: 'pending' }, holder), false, 'not claimed yet (the take comes before the claim), or released')
  t.equal(isHolderEnded({ attempt: 2, state: 'succeeded' }, holder), true, 'succeeded')
  t.equal(isHolderEnded({ attempt: 2, state: 'pending' }, holder), true, 'failed, waiting for its retry')
  t.equal(isHolderEnded({ attempt: 2, state: 'cancelled' }, holder), true, 'cancelled while running')
  t.equal(isHolderEnded({ attempt: 3, state: 'processing' }, holder), true, 'running a later attempt')
  t.equal(isHolderEnded(null, holder), true, 'deleted by retention')
})

t.test('a bucket of starts: burst at once, then refill at limit per period', async (t) => {
  const rule = { limit: 2, period_seconds: 10, burst: 2 }
  const rateOnly = { concurrency: null, rate: rule }
  let state: FlowGateAggregate = null
  for (const [i, jobId] of ['job_a', 'job_b'].entries()) {
    const events = flowGateDecider.decide(take(jobId, rateOnly), state)
    t.equal(events.length, 1, `start ${i + 1} takes a token`)
    state = events.reduce(flowGateDecider.evolve, state)
  }
  t.equal(state?.holders.length, 0, 'a rate alone holds no slot')
  try {
    flowGateDecider.decide(take('job_c', rateOnly), state)
    t.fail('the third start in the same instant is refused')
  } catch (err) {
    t.type(err, GateRefusal)
    t.equal((err as GateRefusal).reason, 'rate')
    t.equal((err as GateRefusal).retryAtMs, t0 + 5_000, 'one token comes back after period / limit')
  }
  t.equal(tokensAt(state, rule, at(5)), 1, 'refilled by one after 5 s')
  t.equal(tokensAt(state, rule, at(3600)), 2, 'never above the burst')
})

t.test('a token goes back only for the start that took it and did not happen', async (t) => {
  const rule = { limit: 1, period_seconds: 60, burst: 1 }
  const tokenTaken: FlowGateEvent = {
    type: 'gate_slot_taken',
    data: { ...address, job_id: 'job_a', attempt: 1, taken_at: at(0), slot: false, token: true, tokens: 0 },
  }
  const state = deciderSpec(t, flowGateDecider)
    .given([tokenTaken])
    .when(free('job_a', 'unclaimed', rule))
    .then([{ type: 'gate_slot_freed', data: { job_id: 'job_a', attempt: 1, freed_at: at(0), reason: 'unclaimed', tokens: 1 } }])
  t.equal(state!.tokens, 1)
  deciderSpec(t, flowGateDecider)
    .given([tokenTaken])
    .when(free('job_b', 'unclaimed', rule))
    .then([])
})

t.test("a worker's hold refuses every start until its time", async (t) => {
  const held: FlowGateEvent = { type: 'gate_held', data: { ...address, job_id: 'job_a', until: at(30), held_at: at(0) } }
  const refusal = refusalOf([held], take('job_b', { seconds: 10 }))
  t.equal(refusal.reason, 'held')
  t.equal(refusal.retryAtMs, t0 + 30_000)
  deciderSpec(t, flowGateDecider)
    .given([held])
    .when(take('job_b', { seconds: 31 }))
    .then([taken('job_b', 31)])
  deciderSpec(t, flowGateDecider)
    .given([held])
    .when({ type: 'hold_gate', data: { ...address, job_id: 'job_c', until: at(20) }, meta: { now: at(1) } })
    .then([])
})

t.test("a job's gates under its queue's limits", async (t) => {
  const job = { queue: 'emails', job_type: 'send', tags: { tenant: 't-9' }, concurrency_key: 'cust-1' }
  t.equal(keyOf(job, 'concurrency_key'), 'cust-1')
  t.equal(keyOf(job, 'job_type'), 'send')
  t.equal(keyOf(job, 'tag:tenant'), 't-9')
  t.equal(keyOf(job, 'tag:other'), null)
  const limits: FlowLimits = {
    concurrency: { limit: 10, per_key: { limit: 2, by: 'concurrency_key' }, strategy: 'cancel_newest' },
    rate: { limit: 5, period_seconds: 60, burst: 5, by: 'concurrency_key' },
  }
  const gates = gatesOf(limits, job)
  t.same(
    gates.map((g) => [g.by, g.key, g.concurrency, g.rate?.limit ?? null, g.strategy]),
    [
      ['concurrency_key', 'cust-1', 2, 5, 'cancel_newest'],
      [null, null, 10, null, 'cancel_newest'],
    ],
    "the key's concurrency and rate share its gate; the queue's gate comes last",
  )
  t.equal(holdGateOf(gates)?.key, 'cust-1', 'a rate_limited ack holds the gate that counts the starts')
  t.same(
    gatesOf(
      { concurrency: { limit: null, per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'queue' }, rate: null },
      { ...job, concurrency_key: undefined },
    ),
    [],
    'no key, no gate',
  )
  const name = gateNameOf({ queue: 'a|b"c', by: 'concurrency_key', key: 'x' })
  t.equal(queueOfGateName(name), 'a|b"c', 'a gate name keeps any queue name apart from its key')
})
