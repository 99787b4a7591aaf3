import { auditLog } from '../../projections/audit-log.ts'
import t from 'tap'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { rebuildReadModels } from '../../services/roles/projector/rebuild.ts'
import { eventually, spawnService, startHarness, type Harness, type SpawnedService } from '../support/harness.ts'
import { projectionTables, readModels, tablesIn } from '../support/read-models.ts'

const totalJobs = 300
const createConcurrency = 8

const through = (h: Harness) => projectedThrough(h.runtime.sql, projections)

t.test('a projector killed mid-stream and restarted ends where an uninterrupted projection ends', async (t) => {
  // The API and scheduler run here; the projector runs in processes of its own that get SIGKILL.
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'scheduler'] })
  const env = { JOBSVC_NAMESPACE: h.config.namespace, DATABASE_URL: h.config.databaseUrl }
  const projectors: SpawnedService[] = []
  t.teardown(() => Promise.all(projectors.map((p) => p.stop('SIGKILL'))))
  const startProjector = async () => {
    const p = await spawnService(env, ['--role', 'projector'])
    projectors.push(p)
    return p
  }
  const req = async (method: string, path: string, body?: unknown, expected = 200) => {
    const res = await h.request(method, path, body)
    if (res.status !== expected) throw new Error(`${method} ${path} answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body
  }

  let projector = await startProjector()

  const created: string[] = []
  const producer = (async () => {
    let next = 0
    const runner = async () => {
      for (let i = next++; i < totalJobs; i = next++) {
        const job = await req(
          'POST',
          '/jobsvc/v1/jobs',
          {
            job_type: `kind-${i % 3}`,
            payload: { i, text: `job ${i}` },
            max_attempts: 1 + (i % 2),
            tags: i % 5 === 0 ? { batch: String(i % 7) } : null,
          },
          201,
        )
        created.push(job.id)
      }
    }
    await Promise.all(Array.from({ length: createConcurrency }, runner))
  })()

  // Workers claim whatever the job list offers and settle it: most succeed, every third fails
  // (retried later, or dead-lettered on its last attempt), some report progress first.
  // They stop once every job has had an attempt, leaving the retries' backoffs to run out unseen.
  const attempted = new Set<string>()
  let settled = 0
  // A safety bound only, so that a job missing from the list fails an assertion instead of hanging.
  const giveUpAt = Date.now() + 120_000
  const worker = (async () => {
    let round = 0
    while (attempted.size < totalJobs && Date.now() < giveUpAt) {
      const polled = await req('POST', '/jobsvc/v1/workers/poll', {
        worker_id: `w${round % 4}`,
        queues: ['default'],
        capacity: 10,
        wait_seconds: 0.2,
      })
      for (const job of polled.jobs as Array<{ id: string }>) {
        attempted.add(job.id)
        const n = settled++
        if (n % 4 === 0) await req('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: `w${round % 4}`, progress: 0.25 })
        const failed = n % 3 === 0
        await req('POST', '/jobsvc/v1/workers/ack', {
          job_id: job.id,
          worker_id: `w${round % 4}`,
          status: failed ? 'failed' : 'succeeded',
          duration_ms: n,
          ...(failed ? { error: { type: 'Flaky', message: `failure ${n}`, stack_trace: '' } } : {}),
        })
      }
      round++
    }
  })()

  // Awaited further down; until then a failure must not surface as an unhandled rejection.
  producer.catch(() => undefined)
  worker.catch(() => undefined)

  const gaps: number[] = []
  const kill = async () => {
    const projected = await through(h)
    gaps.push((await h.runtime.store.lastSequence()) - projected)
    await projector.stop('SIGKILL')
    // Postgres notices the dead client on its own time; until its sessions are gone a commit sent
    // just before the kill may still land, and its advisory lock may still be held.
    await eventually(
      async () => {
        const rows = await h.runtime.sql`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'jobsvc-projector'`
        return rows.length === 0
      },
      15_000,
      "the killed projector's sessions to end",
    )
  }

  // First kill: while jobs are still being created and claimed, with some already projected.
  await eventually(async () => created.length >= 60 && settled >= 10 && (await through(h)) > 0, 30_000, 'jobs to be projected and worked')
  await kill()
  const frozenAt = await through(h)
  // The log moves on with no projector: creations, claims of rows already projected, acks, and
  // a project and a recurring schedule (both written to their tables by their command paths).
  await eventually(async () => created.length >= 130, 30_000, 'more jobs to be created')
  const other = await h.newProject()
  await req('POST', '/jobsvc/v1/workers/register', {
    worker_id: 'w-reg',
    queues: ['default'],
    job_types: ['kind-0'],
    // Once a year (1 January, 00:00 UTC): a schedule that fired during the run would add a job to the count below.
    recurring_schedules: [{ job_type: 'kind-0', cron_expression: '0 0 1 1 *' }],
  })
  t.equal(await through(h), frozenAt, 'nothing advanced the checkpoints while no projector ran')
  t.ok((await h.runtime.store.lastSequence()) > frozenAt, 'the log moved past the read models meanwhile')

  projector = await startProjector()
  await eventually(async () => (await through(h)) > frozenAt && created.length >= 200, 30_000, 'the restarted projector to make progress')
  // A signed checkpoint of the Merkle log as this projector built it, killed right after.
  const checkpoint = await req('POST', '/jobsvc/v1/audit/checkpoints', undefined, 201)
  await kill()
  await eventually(async () => created.length >= 240, 30_000, 'more jobs to be created')
  projector = await startProjector()
  await producer

  await worker
  t.equal(attempted.size, totalJobs, 'every job was claimed at least once')
  const last = await eventually(
    async () => {
      const seq = await h.runtime.store.lastSequence()
      return (await through(h)) === seq ? seq : null
    },
    30_000,
    'the projector to reach the end of the log',
  )
  t.comment(`projector killed twice, ${gaps.join(' and ')} messages behind the log; ${settled} attempts settled; log ends at ${last}`)
  await projector.stop('SIGTERM')

  const live = await readModels(h.runtime.sql)
  t.same(tablesIn(live), projectionTables(), 'the comparison covers every read-model table')
  t.equal(live.jobs.length, totalJobs, 'every created job has its row')
  t.same(
    { projects: live.projects.length, api_keys: live.api_keys.length, recurring_jobs: live.recurring_jobs.length },
    { projects: 2, api_keys: 2, recurring_jobs: 1 },
    'both projects, their keys and the schedule have rows',
  )
  const states = await h.runtime.sql<{ state: string }[]>`SELECT DISTINCT state FROM jobs ORDER BY state`
  t.same(
    states.map((r) => r.state).filter((s) => s !== 'pending'),
    ['dead_letter', 'succeeded'],
    'jobs ended succeeded or dead-lettered (or pending a retry)',
  )
  t.ok(
    live.projects.some((r) => r.includes(other.projectId)),
    'the project created meanwhile is projected',
  )

  // Damage the tables first, so that equality afterwards shows a real rebuild from sequence 1.
  await h.runtime.sql`DELETE FROM jobs WHERE id = ${created[0]!}`
  await h.runtime.sql`UPDATE jobs SET state = 'cancelled' WHERE id = ${created[1]!}`
  await h.runtime.sql`DELETE FROM api_keys WHERE project_id = ${other.projectId}`
  await h.runtime.sql`DELETE FROM audit_tiles WHERE project_id = ${h.projectId} AND level = 0 AND idx = 0`
  const rebuilt = await rebuildReadModels(h.runtime, () => undefined)
  t.equal(rebuilt.through, last, 'the rebuild read the whole log')
  t.equal(await h.runtime.store.lastSequence(), last, 'nothing was appended meanwhile')
  t.same(await readModels(h.runtime.sql), live, 'the read models equal an uninterrupted projection row by row')
  t.equal(
    await auditLog.root(h.runtime.sql, h.projectId, checkpoint.tree_size),
    checkpoint.root_hash,
    'the Merkle log rebuilt from the log has the root the checkpoint signed while projectors were killed',
  )
})
