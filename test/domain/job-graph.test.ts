import t from 'tap'
import { isGraphBatch, planGraph } from '../../domain/job-graph.ts'
import { cascadeOf, cascadeOfState, jobDecider, toStoredJob, upgradeJob, type Job, type JobCommand } from '../../domain/job.ts'
import { createJobData } from '../support/job-commands.ts'

t.test('a batch is a graph when an item uses ref or depends_on_refs', async (t) => {
  t.notOk(isGraphBatch([{}, { depends_on: ['job_1'] }]))
  t.ok(isGraphBatch([{ ref: 'a' }, {}]))
  t.ok(isGraphBatch([{}, { depends_on_refs: ['a'] }]))
})

t.test('the diamond is created leaves first, roots last', async (t) => {
  const planned = planGraph([
    { ref: 'a' },
    { ref: 'b', depends_on_refs: ['a'] },
    { ref: 'c', depends_on_refs: ['a'] },
    { depends_on_refs: ['b', 'c'] },
  ])
  if (!planned.ok) return t.fail('a valid graph')
  t.same(planned.plan.parentsOf, [[], [0], [0], [1, 2]])
  t.same(planned.plan.childrenOf, [[1, 2], [3], [3], []])
  t.same(planned.plan.creationOrder, [[3], [1, 2], [0]], 'D, then B and C, then A')
})

t.test('a chain, a fan-out and unconnected items', async (t) => {
  const planned = planGraph([
    { ref: 'a' },
    { ref: 'x' },
    { ref: 'b', depends_on_refs: ['a'] },
    { depends_on_refs: ['b'] },
    { depends_on_refs: ['a'] },
  ])
  if (!planned.ok) return t.fail('a valid graph')
  t.same(planned.plan.creationOrder, [[1, 3, 4], [2], [0]], 'every item at its height above its deepest child')
})

t.test('what is not a graph, item by item', async (t) => {
  const errorsOf = (items: Parameters<typeof planGraph>[0]) => {
    const planned = planGraph(items)
    return planned.ok ? null : [...planned.errors.keys()]
  }
  t.same(errorsOf([{ depends_on_refs: ['a'] }, { ref: 'a' }]), [0], 'a ref to a later item: parents come first')
  t.same(errorsOf([{ ref: 'a', depends_on_refs: ['a'] }]), [0], 'its own ref')
  t.same(errorsOf([{ ref: 'a' }, { ref: 'a' }]), [1], 'a ref used twice')
  t.same(errorsOf([{ ref: 'a' }, { depends_on_refs: ['a', 'a'] }]), [1], 'a parent named twice')
  const many = Array.from({ length: 60 }, (_, i) => ({ ref: `p${i}` }))
  t.same(
    errorsOf([...many, { depends_on_refs: many.map((m) => m.ref), depends_on: Array.from({ length: 41 }, (_, i) => `job_${i}`) }]),
    [60],
    '101 parents',
  )
})

const now = '2026-01-01T00:00:00.000Z'
const meta = { now, random: 0 }

/** A graph job `job_c` waiting for `parents` under `rule`, as its create leaves it. */
function graphJob(rule: 'cancel' | 'run', parents: string[]): Job {
  const data = {
    ...createJobData({ job_id: 'job_c', project_id: 'prj' }),
    depends_on: parents,
    on_parent_failure: rule,
    waits_for_parent: true,
    waiting_for: parents,
  }
  const events = jobDecider.decide({ type: 'create_job', data, meta }, null)
  return events.reduce<Job | null>((s, e) => jobDecider.evolve(s, e), null)!
}

t.test('a graph job settles each parent once and is activated by the last', async (t) => {
  let job = graphJob('cancel', ['job_a', 'job_b'])
  const apply = (command: JobCommand) => {
    const events = jobDecider.decide(command, job)
    job = events.reduce<Job | null>((s, e) => jobDecider.evolve(s, e), job)!
    return events.map((e) => e.type)
  }
  t.equal(job.state, 'scheduled')
  t.same(apply({ type: 'activate_child', data: { parent_job_id: 'job_a' }, meta }), ['job_parent_settled'])
  t.same(apply({ type: 'activate_child', data: { parent_job_id: 'job_a' }, meta }), [], 'a repeat is a no-op')
  t.same(job.waiting_for, ['job_b'])
  t.same(apply({ type: 'activate_child', data: { parent_job_id: 'job_b' }, meta }), ['job_parent_settled', 'job_activated'])
  t.equal(job.state, 'pending')
  t.same(
    apply({ type: 'cancel_by_parent', data: { reason: 'parent_cancelled', parent_job_id: 'job_b' }, meta }),
    [],
    'an activated job is not cancelled by a parent',
  )
})

