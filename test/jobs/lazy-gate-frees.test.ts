import t from 'tap'
import { gatesOf, type FlowGateEvent } from '../../domain/flow-gate.ts'
import type { FlowLimits } from '../../domain/project/index.ts'
import { flowGates } from '../../projections/flow-gates.ts'
import { reconcileGateSlots } from '../../services/roles/scheduler/index.ts'
import { gateRefOf, unclaimedSlotGraceMs } from '../../services/use-cases/jobs/flow-gates.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { gateHandler } from '../../streams/aggregates.ts'
import { eventually, startHarness, withClockShifted } from '../support/harness.ts'
import { newJobInput } from '../support/job-commands.ts'

/**
 * An attempt that ends by spending its number appends nothing on its flow gates: the next take
 * that needs the slot frees it in its own event, and the reaper frees what an idle gate still
 * holds, one append per gate. A release does not spend the attempt, so it frees its slot at once
 * and the job is claimed again under the same number. Real NATS and Postgres; JobServices on one
 * runtime stand for API processes, each with its own memory of the gates and of the attempts it ended.
 */
const h = await startHarness(t, import.meta.filename, { roles: ['projector'] })
const perKey = (limit: number): FlowLimits => ({
  concurrency: { limit: null, per_key: { limit, by: 'concurrency_key' }, strategy: 'queue' },
  rate: null,
})

const create = async (jobs: JobService, queue: string, key: string) =>
  (await jobs.create(h.projectId, { ...newJobInput({ job_type: 'lazy', queue }), concurrency_key: key })).job.id

const gateOf = (queue: string, key: string, limits: FlowLimits) =>
  gateRefOf(h.projectId, gatesOf(limits, { queue, job_type: 'lazy', tags: null, concurrency_key: key })[0]!)

/** The gate's messages, each as the types of its events. */
async function gateMessages(queue: string, key: string, limits: FlowLimits): Promise<FlowGateEvent[][]> {
  return (await gateHandler.history(h.runtime.store, gateOf(queue, key, limits))).map((m) => m.message.events as FlowGateEvent[])
}

/** What a take freed: each holder's job, attempt and the type of its hold (the claim's id). */
const freedBy = (event: FlowGateEvent) =>
  event.type === 'gate_slot_taken' ? (event.data.freed ?? []).map((f) => [f.job_id, f.attempt, typeof f.hold]) : null

const succeed = (jobs: JobService, jobId: string, workerId: string) =>
  jobs.ack(h.projectId, jobId, { worker_id: workerId, status: 'succeeded', duration_ms: 1, error: null })

t.test("a take frees the slot of the key's ended attempt in its own append; the end appended nothing on the gate", async (t) => {
  const limits = perKey(1)
  const jobs = new JobService(h.runtime)
  const [a, b] = [await create(jobs, 'q-fold', 'k'), await create(jobs, 'q-fold', 'k')]
  await jobs.claim(h.projectId, a, 'w1', undefined, false, limits)
  await succeed(jobs, a, 'w1')
  t.same(
    (await gateMessages('q-fold', 'k', limits)).map((m) => m.map((e) => e.type)),
    [['gate_slot_taken']],
    "a's success appended nothing on its gate",
  )

  const claimed = await jobs.claim(h.projectId, b, 'w1', undefined, false, limits)
  t.equal(claimed.state?.state, 'processing', 'b runs: the ended attempt left room')
  const messages = await gateMessages('q-fold', 'k', limits)
  t.equal(messages.length, 2, "b's take is one append")
  const take = messages[1]!
  t.same(
    take.map((e) => e.type),
    ['gate_slot_taken'],
  )
  t.same(freedBy(take[0]!), [[a, 1, 'string']], "and it freed a's slot, the hold its claim named")
  t.notOk(
    messages.flat().some((e) => e.type === 'gate_slot_freed'),
    'no gate_slot_freed anywhere',
  )

  // Another process, which did not see b end, checks b's job on the log before it counts the gate full.
  const other = new JobService(h.runtime)
  const c = await create(other, 'q-fold', 'k')
  await succeed(jobs, b, 'w1')
  const third = await other.claim(h.projectId, c, 'w2', undefined, false, limits)
  t.equal(third.state?.state, 'processing', 'c runs, claimed by a process that learnt from the log that b ended')
  const last = (await gateMessages('q-fold', 'k', limits)).at(-1)!
  t.same(freedBy(last[0]!), [[b, 1, 'string']], "c's take freed b's slot")

  // A running holder is not freed: the key stays at its limit.
  const d = await create(jobs, 'q-fold', 'k')
  const refused = await jobs.claim(h.projectId, d, 'w1', undefined, false, limits).then(
    () => null,
    (err: unknown) => err,
  )
  t.equal((refused as Error | null)?.name, 'LimitRefused', 'd waits while c runs')
})

