import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { openSql } from '../../projections/database.ts'
import { eventually, httpRequest, type SpawnedService } from '../support/harness.ts'
import { startDrillLoad } from '../support/outage-drill.ts'
import { startPrivatePostgres } from '../support/private-postgres.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

// Issue 23, item 5, with each role in a process of its own (two projectors, one leading and one
// standing by): Postgres crashes (SIGKILL of the postmaster) under a workload and comes back
// 5 s later. No process exits; the projector leadership, lost with its session, is taken again
// by one projector; the scheduler promotes due jobs again; every accepted job succeeds.
t.test('separate role processes ride out a Postgres crash and restart', async (t) => {
  const pg = await startPrivatePostgres(t)
  const databaseUrl = pg.url('jobsvc_drill')
  const install = await spawnedInstall(t, import.meta.filename, { env: { DATABASE_URL: databaseUrl } })
  const api = await install.start(['--role', 'api'])
  // One after the other: five processes compiling and connecting at once starve each other here.
  const others: SpawnedService[] = []
  for (const role of ['projector', 'projector', 'scheduler', 'dispatcher']) others.push(await install.start(['--role', role]))
  const exits: string[] = []
  for (const svc of [api, ...others]) {
    svc.process.once('exit', (code, signal) => exits.push(`${roleOf(svc)} exited (${code ?? signal})`))
  }
  const { apiKey } = await createProjectWithCli(install.env, 'drill')
  const queue = 'drill'
  const sql = openSql(databaseUrl, { max: 1 })
  t.teardown(() => sql.end({ timeout: 1 }))
  const projectorLeaders = async () => {
    const [row] = await sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'advisory' AND granted AND objsubid = 1
        AND ((classid::bigint << 32) | objid::bigint) = hashtext(${'jobsvc.projector:' + install.env.JOBSVC_NAMESPACE})::bigint`
    return row!.n
  }
  t.equal(await projectorLeaders(), 1, 'one projector leads before the crash')

  const load = startDrillLoad(api.url, apiKey, queue)
  t.teardown(() => load.stopWork())
  await eventually(async () => load.claims.size >= 30, 60_000, 'the workload under way')

  await pg.kill()
  await sleep(5_000)
  t.same(exits, [], 'every process is alive through the outage')
  await pg.start()

  await eventually(async () => (await projectorLeaders().catch(() => 0)) === 1, 30_000, 'a projector leading again')
  const scheduled = await eventually(async () => {
    const res = await httpRequest(api.url, apiKey, 'POST', '/jobsvc/v1/jobs', {
      job_type: 'drill',
      queue,
      payload: {},
      run_at: new Date(Date.now() + 5_000).toISOString(),
    })
    return res.status === 201 ? (res.body as { id: string; state: string }) : null
  }, 30_000)
  t.equal(scheduled.state, 'scheduled', 'a job for later, which only the scheduler makes claimable')
  await load.settle([scheduled.id])
  t.same(exits, [], 'no process exited')
  t.equal(await projectorLeaders(), 1, 'one projector leads')
  t.same(load.wrong, [], 'no 500, no 503 without Retry-After, no ack refused')
  t.same(load.claimedTwice(), [], 'no attempt was handed out twice')
  // The scheduler's passes all failed through the outage: each says so once, as a warning.
  const schedulerLines = others[2]!.output().split('\n')
  t.same(
    schedulerLines.filter((l) => /"level":50.*scheduler: .* failed/.test(l)),
    [],
    'no scheduler pass logged the outage as an error',
  )
  const waits = schedulerLines.flatMap((l) => /scheduler: (.*) waits for a dependency/.exec(l)?.[1] ?? [])
  t.ok(waits.length > 0, `the scheduler's passes warned of the outage (${waits.join(', ')})`)
  t.equal(new Set(waits).size, waits.length, 'each pass once')
  t.comment(`${load.created.size} jobs accepted; answers: ${JSON.stringify(Object.fromEntries(load.statuses))}`)
})

function roleOf(svc: SpawnedService): string {
  return /"roles":\["([a-z]+)"\]/.exec(svc.output())?.[1] ?? 'a process'
}
