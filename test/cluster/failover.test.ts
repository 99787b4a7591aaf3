import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { dropDatabase, openSql } from '../../projections/database.ts'
import { connectNats } from '../../streams/connection.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, isolatedNames, repoRoot, spawnService, type SpawnedService } from '../support/harness.ts'
import { startNatsCluster } from '../support/nats-cluster.ts'

/**
 * The service on a three-node JetStream cluster with three replicas, every role a process of
 * its own (two APIs, projector, dispatcher, scheduler). Clients create jobs and workers poll and
 * ack through both APIs while the node leading the event stream is killed. Nothing a client was
 * told had happened may be lost or done twice, the read models must converge, every client must
 * get answers again within a bound (the outage each saw is printed), and the node, started
 * again, must catch up.
 */

const maxOutageMs = 20_000
const requestTimeoutMs = 5_000
const queue = 'cluster'

interface Answer {
  status: number
  body: any
}

async function call(base: string, apiKey: string, method: string, path: string, body?: unknown): Promise<Answer> {
  try {
    const res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(requestTimeoutMs),
    })
    const text = await res.text()
    return { status: res.status, body: text === '' ? null : JSON.parse(text) }
  } catch (err) {
    return { status: 0, body: String(err) }
  }
}

/** A client's answers over time: the longest wait between two answers that did what it asked is its outage. */
class Client {
  lastOk = Date.now()
  longestGapMs = 0
  failures = 0
  okAfter(instant: number): boolean {
    return this.lastOk > instant
  }
  constructor(readonly name: string) {}
  record(ok: boolean): void {
    const now = Date.now()
    if (!ok) {
      this.failures += 1
      return
    }
    this.longestGapMs = Math.max(this.longestGapMs, now - this.lastOk)
    this.lastOk = now
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t.test('a three-node cluster loses its event-stream leader: nothing acknowledged is lost or done twice', async (t) => {
  const cluster = await startNatsCluster(t)
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => dropDatabase(names.databaseUrl))
  const dir = await mkdtemp(join(tmpdir(), 'jobsvc-cluster-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const configFile = join(dir, 'config.json')
  // Short reaper and poll intervals, so that a claim whose answer was lost in the outage comes
  // round again within the test; metering off, since the drivers make thousands of requests.
  await writeFile(
    configFile,
    JSON.stringify({
      tunables: { reaper_grace_ms: 1000, reaper_interval_ms: 200, scheduler_interval_ms: 100, poll_tick_ms: 200, metering_enabled: false },
    }),
  )
  const env = {
    JOBSVC_NAMESPACE: names.namespace,
    DATABASE_URL: names.databaseUrl,
    NATS_URL: cluster.urls,
    JOBSVC_REPLICAS: '3',
    JOBSVC_CONFIG: configFile,
  }
  const services: Promise<SpawnedService>[] = []
  const spawnRole = (role: string) => {
    const started = spawnService(env, ['--role', role])
    services.push(started)
    return started
  }
  t.teardown(() => Promise.all(services.map((s) => s.then((svc) => svc.stop('SIGKILL')).catch(() => undefined))))
  // The first process makes the database, the migrations and the replicated streams; the rest start together.
  const api1 = await spawnRole('api')
  const [api2] = await Promise.all([spawnRole('api'), spawnRole('projector'), spawnRole('dispatcher'), spawnRole('scheduler')])
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', 'services/roles/cli.ts', 'project', 'create', '--name', 'cluster', '--plan', 'business'],
    {
      cwd: repoRoot,
      env: { ...process.env, ...env, JOBSVC_SECRET: 'test-secret-test-secret-test-secret' },
    },
  )
  const { api_key: apiKey, project_id: projectId } = JSON.parse(stdout) as { api_key: string; project_id: string }

  const nats = await connectNats(cluster.urls, 'jobsvc-test-cluster')
  t.teardown(() => nats.nc.close())
  const streamInfo = () => nats.jsm.streams.info(eventsStreamName(names.namespace))
  t.equal((await streamInfo()).config.num_replicas, 3, 'the event stream has three replicas')

  const created = new Set<string>()
  const acked = new Set<string>()
  const claims = new Map<string, string>()
  const doubleClaims: string[] = []
  const clients: Client[] = []
  let creating = true
  let working = true

  const creator = async (base: string, name: string) => {
    const client = new Client(name)
    clients.push(client)
    for (let i = 0; creating; i++) {
      const res = await call(base, apiKey, 'POST', '/jobsvc/v1/jobs', {
        job_type: 'work',
        queue,
        payload: { i },
        timeout_seconds: 3,
        max_attempts: 10,
      })
      client.record(res.status === 201)
      if (res.status === 201) created.add(res.body.id)
      await sleep(res.status === 201 ? 25 : 100)
    }
  }
  const worker = async (base: string, name: string) => {
    const client = new Client(name)
    clients.push(client)
    while (working) {
      const res = await call(base, apiKey, 'POST', '/jobsvc/v1/workers/poll', { worker_id: name, queues: [queue], capacity: 5, wait_seconds: 1 })
      client.record(res.status === 200)
      if (res.status !== 200) {
        await sleep(100)
        continue
      }
      for (const job of res.body.jobs as Array<{ id: string; attempt: number }>) {
        const key = `${job.id}#${job.attempt}`
        if (claims.has(key)) doubleClaims.push(`${key} by ${claims.get(key)} and ${name}`)
        claims.set(key, name)
        // An ack whose answer was lost is sent again; 409 then means the first one won, or the
        // reaper took the attempt back (the job comes round again with the next attempt).
        for (let tries = 0; tries < 20 && working; tries++) {
          const ack = await call(base, apiKey, 'POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: name, status: 'succeeded' })
          client.record(ack.status === 200 || ack.status === 409)
          if (ack.status === 200) acked.add(job.id)
          if (ack.status === 200 || ack.status === 409) break
          await sleep(100)
        }
      }
    }
  }
  const drivers = [
    creator(api1.url, 'creator-1'),
    creator(api2.url, 'creator-2'),
    ...[1, 2].map((i) => worker(api1.url, `worker-1.${i}`)),
    ...[1, 2].map((i) => worker(api2.url, `worker-2.${i}`)),
  ]

  await eventually(async () => acked.size >= 50, 30_000, 'jobs flowing before the failure')
  const leader = (await streamInfo()).cluster?.leader
  t.ok(leader, `the event stream has a leader (${leader})`)
  const killedAt = Date.now()
  await cluster.node(leader!).kill()
  t.comment(`killed ${leader}, the event stream's leader, with ${created.size} jobs created and ${acked.size} acked`)

  await eventually(async () => clients.every((c) => c.okAfter(killedAt + 2_000)), maxOutageMs + 10_000, 'every client answered again')
  const newLeader = (await streamInfo()).cluster?.leader
  t.not(newLeader, leader, `another node leads the event stream (${newLeader})`)
  await sleep(2_000)
  creating = false
  await Promise.all(drivers.slice(0, 2))
  // An ack whose answer was lost in the outage may still have been appended; its resend then
  // answers 409, so a job no worker saw a 200 for counts as acked once the log says it succeeded.
  let ackedUnseen = 0
  const everyCreatedAcked = async () => {
    for (const id of [...created].filter((id) => !acked.has(id))) {
      const res = await call(api2.url, apiKey, 'GET', `/jobsvc/v1/jobs/${id}`)
      if (res.body?.state !== 'succeeded') return false
      acked.add(id)
      ackedUnseen += 1
    }
    return true
  }
  await eventually(everyCreatedAcked, 45_000, 'every created job acked').catch((err) =>
    t.fail(String(err), { missing: [...created].filter((id) => !acked.has(id)).slice(0, 10) }),
  )
  t.comment(`${ackedUnseen} jobs acked by an ack whose answer was lost`)
  working = false
  await Promise.all(drivers)

  for (const c of clients) {
    t.comment(`${c.name}: longest wait for an answer ${c.longestGapMs} ms (${c.failures} failed requests)`)
    t.ok(c.longestGapMs < maxOutageMs, `${c.name} answered again within ${maxOutageMs} ms`)
  }
  t.comment(`outage seen by clients: ${Math.min(...clients.map((c) => c.longestGapMs))}–${Math.max(...clients.map((c) => c.longestGapMs))} ms`)
  t.ok(created.size > 100, `${created.size} jobs created, ${claims.size} claims`)
  t.strictSame(doubleClaims, [], 'no job was handed to two workers for one attempt')

  const states = new Map<string, string>()
  for (const id of created) {
    const res = await call(api2.url, apiKey, 'GET', `/jobsvc/v1/jobs/${id}`)
    states.set(id, res.body?.state)
  }
  const notSucceeded = [...states].filter(([, state]) => state !== 'succeeded')
  t.strictSame(notSucceeded, [], 'every acknowledged job is in the log, succeeded')

  const sql = openSql(names.databaseUrl, { max: 1 })
  t.teardown(() => sql.end({ timeout: 5 }))
  const rows = await eventually(
    async () => {
      const rows = await sql<{ id: string; state: string }[]>`SELECT id, state FROM jobs WHERE project_id = ${projectId}`
      const byId = new Map(rows.map((r) => [r.id, r.state]))
      return [...created].every((id) => byId.get(id) === 'succeeded') ? byId : null
    },
    20_000,
    'the read model to show every job succeeded',
  )
  t.ok(rows.size >= created.size, `the read model converged (${rows.size} rows)`)

  await cluster.node(leader!).start()
  const caughtUp = await eventually(
    async () => {
      const info = await streamInfo()
      const replicas = info.cluster?.replicas ?? []
      return replicas.length === 2 && replicas.every((r) => r.current && !r.offline && (r.lag ?? 0) === 0) ? info : null
    },
    30_000,
    'the restarted node to catch up',
  )
  t.ok(
    [caughtUp.cluster!.leader, ...caughtUp.cluster!.replicas!.map((r) => r.name)].includes(leader!),
    `${leader} is a current replica again (last sequence ${caughtUp.state.last_seq})`,
  )
})