t.test('a released attempt frees its slot at once and is claimed again under the same number', async (t) => {
  const limits = perKey(1)
  const jobs = new JobService(h.runtime)
  const a = await create(jobs, 'q-release', 'k')
  const first = await jobs.claim(h.projectId, a, 'w1', undefined, false, limits)
  t.equal(first.state?.attempt, 1)
  await jobs.rateLimited(h.projectId, a, 'w1', 1, () => limits)
  const released = await gateMessages('q-release', 'k', limits)
  t.same(
    released.flat().map((e) => (e.type === 'gate_slot_freed' ? `${e.type}:${e.data.reason}` : e.type)),
    ['gate_slot_taken', 'gate_slot_freed:ended', 'gate_held'],
    'the release freed its slot on the gate at once',
  )
  await new Promise((r) => setTimeout(r, 10))
  const again = await jobs.claim(h.projectId, a, 'w1', undefined, false, limits)
  t.equal(again.state?.state, 'processing', 'claimed again once its hold ran out')
  t.equal(again.state?.attempt, 1, 'under the same attempt number')
  const gate = await gateHandler.load(h.runtime.store, gateOf('q-release', 'k', limits))
  t.same(
    gate.state?.holders.map((x) => `${x.job_id}#${x.attempt}`),
    [`${a}#1`],
    'the slot is the new claim of attempt 1, once',
  )
})

t.test("the reaper frees an idle gate's ended holders in one append, and then leaves the gate alone", async (t) => {
  const limits = perKey(3)
  const jobs = new JobService(h.runtime)
  const ids = [await create(jobs, 'q-idle', 'k'), await create(jobs, 'q-idle', 'k'), await create(jobs, 'q-idle', 'k')]
  for (const id of ids) await jobs.claim(h.projectId, id, 'w1', undefined, false, limits)
  await succeed(jobs, ids[0]!, 'w1')
  await succeed(jobs, ids[1]!, 'w1')
  const gate = gateOf('q-idle', 'k', limits)
  const rowOf = async () => (await h.runtime.sql<{ running: number }[]>`SELECT running FROM flow_gates WHERE gate_id = ${gate.id}`)[0]
  // The read models have the ends (both the gate's row and the jobs' rows).
  await eventually(async () => {
    const [n] = await h.runtime.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE id = ANY(${ids.slice(0, 2)}) AND state = 'succeeded'`
    return n!.n === 2 && (await rowOf())?.running === 3
  })
  const scheduler = new JobService(h.runtime)
  t.equal(await reconcileGateSlots(h.runtime, scheduler), 0, 'a gate that moved within the grace is left alone')

  const later = unclaimedSlotGraceMs + 1_000
  const freed = await withClockShifted(h.runtime, later, () => reconcileGateSlots(h.runtime, scheduler))
  t.equal(freed, 2, 'both ended holders freed')
  const messages = (await gateHandler.history(h.runtime.store, gate)).map((m) => m.message.events)
  t.same(
    messages.at(-1)!.map((e) => (e.type === 'gate_slot_freed' ? `${e.data.job_id}:${e.data.reason}` : e.type)),
    [`${ids[0]}:reconciled`, `${ids[1]}:reconciled`],
    'in one message',
  )
  t.same(
    (await gateHandler.load(h.runtime.store, gate)).state?.holders.map((x) => x.job_id),
    [ids[2]],
    'the running one keeps its slot',
  )
  await eventually(async () => (await rowOf())?.running === 1)
  t.equal(await withClockShifted(h.runtime, later, () => reconcileGateSlots(h.runtime, scheduler)), 0, 'a pass after it frees nothing')
  const held = await withClockShifted(h.runtime, later, async () =>
    flowGates.heldSlots(h.runtime.sql, [], new Date(h.runtime.now().getTime() - unclaimedSlotGraceMs), 500),
  )
  t.notOk(
    held.some((g) => g.gate_id === gate.id),
    'and the gate, holding only a running attempt, is not scanned again',
  )
  const historyLength = messages.length
  t.equal((await gateHandler.history(h.runtime.store, gate)).length, historyLength, 'no further append')
})
