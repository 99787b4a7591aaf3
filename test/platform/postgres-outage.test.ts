import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { answerWithin, eventually, httpRequest } from '../support/harness.ts'
import { startDrillLoad } from '../support/outage-drill.ts'
import { startPrivatePostgres } from '../support/private-postgres.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

// Issue 23, item 5: Postgres crashes (SIGKILL of the postmaster) in the middle of a workload of
// creates, claims and acks against every role in one process (`npm start`'s layout: the API on
// the main thread, the other roles on a worker thread), and comes back 5 s later. The process
// stays up, answers 503 with Retry-After while Postgres is away (never a 500), readiness names
// Postgres at once, and every role picks up again by itself: every accepted job succeeds, the
// list converges, and no attempt is handed out twice.
t.test('every role in one process rides out a Postgres crash and restart', async (t) => {
  const pg = await startPrivatePostgres(t)
  const install = await spawnedInstall(t, import.meta.filename, { env: { DATABASE_URL: pg.url('jobsvc_drill') } })
  const svc = await install.start()
  let exited: string | null = null
  svc.process.once('exit', (code, signal) => (exited = `exited (${code ?? signal})`))
  const { apiKey } = await createProjectWithCli(install.env, 'drill')
  const queue = 'drill'

  const load = startDrillLoad(svc.url, apiKey, queue)
  t.teardown(() => load.stopWork())
  await eventually(async () => load.claims.size >= 30, 60_000, 'the workload under way')

  await pg.kill()
  const refused = await eventually(async () => {
    const res = await httpRequest(svc.url, apiKey, 'GET', `/jobsvc/v1/jobs?queue=${queue}`)
    return res.status === 503 ? res : null
  })
  t.equal(refused.body.error.code, 'service_unavailable', 'a read that needs Postgres: 503 service_unavailable')
  t.match(refused.headers.get('retry-after'), /^\d+$/, 'with Retry-After')
  const ready = await answerWithin(httpRequest(svc.url, null, 'GET', '/jobsvc/health/ready'), 1_000)
  t.not(ready, 'pending', 'readiness answers within 1 s while Postgres is away')
  if (ready !== 'pending') {
    t.equal(ready.status, 503)
    t.match(ready.body, { status: 'not_ready', checks: { postgres: false, nats: true, jetstream: true } }, 'naming Postgres, not NATS')
  }
  t.equal((await httpRequest(svc.url, null, 'GET', '/jobsvc/health/live')).status, 200, 'liveness stays 200')
  await sleep(5_000)
  t.equal(exited, null, 'the process is alive through the outage')
  await pg.start()

  await eventually(async () => (await httpRequest(svc.url, null, 'GET', '/jobsvc/health/ready')).status === 200, 30_000, 'ready again')
  await load.settle()
  t.equal(exited, null, 'the process never exited')
  t.same(load.wrong, [], 'no 500, no 503 without Retry-After, no ack refused')
  t.same(load.claimedTwice(), [], 'no attempt was handed out twice')
  t.comment(`${load.created.size} jobs accepted; answers: ${JSON.stringify(Object.fromEntries(load.statuses))}`)
})
