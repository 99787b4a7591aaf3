import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'
import { jobsApi } from '../support/jobs-api.ts'
import { createJobData } from '../support/job-commands.ts'
import type { ParentFailureRule } from '../../domain/job.ts'
import { jobHandler } from '../../streams/aggregates.ts'
import { cancelOrphanedGraphJobs } from '../../services/roles/scheduler/index.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'

// Graph batches a crash cut short (issue 30): createGraph appends the leaves first, each naming
// parents of the batch that do not exist yet, so a process that died on the way leaves jobs
// waiting for ids that never come to exist. The scheduler's sweep cancels them once they are
// older than `graph_orphan_grace_ms`, and only when the log, not just the read model, lacks the
// parent. The jobs are appended here as createGraph appends them, through the job handler, with
// their creation dated back where the test needs them past the grace.
const grace = 30_000
const h = await startHarness(t, import.meta.filename, { tunables: { cascade_sweep_interval_ms: 100, graph_orphan_grace_ms: grace } })
const { getJob, ack, claimOne } = jobsApi(h, { jobType: 'orphan' })
const jobs = new JobService(h.runtime)

/** Appends a graph job of a batch as createGraph does: waiting for `parents`, created `ageMs` ago. */
async function appendGraphJob(job: { queue: string; parents: string[]; rule?: ParentFailureRule; children?: string[]; ageMs?: number; id?: string }) {
  const id = job.id ?? jobs.newJobId()
  await jobHandler.decide(h.runtime, jobHandler.ref(h.projectId, id), {
    type: 'create_job',
    data: {
      ...createJobData({ job_id: id, project_id: h.projectId }),
      job_type: 'orphan',
      queue: job.queue,
      depends_on: job.parents,
      on_parent_failure: job.rule ?? 'cancel',
      waits_for_parent: job.parents.length > 0,
      waiting_for: job.parents,
      ...(job.children === undefined ? {} : { children: job.children }),
    },
    meta: { now: new Date(Date.now() - (job.ageMs ?? 0)).toISOString(), random: 0 },
  })
  return id
}

const cancelledEvents = async (jobId: string) =>
  (await jobHandler.history(h.runtime.store, jobHandler.ref(h.projectId, jobId)))
    .flatMap((m) => m.message.events)
    .filter((e) => e.type === 'job_cancelled')
    .map((e) => e.data)

/** Claims the job on its own queue and acks it succeeded. */
async function finish(job: { id: string; queue: string }): Promise<void> {
  const claimed = await claimOne(job.queue, 'wrk_o')
  if (claimed.id !== job.id) throw new Error(`claimed ${claimed.id}, not ${job.id}`)
  const res = await ack({ job_id: job.id, worker_id: 'wrk_o', status: 'succeeded' })
  if (res.status !== 200) throw new Error(`ack answered ${res.status}: ${JSON.stringify(res.body)}`)
}

t.test('a batch cut short past the grace is cancelled, parent never created; one still within it is left alone', async (t) => {
  // Appended first, so that the read model holds it before the orphans below (the projector
  // applies the log in order): the pass that finds them has seen it too.
  const young = await appendGraphJob({ queue: 'o-young', parents: [jobs.newJobId()] })
  // The batch A → B → C, created leaves first, whose process died before it appended A. C runs
  // under `run`, which a parent's cancel would let it run: a graph never created whole must not.
  const [a, b, c] = [jobs.newJobId(), jobs.newJobId(), jobs.newJobId()]
  await appendGraphJob({ id: c, queue: 'o-c', parents: [b], rule: 'run', ageMs: 2 * grace })
  await appendGraphJob({ id: b, queue: 'o-b', parents: [a], children: [c], ageMs: 2 * grace })

  const cancelledB = await eventually(async () => ((await getJob(b)).state === 'cancelled' ? getJob(b) : null), 15_000, 'the sweep to cancel B')
  t.equal(cancelledB.cancel_reason, 'parent_never_created', 'B: its parent was never created')
  const onLog = await cancelledEvents(b)
  t.equal(onLog.length, 1, 'cancelled once, on the log')
  t.match(onLog[0], { reason: 'parent_never_created', previous_state: 'scheduled' })
  const cancelledC = await eventually(async () => ((await getJob(c)).state === 'cancelled' ? getJob(c) : null), 15_000, 'C cancelled with B')
  t.equal(cancelledC.cancel_reason, 'parent_never_created', 'C, waiting on B under run, is cancelled for the same reason')
  t.equal((await cancelledEvents(c)).length, 1)

  t.equal(await cancelOrphanedGraphJobs(h.runtime, jobs), 0, 'a pass finds nothing more to cancel')
  const waiting = await getJob(young)
  t.same([waiting.state, waiting.cancel_reason], ['scheduled', undefined], 'the job within its grace still waits')
  t.same(await cancelledEvents(young), [])

  // Its batch goes on: the parent is created, naming it, and runs.
  const parent = waiting.waiting_for[0]
  await appendGraphJob({ id: parent, queue: 'o-young-p', parents: [], children: [young] })
  await finish({ id: parent, queue: 'o-young-p' })
  const ran = await eventually(async () => ((await getJob(young)).state === 'pending' ? getJob(young) : null), 15_000, 'the young job activated')
  t.same(ran.waiting_for, [])
})

t.test('a parent on the log that the read model has yet to reach is not taken for one never created', async (t) => {
  await h.stopRole('scheduler')
  t.teardown(() => h.startRole('scheduler'))
  const parent = jobs.newJobId()
  const child = await appendGraphJob({ queue: 'o-lag', parents: [parent], ageMs: 2 * grace })
  await eventually(async () => (await h.runtime.sql`SELECT 1 FROM jobs WHERE id = ${child}`).length === 1, 15_000, 'the child in the read model')
  await h.stopRole('projector')
  await appendGraphJob({ id: parent, queue: 'o-lag-p', parents: [], children: [child] })
  t.equal(await cancelOrphanedGraphJobs(h.runtime, jobs), 0, 'missing from the read model, found on the log: left alone')
  t.equal((await jobs.load(h.projectId, child)).job.state, 'scheduled')
  await h.startRole('projector')
  await finish({ id: parent, queue: 'o-lag-p' })
  await eventually(async () => (await getJob(child)).state === 'pending', 15_000, 'the child activated by its parent')
  t.same(await cancelledEvents(child), [])
})
