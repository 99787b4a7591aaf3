import t from 'tap'
import { gatesOf, LimitRefused } from '../../domain/flow-gate.ts'
import type { FlowLimits } from '../../domain/project/index.ts'
import { gateRefOf } from '../../services/use-cases/jobs/flow-gates.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { gateHandler, jobHandler } from '../../streams/aggregates.ts'
import { startHarness } from '../support/harness.ts'
import { newJobInput } from '../support/job-commands.ts'

/**
 * A claim under a flow limit appends its gate's take and the job's claim together when this
 * process's last word on the gate says it has room (issue 29's claim latency). Two JobServices on
 * one runtime stand for two API processes, each with its own knowledge of the gates: the first's
 * goes stale when the second takes the key's only slot, so its next claim's take is refused on
 * the log after the claim itself was appended. That claim must be handed back before any worker
 * could see it, and the slot stays the second's alone.
 */
const h = await startHarness(t, import.meta.filename, { roles: [] })
const limits: FlowLimits = { concurrency: { limit: null, per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'queue' }, rate: null }

const create = async (jobs: JobService, key: string) =>
  (await jobs.create(h.projectId, { ...newJobInput({ job_type: 'beside', queue: 'q-beside' }), concurrency_key: key })).job.id

t.test("a claim appended beside a take the gate refuses is handed back, and the key's slot stays with its holder", async (t) => {
  const first = new JobService(h.runtime)
  const second = new JobService(h.runtime)
  const a = await create(first, 'k')
  const b = await create(first, 'k')
  const c = await create(first, 'k')

  // The first process takes the key's slot, then frees it by its ack: it knows the gate as empty.
  await first.claim(h.projectId, a, 'w1', undefined, false, limits)
  await first.ack(h.projectId, a, { worker_id: 'w1', status: 'succeeded', duration_ms: 1, error: null })
  // The second process takes the slot for b; the first does not know.
  await second.claim(h.projectId, b, 'w2', undefined, false, limits)

  const refused = await first.claim(h.projectId, c, 'w1', undefined, false, limits).then(
    () => null,
    (err: unknown) => err,
  )
  t.ok(refused instanceof LimitRefused, 'the claim of c is refused by its gate')

  const history = (await jobHandler.history(h.runtime.store, jobHandler.ref(h.projectId, c))).flatMap((m) => m.message.events)
  const types = history.map((e) => e.type)
  t.same(types.slice(0, 3), ['job_created', 'job_claimed', 'job_released'], 'the claim was appended, then handed back')
  const released = history.find((e) => e.type === 'job_released')
  t.equal(released?.type === 'job_released' && released.data.reason, 'limit_refused', 'with the reason limit_refused')
  const job = (await first.load(h.projectId, c)).job
  t.equal(job.state, 'pending', 'c waits for its key')
  t.equal(job.attempt, 0, 'its attempt not spent')

  const gate = await gateHandler.load(h.runtime.store, gateRefOf(h.projectId, gatesOf(limits, job)[0]!))
  t.same(
    gate.state?.holders.map((x) => x.job_id),
    [b],
    'the slot is held by b alone',
  )

  // Once b ends, c is claimed (by the process whose knowledge was stale: it learnt the gate's state).
  await second.ack(h.projectId, b, { worker_id: 'w2', status: 'succeeded', duration_ms: 1, error: null })
  const claimed = await first.claim(h.projectId, c, 'w1', undefined, false, limits)
  t.equal(claimed.state!.state, 'processing', 'c runs after b')
  t.equal(claimed.state!.attempt, 1, 'as attempt 1')
})

t.test('a claim beside a take that another claim of the job beats leaves no slot behind', async (t) => {
  const first = new JobService(h.runtime)
  const second = new JobService(h.runtime)
  const warm = await create(first, 'k2')
  // Both processes learn the gate (empty again after warm's ack).
  await first.claim(h.projectId, warm, 'w1', undefined, false, limits)
  await first.ack(h.projectId, warm, { worker_id: 'w1', status: 'succeeded', duration_ms: 1, error: null })
  const d = await create(first, 'k2')
  const known = await first.load(h.projectId, d)
  await second.claim(h.projectId, d, 'w2', undefined, false, limits)
  // The first claims d on its stale view of the job: its take and claim both lose.
  const lost = await first.claim(h.projectId, d, 'w1', { state: known.job, seq: known.seq }, true, limits).then(
    () => null,
    (err: unknown) => err,
  )
  t.ok(lost instanceof Error && !(lost instanceof LimitRefused), `the claim loses the job (${(lost as Error)?.name})`)
  const job = (await first.load(h.projectId, d)).job
  t.equal(job.worker_id, 'w2', 'd runs for the second process')
  const gate = await gateHandler.load(h.runtime.store, gateRefOf(h.projectId, gatesOf(limits, job)[0]!))
  t.same(
    gate.state?.holders.map((x) => `${x.job_id}#${x.attempt}`),
    [`${d}#1`],
    "the slot is d's running attempt's, once",
  )
})
