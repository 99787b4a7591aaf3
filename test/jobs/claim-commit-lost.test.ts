import { pino } from 'pino'
import t from 'tap'
import { openSql } from '../../projections/database.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import * as projector from '../../services/roles/projector/index.ts'
import { claimForPolls, type ClaimedJob } from '../../services/use-cases/jobs/claimer.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { answerWithin, eventually, isolatedNames, removeIsolated, testConfig } from '../support/harness.ts'
import { newJobInput } from '../support/job-commands.ts'
import { startPrivatePostgres } from '../support/private-postgres.ts'

// Issue 23, item 5: a poll's read-model claim appends each claim to the log inside a transaction
// that only holds the rows. When Postgres lost that transaction before its commit, the poll failed
// although its claims stood in the log, and those jobs waited in `processing` for the reaper. The
// claim transaction's session is ended here (on a private Postgres) while its claims are appended.
t.test('claims appended before the claim transaction is lost are still answered', async (t) => {
  const pg = await startPrivatePostgres(t)
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const config = testConfig({ ...names, databaseUrl: pg.url('jobsvc_claims') })
  const runtime = await openRuntime(config, pino({ level: 'silent' }), 'jobsvc-test')
  t.teardown(() => runtime.close())
  t.teardown(await projector.start(runtime))
  const { project } = await createProject(runtime, { name: 'claims', plan: 'business', ownerEmail: null, keyEnvironment: 'test' })
  const jobs = new JobService(runtime)
  const newJob = newJobInput({ job_type: 'lost-commit', queue: 'q' })
  const created = [await jobs.create(project.id, newJob), await jobs.create(project.id, newJob)].map((w) => w.job.id)
  const admin = openSql(config.databaseUrl, { max: 1 })
  t.teardown(() => admin.end({ timeout: 1 }))
  await eventually(
    async () => (await admin`SELECT 1 FROM jobs WHERE id = ANY(${created}) AND state = 'pending'`).length === 2,
    15_000,
    'both jobs pending in the read model',
  )

  // The claims wait at a gate, inside the claim transaction, until its session is gone.
  let waiting = 0
  let open: () => void = () => undefined
  const gate = new Promise<void>((resolve) => (open = resolve))
  class GatedJobs extends JobService {
    override async claim(...args: Parameters<JobService['claim']>) {
      waiting++
      await gate
      return super.claim(...args)
    }
  }
  const claiming = claimForPolls(runtime, new GatedJobs(runtime), { projectId: project.id, queues: ['q'], jobTypes: null }, [
    { workerId: 'w', capacity: 2 },
  ]).then(
    (claimed) => claimed,
    (err: unknown) => err,
  )
  await eventually(async () => waiting === 2, 15_000, 'both claims under way')
  const [session] = await admin<{ pid: number }[]>`
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND state = 'idle in transaction' AND query LIKE '%SKIP LOCKED%'`
  t.ok(session, 'the claim transaction holds its rows')
  await admin`SELECT pg_terminate_backend(${session!.pid})`
  await eventually(async () => (await admin`SELECT 1 FROM pg_stat_activity WHERE pid = ${session!.pid}`).length === 0, 15_000, 'its session ended')
  // The transaction rejects as soon as its connection closes, while the claims are still held at
  // the gate: a poll that answers meanwhile has given up on them. A bound, not a timing assertion.
  await answerWithin(claiming, 2_000)
  open()

  const answer = await claiming
  t.notOk(answer instanceof Error, `the poll is answered${answer instanceof Error ? `, not refused: ${answer.message}` : ''}`)
  t.same((answer as ClaimedJob[][])[0]!.map((claimed) => claimed.job.id).sort(), [...created].sort(), 'with both jobs it claimed')
  for (const id of created) t.match((await jobs.get(project.id, id)).job, { state: 'processing', worker_id: 'w' }, `${id} is claimed in the log`)
})