t.test('settlements decided together: in order, each on what the previous left', async (t) => {
  const settle = (job: Job, parents: Array<[string, 'succeeded' | 'dead_letter' | 'cancelled']>) =>
    jobDecider.decide({ type: 'settle_parents', data: { parents: parents.map(([id, outcome]) => ({ parent_job_id: id, outcome })) }, meta }, job)

  const three = graphJob('cancel', ['a', 'b', 'c'])
  t.same(
    settle(three, [
      ['a', 'succeeded'],
      ['a', 'succeeded'],
      ['b', 'succeeded'],
    ]).map((e) => [e.type, e.type === 'job_parent_settled' ? e.data.waiting : null]),
    [
      ['job_parent_settled', 2],
      ['job_parent_settled', 1],
    ],
    'a repeat within the batch settles nothing',
  )
  t.same(
    settle(three, [
      ['a', 'succeeded'],
      ['b', 'succeeded'],
      ['c', 'succeeded'],
    ]).map((e) => e.type),
    ['job_parent_settled', 'job_parent_settled', 'job_parent_settled', 'job_activated'],
    'the last one activates, once',
  )
  t.same(
    settle(three, [
      ['a', 'dead_letter'],
      ['b', 'succeeded'],
    ]).map((e) => e.type),
    ['job_cancelled'],
    'under cancel a failed parent cancels the job, and nothing after it counts',
  )
  t.same(
    settle(graphJob('run', ['a', 'b']), [
      ['a', 'cancelled'],
      ['b', 'succeeded'],
    ]).map((e) => e.type),
    ['job_parent_settled', 'job_parent_settled', 'job_activated'],
    'under run it settles and the job runs',
  )
})

t.test('a parent never created cancels the job whatever its rule, and its waiting children after it', async (t) => {
  const neverCreated: JobCommand = { type: 'cancel_by_parent', data: { reason: 'parent_never_created', parent_job_id: 'job_a' }, meta }
  for (const rule of ['cancel', 'run'] as const) {
    const job = graphJob(rule, ['job_a', 'job_b'])
    const events = jobDecider.decide(neverCreated, job)
    t.same(events, [{ type: 'job_cancelled', data: { reason: 'parent_never_created', previous_state: 'scheduled', cancelled_at: now } }], rule)
    const cancelled = events.reduce<Job | null>((s, e) => jobDecider.evolve(s, e), job)!
    t.equal(cancelled.cancel_reason, 'parent_never_created', `${rule}: the reason is kept on the job`)
    t.same(cascadeOf(events[0]!), { kind: 'cancel', reason: 'parent_never_created' }, `${rule}: its waiting children are cancelled alike`)
    t.same(cascadeOfState(cancelled), { kind: 'cancel', reason: 'parent_never_created' }, `${rule}: and so by the sweep, from its state`)
  }
  t.same(
    jobDecider.decide({ ...neverCreated, data: { ...neverCreated.data, parent_job_id: 'job_z' } }, graphJob('cancel', ['job_a'])),
    [],
    'a parent it does not wait for changes nothing',
  )
})

t.test("a graph job's messages carry what it waits for as a mask over its parents, read back as the ids", async (t) => {
  const parents = Array.from({ length: 100 }, (_, i) => `job_${String(i).padStart(26, '0')}`)
  const job = { ...graphJob('cancel', parents), waiting_for: parents.filter((_, i) => i % 3 !== 0) }
  const stored = toStoredJob(job)
  t.equal(stored.waiting_for, undefined, 'the ids are not written twice')
  t.equal(stored.waiting_mask?.length, 25, 'four parents a digit')
  const size = (x: unknown) => JSON.stringify(x).length
  t.ok(size(stored) < size(job) - size(job.waiting_for) + 50, 'smaller by the ids it no longer repeats')
  t.same(upgradeJob(stored, 7, []).waiting_for, job.waiting_for, 'read back exactly, in order')
  t.same(upgradeJob(job, 7, []).waiting_for, job.waiting_for, 'a state written with the ids (before the mask) reads as it did')
  const settled = { ...job, waiting_for: [] }
  t.same(upgradeJob(toStoredJob(settled), 7, []).waiting_for, [], 'nothing left to wait for')
  const unordered = { ...job, waiting_for: [parents[5]!, parents[1]!] }
  t.same(toStoredJob(unordered).waiting_for, unordered.waiting_for, 'what a mask cannot say exactly is kept as the ids')
  const plain = jobDecider.evolve(null, { type: 'job_created', data: createJobData({ job_id: 'job_p', project_id: 'prj' }) } as never)!
  t.equal(toStoredJob(plain), plain, 'a job outside a graph is stored as decided')
})
