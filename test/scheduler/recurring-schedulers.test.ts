import t from 'tap'
import { decodeTime } from 'ulid'
import { occurrenceJobId } from '../../services/use-cases/jobs/recurring-service.ts'
import { connectNats } from '../../streams/connection.ts'
import { eventsStreamConfig } from '../../streams/definitions.ts'
import { eventually, httpRequest, type HttpResponse, type SpawnedService } from '../support/harness.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

const periodMs = 2_000
const every2s = '*/2 * * * * *'
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** The occurrence a job was created for: the time part of its ULID id. */
const occurrenceOf = (job: { id: string }) => decodeTime(job.id.replace(/^job_/, ''))
const iso = (ms: number) => new Date(ms).toISOString()

/** Gaps between consecutive occurrences longer than one period plus one missed occurrence. */
function gapsOverOneMissed(occurrences: number[]): string[] {
  const gaps: string[] = []
  for (let i = 1; i < occurrences.length; i++) {
    if (occurrences[i]! - occurrences[i - 1]! > 2 * periodMs) gaps.push(`${iso(occurrences[i - 1]!)} → ${iso(occurrences[i]!)}`)
  }
  return gaps
}

t.test('schedulers in several processes fire each occurrence once, and catch up once after downtime', async (t) => {
  const install = await spawnedInstall(t, import.meta.filename, { config: { tunables: { scheduler_interval_ms: 50 } } })
  const start = (roles: string) => install.start(['--role', roles])
  const stop = async (svc: SpawnedService) => t.equal(await install.stop(svc), 0, 'a scheduler shut down cleanly')
  // Started one after the other: the first creates the streams and runs the migrations.
  const api = await start('api,projector')
  const [s1, s2] = await Promise.all([start('scheduler'), start('scheduler')])

  const sql = install.openSql()
  const nats = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', 'jobsvc-test')
  t.teardown(() => nats.nc.close())

  const { projectId, apiKey } = await createProjectWithCli({ ...install.env, LOG_LEVEL: 'silent' }, 'cron')
  const call = (method: string, path: string, body?: unknown): Promise<HttpResponse> => httpRequest(api.url, apiKey, method, path, body)

  const jobsOf = async (jobType: string): Promise<any[]> => {
    const all: any[] = []
    let cursor: string | null = null
    do {
      const res: HttpResponse = await call(
        'GET',
        `/jobsvc/v1/jobs?job_type=${jobType}&limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      )
      if (res.status !== 200) throw new Error(`list answered ${res.status}: ${JSON.stringify(res.body)}`)
      all.push(...res.body.data)
      cursor = res.body.next_cursor
    } while (cursor !== null)
    return all.sort((a, b) => occurrenceOf(a) - occurrenceOf(b))
  }
  const firedAtOrAfter = (jobType: string, at: number, count: number) =>
    eventually(
      async () => (await jobsOf(jobType)).filter((j) => occurrenceOf(j) >= at).length >= count,
      30_000,
      `${count} ${jobType} jobs from ${iso(at)}`,
    )
  /** Every job in the read model: the projector has applied the whole log. */
  const projected = async () => {
    const last = (await nats.jsm.streams.info(eventsStreamConfig(install.env.JOBSVC_NAMESPACE!).name)).state.last_seq
    await eventually(
      async () => {
        const [row] = await sql<{ n: number | null }[]>`SELECT min(last_seq)::int AS n FROM projection_checkpoints`
        return (row?.n ?? 0) >= last
      },
      20_000,
      `the projections to reach seq ${last}`,
    )
  }

  await t.test('a bad schedule in a registration is logged by the API process, and the answer is 200', async (t) => {
    const res = await call('POST', '/jobsvc/v1/workers/register', {
      worker_id: 'wrk_log',
      queues: ['default'],
      job_types: ['nightly'],
      recurring_schedules: [{ job_type: 'nightly', cron_expression: '99 * * * *' }],
    })
    t.equal(res.status, 200)
    t.strictSame(res.body, { status: 'registered' })
    const line = await eventually(
      async () =>
        api
          .output()
          .split('\n')
          .find((l) => l.includes('register: schedule not saved')),
      10_000,
      'the warning in the log',
    )
    t.match(JSON.parse(line), { level: 40, worker_id: 'wrk_log', reason: /^invalid_cron_expression/, schedule: { job_type: 'nightly' } })
    t.strictSame((await call('GET', '/jobsvc/v1/recurring')).body, { data: [] }, 'nothing saved')
  })

  // Phase 1: two schedulers race for every occurrence of one schedule.
  const tickPutAt = Date.now()
  const tick = await call('PUT', '/jobsvc/v1/recurring/rjob_tick', { job_type: 'tick', cron_expression: every2s, payload: { phase: 1 } })
  t.equal(tick.status, 201, JSON.stringify(tick.body))
  await firedAtOrAfter('tick', 0, 5)
  t.ok(s1.process.exitCode === null && s2.process.exitCode === null, 'both schedulers ran the whole time')
  const tickDelete = await call('DELETE', '/jobsvc/v1/recurring/rjob_tick')
  const tickDeletedAt = Date.now()
  t.equal(tickDelete.status, 204)

  // Phase 2: both schedulers go down for 6 s; one comes back.
  const tockPutAt = Date.now()
  const tock = await call('PUT', '/jobsvc/v1/recurring/rjob_tock', { job_type: 'tock', cron_expression: every2s })
  t.equal(tock.status, 201, JSON.stringify(tock.body))
  await firedAtOrAfter('tock', 0, 2)
  await Promise.all([stop(s1), stop(s2)])
  const stoppedAt = Date.now()
  // The downtime itself: a span of time, not a state to wait for.
  await pause(6_000)
  const restartAt = Date.now()
  const restarted = await start('scheduler')
  // The catch-up and the next occurrence on schedule after it. A scheduler slow to start (a
  // loaded machine) may catch up on an occurrence past restartAt + 2 periods: one job from then
  // is not yet one on schedule after the catch-up.
  await firedAtOrAfter('tock', restartAt + 2 * periodMs, 1)
  await firedAtOrAfter('tock', stoppedAt + 1, 2)
  const tockDelete = await call('DELETE', '/jobsvc/v1/recurring/rjob_tock')
  const tockDeletedAt = Date.now()
  t.equal(tockDelete.status, 204)
  await stop(restarted)
  await projected()

  const ticks = await jobsOf('tick')
  const tocks = await jobsOf('tock')

  await t.test('two schedulers: one job per occurrence, every occurrence', async (t) => {
    const occurrences = ticks.map(occurrenceOf)
    t.ok(ticks.length >= 5, `${ticks.length} tick jobs`)
    t.equal(new Set(ticks.map((j) => j.id)).size, ticks.length, 'job ids are distinct')
    t.equal(new Set(occurrences).size, occurrences.length, 'no occurrence has two jobs')
    t.same(occurrences.filter((o) => o % periodMs !== 0).map(iso), [], 'every job is for a 2-second occurrence')
    t.same(
      ticks.filter((j) => j.id !== occurrenceJobId(projectId, 'rjob_tick', new Date(occurrenceOf(j)))).map((j) => j.id),
      [],
      "every id is the occurrence's deterministic id",
    )
    t.same(gapsOverOneMissed(occurrences), [], 'no gap of more than one missed occurrence')
    t.ok(occurrences[0]! > tickPutAt, 'no occurrence from before the schedule existed')
    t.ok(occurrences[0]! <= tickPutAt + 2 * periodMs, 'the first occurrence after the PUT fired (or the one after it)')
    t.ok(occurrences.at(-1)! <= tickDeletedAt, 'nothing fired after the delete')
    t.ok(
      ticks.every((j) => j.tags?.recurring_id === 'rjob_tick' && j.payload?.phase === 1),
      'tags and payload from the schedule',
    )
  })

  await t.test('after downtime the missed occurrences fire once in total: the latest', async (t) => {
    const occurrences = tocks.map(occurrenceOf)
    t.equal(new Set(tocks.map((j) => j.id)).size, tocks.length, 'job ids are distinct')
    t.equal(new Set(occurrences).size, occurrences.length, 'no occurrence has two jobs')
    t.same(occurrences.filter((o) => o % periodMs !== 0).map(iso), [], 'every job is for a 2-second occurrence')
    const before = occurrences.filter((o) => o <= stoppedAt)
    const after = occurrences.filter((o) => o > stoppedAt)
    t.ok(before.length >= 2 && after.length >= 2, `${before.length} jobs before the stop, ${after.length} after the restart`)
    t.ok(before[0]! > tockPutAt, 'no occurrence from before the schedule existed')
    t.same(gapsOverOneMissed(before), [], 'before the stop: no gap of more than one missed occurrence')
    const last = before.at(-1)!
    const caughtUp = after[0]!
    t.same(occurrences.filter((o) => o > last && o <= restartAt - periodMs).map(iso), [], 'the earlier missed occurrences never fire')
    t.ok(occurrences.filter((o) => o > stoppedAt && o <= restartAt).length <= 1, 'at most one job for the occurrences missed while down')
    t.ok(caughtUp > restartAt - periodMs, `the catch-up job is for the latest missed occurrence (${iso(caughtUp)}, restarted at ${iso(restartAt)})`)
    t.ok(caughtUp - last >= 3 * periodMs, `occurrences between ${iso(last)} and ${iso(caughtUp)} were skipped, not fired one by one`)
    t.same(gapsOverOneMissed(after), [], 'after the restart: back on schedule')
    t.ok(occurrences.at(-1)! <= tockDeletedAt, 'nothing fired after the delete')
  })

  await t.test("a racing scheduler's allowance unit is given back: units taken equal jobs created", async (t) => {
    const [usage] = await sql<{ used: number }[]>`SELECT sum(used)::int AS used FROM project_usage WHERE project_id = ${projectId}`
    t.equal(usage?.used, ticks.length + tocks.length, `${ticks.length + tocks.length} jobs, as many units`)
  })
})
