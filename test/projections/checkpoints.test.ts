import t from 'tap'
import { ulid } from 'ulid'
import { applyBatch, projectedThrough, readCheckpoints, resetReadModels } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { jobList } from '../../projections/job-list.ts'
import { projectDirectory } from '../../projections/project-directory.ts'
import type { Projection } from '../../projections/projection.ts'
import { jobHandler, projectHandler } from '../../streams/aggregates.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'
import { createJobData } from '../support/job-commands.ts'

const { sql, store } = await openIsolatedStore(t, import.meta.filename)

const projectId = 'prj_checkpoints'
const meta = () => ({ now: new Date().toISOString(), random: 0 })
const writer = { store, newUlid: ulid }

/** Creates a job and returns its message as read back from the log. */
async function newJob(): Promise<EventRecord> {
  const ref = jobHandler.ref(projectId, `job_${ulid()}`)
  await jobHandler.decide(writer, ref, {
    type: 'create_job',
    data: createJobData({ job_id: ref.id, project_id: projectId, job_type: 'report', max_attempts: 1 }),
    meta: meta(),
  })
  return (await store.history(ref)).at(-1)!
}

async function newProject(): Promise<EventRecord> {
  const id = `prj_${ulid().toLowerCase()}`
  const ref = projectHandler.ref(id)
  await projectHandler.decide(writer, ref, {
    type: 'create_project',
    data: {
      project_id: id,
      name: 'p',
      plan: 'free',
      owner_email: null,
      key: { prefix: `jobsvc_test_${ulid().slice(0, 12)}`, key_hash: 'f'.repeat(64) },
    },
    meta: meta(),
  })
  return (await store.history(ref)).at(-1)!
}

const jobIds = async () => (await sql<{ id: string }[]>`SELECT id FROM jobs ORDER BY id`).map((r) => r.id)
const idOf = (r: EventRecord) => r.message.aggregate_id
const checkpoints = async () => Object.fromEntries(await readCheckpoints(sql, projections))

t.beforeEach(() => resetReadModels(sql, projections))

t.test('a batch advances every projection to its last sequence', async (t) => {
  const records = [await newJob(), await newJob()]
  const last = await applyBatch(sql, projections, records)
  t.equal(last, records[1]!.seq)
  t.same(
    await checkpoints(),
    {
      'project-directory': last,
      'job-list': last,
      'job-metrics': last,
      'recurring-jobs': last,
      alerts: last,
      webhooks: last,
      deliveries: last,
      event_consumers: last,
      flow_gates: last,
      operations: last,
      activity: last,
      audit_log: last,
    },
    'even the projections that handled none of it',
  )
  t.equal(await projectedThrough(sql, projections), last)
  t.same(await jobIds(), records.map(idOf).sort())
})

t.test('records at or below the checkpoint are skipped', async (t) => {
  const [a, b] = [await newJob(), await newJob()]
  await applyBatch(sql, [jobList], [a!, b!])
  await sql`DELETE FROM jobs`
  t.equal(await applyBatch(sql, [jobList], [a!, b!]), b!.seq)
  t.same(await jobIds(), [], 'a redelivered batch is not applied again')
  t.same(await checkpoints(), { 'job-list': b!.seq })
  const c = await newJob()
  await applyBatch(sql, [jobList], [a!, b!, c])
  t.same(await jobIds(), [idOf(c)], 'of a batch straddling the checkpoint, only the newer records are applied')
  t.same(await checkpoints(), { 'job-list': c.seq })
})

t.test('each projection keeps its own checkpoint', async (t) => {
  const job = await newJob()
  const project = await newProject()
  await applyBatch(sql, [jobList], [job])
  await sql`DELETE FROM jobs`
  await applyBatch(sql, projections, [job, project])
  t.same(await checkpoints(), {
    'job-list': project.seq,
    'job-metrics': project.seq,
    'project-directory': project.seq,
    'recurring-jobs': project.seq,
    alerts: project.seq,
    webhooks: project.seq,
    deliveries: project.seq,
    event_consumers: project.seq,
    flow_gates: project.seq,
    operations: project.seq,
    activity: project.seq,
    audit_log: project.seq,
  })
  t.same(await jobIds(), [], 'the job list skipped the job it had already applied')
  const [directory] = await sql`SELECT count(*)::int AS n FROM projects WHERE id = ${idOf(project)}`
  t.equal(directory!.n, 1, 'while the project directory, behind it, applied the same batch')
  t.equal(await projectedThrough(sql, [jobList, projectDirectory]), project.seq)
})

t.test('a batch is applied entirely or not at all', async (t) => {
  const before = await newJob()
  await applyBatch(sql, projections, [before])
  const failing: Projection = {
    name: 'failing',
    handles: ['job_created'],
    tables: [],
    apply: async () => {
      throw new Error('boom')
    },
  }
  const job = await newJob()
  await t.rejects(applyBatch(sql, [jobList, failing], [job]), { message: 'boom' })
  t.same(await jobIds(), [idOf(before)], 'the job list, applied before the failure, was rolled back')
  t.equal((await checkpoints())['job-list'], before.seq, 'and so was its checkpoint')
  t.same(await sql`SELECT name FROM projection_checkpoints WHERE name = 'failing'`, [])
})

t.test('an empty batch writes nothing', async (t) => {
  t.equal(await applyBatch(sql, projections, []), 0)
  t.same(await checkpoints(), {})
  t.equal(await projectedThrough(sql, projections), 0)
})

t.test('resetReadModels empties the given read models and their checkpoints only', async (t) => {
  const job = await newJob()
  const project = await newProject()
  await applyBatch(sql, projections, [job, project])
  await resetReadModels(sql, [jobList])
  t.same(await jobIds(), [])
  t.same(await checkpoints(), {
    'project-directory': project.seq,
    'job-metrics': project.seq,
    'recurring-jobs': project.seq,
    alerts: project.seq,
    webhooks: project.seq,
    deliveries: project.seq,
    event_consumers: project.seq,
    flow_gates: project.seq,
    operations: project.seq,
    activity: project.seq,
    audit_log: project.seq,
  })
  const [count] = await sql`SELECT count(*)::int AS n FROM projects`
  t.equal(count!.n, 1, 'the project directory is untouched')
  await resetReadModels(sql, projections)
  t.same(await checkpoints(), {})
  t.same(await sql`SELECT id FROM projects UNION ALL SELECT prefix FROM api_keys UNION ALL SELECT id FROM recurring_jobs`, [])
})
