import { pino } from 'pino'
import t from 'tap'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { recurringHandler } from '../../streams/aggregates.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

/**
 * The recurring pass under a tenant with hundreds of due schedules. Nothing here reads the read
 * models, so the harness runs no projector: what a schedule fired is read from its own events
 * (`recurring_fired`, with the occurrence and the job it created), not from how fast anything went.
 */
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'scheduler'] })
const everySecond = '* * * * * *'
const window = 10

/** Every occurrence the schedule fired, in order, with the job it created (null: skipped). */
async function firedOccurrences(projectId: string, id: string): Promise<Array<{ at: number; job: string | null }>> {
  const records = await recurringHandler.history(h.runtime.store, recurringHandler.ref(projectId, id))
  return records
    .flatMap((r) => r.message.events)
    .flatMap((e) => (e.type === 'recurring_fired' ? [{ at: Date.parse(e.data.occurrence_at), job: e.data.job_id }] : []))
}

/** Waits for `window` seconds of the schedule's occurrences; answers those it fired and the gaps between them. */
async function watchOccurrences(projectId: string, id: string): Promise<{ fired: Array<{ at: number; job: string | null }>; gaps: string[] }> {
  let fired: Array<{ at: number; job: string | null }> = []
  await eventually(
    async () => {
      fired = await firedOccurrences(projectId, id)
      return fired.length > 0 && fired.at(-1)!.at - fired[0]!.at >= window * 1000
    },
    60_000,
    `${window} s of the occurrences of ${id}`,
  )
  const iso = (ms: number) => new Date(ms).toISOString()
  const gaps = fired.slice(1).flatMap((f, i) => (f.at - fired[i]!.at === 1000 ? [] : [`${iso(fired[i]!.at)} → ${iso(f.at)}`]))
  return { fired, gaps }
}

/** Runs `work` for 0..count-1, `atOnce` at a time. */
async function inTurns(count: number, atOnce: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: atOnce }, async () => {
      for (let i = next++; i < count; i = next++) await work(i)
    }),
  )
}

t.test("300 every-second schedules of one project do not make another project's every-second schedule skip an occurrence", async (t) => {
  const busy = 300
  await inTurns(busy, 10, async (i) => {
    const res = await h.request('PUT', `/jobsvc/v1/recurring/rjob_busy-${i}`, { job_type: `busy ${i}`, cron_expression: everySecond })
    if (res.status !== 201) throw new Error(`PUT answered ${res.status}: ${JSON.stringify(res.body)}`)
  })
  const other = await createProject(h.runtime, { name: 'other', plan: 'business', ownerEmail: null, keyEnvironment: 'test' })
  const put = await httpRequest(h.url, other.apiKey, 'PUT', '/jobsvc/v1/recurring/rjob_tick', { job_type: 'tick', cron_expression: everySecond })
  t.equal(put.status, 201, JSON.stringify(put.body))

  const { fired, gaps } = await watchOccurrences(other.project.id, 'rjob_tick')
  t.same(gaps, [], `each of ${fired.length} occurrences fired, one second after the last: none skipped`)
  t.same(
    fired.filter((f) => f.job === null).map((f) => new Date(f.at).toISOString()),
    [],
    'and each created its job',
  )

  // The busy project kept the scheduler busy all along: every one of its schedules fired, most of them several times.
  const busyFirings = await Promise.all(Array.from({ length: busy }, (_, i) => firedOccurrences(h.projectId, `rjob_busy-${i}`)))
  t.equal(busyFirings.filter((f) => f.length > 0).length, busy, 'every busy schedule fired')
  const total = busyFirings.reduce((n, f) => n + f.length, 0)
  t.ok(total >= 2 * busy, `the busy project's schedules fired ${total} occurrences meanwhile`)
  await inTurns(busy, 10, async (i) => void (await h.request('DELETE', `/jobsvc/v1/recurring/rjob_busy-${i}`)))
})

t.test("a schedule that keeps failing is logged and skipped, and never heads its project's queue", async (t) => {
  const logged: Array<{ msg: string; recurring_id?: string }> = []
  const quiet = h.runtime.log
  h.runtime.log = pino({ level: 'error' }, { write: (line: string) => void logged.push(JSON.parse(line)) })
  t.teardown(() => void (h.runtime.log = quiet))
  const { project, apiKey } = await createProject(h.runtime, { name: 'poisoned', plan: 'business', ownerEmail: null, keyEnvironment: 'test' })
  const put = (id: string, jobType: string) =>
    httpRequest(h.url, apiKey, 'PUT', `/jobsvc/v1/recurring/${id}`, { job_type: jobType, cron_expression: everySecond })

  // Rows the log knows nothing of (a read model restored from elsewhere): firing one throws, every
  // time. More of them, and older, than a pass reads.
  const poisoned = 600
  await h.runtime.sql`
    INSERT INTO recurring_jobs (project_id, id, status, job_type, cron_expression, queue, timezone, max_attempts, timeout_seconds,
      next_run_at, created_at, updated_at, last_seq)
    SELECT ${project.id}, 'rjob_poisoned-' || n, 'active', 'poisoned ' || n, ${everySecond}, 'default', 'UTC', 3, 1800,
      now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', 0
    FROM generate_series(1, ${poisoned}) AS n`
  // A schedule deleted in the log whose row still reads active and due: the delete's write of the row was lost.
  t.equal((await put('rjob_gone', 'gone')).status, 201, 'a schedule is created')
  t.equal((await httpRequest(h.url, apiKey, 'DELETE', '/jobsvc/v1/recurring/rjob_gone')).status, 204, 'and deleted')
  await h.runtime.sql`
    UPDATE recurring_jobs SET status = 'active', next_run_at = now() - interval '2 hours', last_seq = last_seq - 1
    WHERE project_id = ${project.id} AND id = 'rjob_gone'`

  const healthyPutAt = Date.now()
  t.equal((await put('rjob_healthy', 'healthy')).status, 201, 'a healthy schedule is created beside them')
  const { fired, gaps } = await watchOccurrences(project.id, 'rjob_healthy')
  const watchedMs = Date.now() - healthyPutAt
  t.same(gaps, [], `the project's healthy schedule fired each of ${fired.length} occurrences`)

  const [gone] = await h.runtime.sql<{ status: string }[]>`SELECT status FROM recurring_jobs WHERE project_id = ${project.id} AND id = 'rjob_gone'`
  t.equal(gone?.status, 'deleted', "the deleted schedule's row was written again from the log, and left the due rows")

  const failures = new Map<string, number>()
  for (const line of logged) {
    if (line.msg.startsWith('scheduler: a recurring schedule could not fire') && line.recurring_id?.startsWith('rjob_poisoned-'))
      failures.set(line.recurring_id, (failures.get(line.recurring_id) ?? 0) + 1)
  }
  t.equal(failures.size, poisoned, 'each poisoned schedule was tried, and its failure logged with its id')
  // Retried after 1 s, then 2, 4, 8…: within the watch, far fewer tries than passes.
  const mostTries = Math.max(...failures.values())
  t.ok(mostTries <= Math.log2(watchedMs / 1000) + 2, `a poisoned schedule was tried at most ${mostTries} times in ${watchedMs} ms`)
})
