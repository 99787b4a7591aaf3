import t from 'tap'
import type { JobCommand } from '../../domain/job.ts'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { jobHandler } from '../../streams/aggregates.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { eventually, startHarness } from '../support/harness.ts'
import { createJobData } from '../support/job-commands.ts'
import { readModels } from '../support/read-models.ts'
import { runReplay } from '../support/replay-process.ts'

// Issue 23, item 2: once the cause of a projection failure is fixed, an operator re-projects it
// with `npm run replay -- --subject <subject>` or `--project <project_id>`: the failed messages
// are applied again with the projector's own code, the resolved failures cleared, and nothing
// else is emptied or touched, other tenants' rows included, while the projector runs.
t.test('npm run replay -- --subject and --project re-project the failed messages once fixed, and nothing else', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['projector'] })
  const { sql, store } = h.runtime
  const other = await h.newProject()
  let n = 0
  const append = async (projectId: string, data: { job_type: string; payload?: Record<string, unknown> }): Promise<EventRecord> => {
    const id = `job_01J10000000000000000000${String(n++).padStart(3, '0')}`
    const command: JobCommand = {
      type: 'create_job',
      data: createJobData({ job_id: id, project_id: projectId, ...data }),
      meta: { now: new Date().toISOString() },
    }
    const ref = jobHandler.ref(projectId, id)
    return (await jobHandler.decide(h.runtime, ref, command)).record as EventRecord
  }
  const caughtUp = async () => {
    const last = await store.lastSequence()
    return (await projectedThrough(sql, projections)) === last
  }

  // An operator's mistake makes the job list refuse some rows (a constraint: SQLSTATE 23514).
  await sql`ALTER TABLE jobs ADD CONSTRAINT refuses_blocked CHECK (job_type <> 'blocked')`
  const blockedHere = await append(h.projectId, { job_type: 'blocked', payload: { here: 1 } })
  const poisoned = await append(h.projectId, { job_type: 'poisoned', payload: { text: 'a\u0000b' } })
  const blockedThere = await append(other.projectId, { job_type: 'blocked', payload: { there: 2 } })
  await append(h.projectId, { job_type: 'fine' })
  await append(other.projectId, { job_type: 'fine' })
  await eventually(caughtUp, 15_000, 'the projector past the failures')
  const failures = async () =>
    (await sql<{ subject: string; projected: string }[]>`SELECT subject, projected FROM projection_failures ORDER BY seq`).map((f) => [
      f.subject,
      f.projected,
    ])
  t.same(
    await failures(),
    [
      [blockedHere.subject, 'skipped'],
      [poisoned.subject, 'sanitised'],
      [blockedThere.subject, 'skipped'],
    ],
    'each refused job is recorded: the blocked ones skipped (their copy breaks the constraint too), the poisoned one copied',
  )
  const ids = [blockedHere, poisoned, blockedThere].map((r) => r.message.aggregate_id)
  const rowOf = async (id: string) =>
    (
      await sql<
        { job_type: string; payload: unknown; sanitised_seq: number | null }[]
      >`SELECT job_type, payload, sanitised_seq FROM jobs WHERE id = ${id}`
    )[0]
  const untouched = async () => {
    const { jobs: _jobs, projection_failures: _failures, ...rest } = await readModels(sql)
    const jobs = await sql`SELECT r::text AS row FROM jobs r WHERE NOT (id = ANY(${ids})) ORDER BY id`
    return { ...rest, jobs: jobs.map((r) => r.row) }
  }
  const before = await untouched()

  /** Runs the re-projection with `args`, which must succeed and write the blocked job's own row. */
  const reprojects = async (args: string[], blocked: EventRecord, payload: Record<string, unknown>, what: string) => {
    const run = await runReplay(h, args)
    t.equal(run.code, 0, run.output)
    t.strictSame(await rowOf(blocked.message.aggregate_id), { job_type: 'blocked', payload, sanitised_seq: null }, what)
  }

  await sql`ALTER TABLE jobs DROP CONSTRAINT refuses_blocked`
  await reprojects(['--subject', blockedHere.subject], blockedHere, { here: 1 }, '--subject writes its row')
  t.equal(await rowOf(blockedThere.message.aggregate_id), undefined, "another tenant's failure is left as it is")
  t.same(
    await failures(),
    [
      [poisoned.subject, 'sanitised'],
      [blockedThere.subject, 'skipped'],
    ],
    'its failure is cleared',
  )

  await reprojects(['--project', other.projectId], blockedThere, { there: 2 }, '--project writes its rows')
  t.same(await failures(), [[poisoned.subject, 'sanitised']])

  const listed = await runReplay(h, ['--failures'])
  t.equal(listed.code, 0)
  t.match(listed.output, poisoned.subject, '--failures lists what still fails, with its subject')

  const unfixed = await runReplay(h, ['--project', h.projectId])
  t.equal(unfixed.code, 2, 'a message that still fails makes the re-projection exit with 2')
  t.match(unfixed.output, /still cannot hold message/)
  t.same(await failures(), [[poisoned.subject, 'sanitised']], 'and stays recorded')
  t.strictSame(
    await rowOf(poisoned.message.aggregate_id),
    { job_type: 'poisoned', payload: { text: 'a\ufffdb' }, sanitised_seq: poisoned.seq },
    'its job keeps its storable copy',
  )

  await eventually(caughtUp, 15_000, 'the projector caught up')
  t.same(await untouched(), before, 'no other row of any read model changed, and no checkpoint moved back')
})
