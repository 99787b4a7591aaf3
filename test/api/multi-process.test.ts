import t from 'tap'
import { eventually, httpRequest, type SpawnedService } from '../support/harness.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

const totalJobs = 2000
const createConcurrency = 32
const pollersPerProcess = 8
const capacity = 5

/** Runs `work` on every item with at most `limit` in flight. */
async function inFlight<T>(items: readonly T[], limit: number, work: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0
  const runner = async () => {
    for (let i = next++; i < items.length; i = next++) await work(items[i]!, i)
  }
  await Promise.all(Array.from({ length: limit }, runner))
}

t.test('two service processes with 8 pollers each claim 2,000 jobs exactly once', async (t) => {
  const install = await spawnedInstall(t, import.meta.filename)
  // Both processes start together on a fresh install and both run every role: the projector is
  // leader-elected, so one of them projects and the other stands by.
  const services = await Promise.all([install.start(), install.start()])
  const sql = install.openSql()

  const { projectId, apiKey } = await createProjectWithCli(install.env, 'x')
  t.match(projectId, /^\S+$/, 'the CLI printed a project id')

  const created: string[] = []
  const createFailures: unknown[] = []
  await inFlight(Array.from({ length: totalJobs }), createConcurrency, async (_, i) => {
    const svc = services[i % services.length]!
    const res = await httpRequest(svc.url, apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'mp', payload: { n: i } })
    if (res.status === 201) created.push(res.body.id)
    else createFailures.push({ status: res.status, body: res.body })
  })
  t.same(createFailures, [], 'every create answered 201 on both processes')
  t.equal(new Set(created).size, totalJobs, `${totalJobs} distinct jobs created`)

  const claims = new Map<string, string>()
  const duplicateClaims: string[] = []
  const overCapacity: number[] = []
  const ackFailures: unknown[] = []
  const acked = new Set<string>()
  // A safety bound only, so that a lost job fails the assertions below instead of hanging the run.
  const giveUpAt = Date.now() + 180_000
  const poller = async (svc: SpawnedService, workerId: string) => {
    while (acked.size < totalJobs && Date.now() < giveUpAt) {
      const res = await httpRequest(svc.url, apiKey, 'POST', '/jobsvc/v1/workers/poll', {
        worker_id: workerId,
        queues: ['default'],
        capacity,
        wait_seconds: 1,
      })
      if (res.status !== 200) throw new Error(`poll answered ${res.status}: ${JSON.stringify(res.body)}`)
      const jobs = res.body.jobs as Array<{ id: string; attempt: number }>
      if (jobs.length > capacity) overCapacity.push(jobs.length)
      for (const job of jobs) {
        const key = `${job.id}#${job.attempt}`
        if (claims.has(key)) duplicateClaims.push(`${key} by ${claims.get(key)} and ${workerId}`)
        claims.set(key, workerId)
      }
      await Promise.all(
        jobs.map(async (job) => {
          const ack = await httpRequest(svc.url, apiKey, 'POST', '/jobsvc/v1/workers/ack', {
            job_id: job.id,
            worker_id: workerId,
            status: 'succeeded',
            duration_ms: 1,
          })
          if (ack.status === 200 && ack.body.action === 'done') acked.add(job.id)
          else ackFailures.push({ job: job.id, status: ack.status, body: ack.body })
        }),
      )
    }
  }
  await Promise.all(services.flatMap((svc, p) => Array.from({ length: pollersPerProcess }, (_, w) => poller(svc, `p${p}-w${w}`))))

  t.same(duplicateClaims, [], 'no job was claimed twice for the same attempt')
  t.same(overCapacity, [], 'no poll answered more jobs than its capacity')
  t.same(ackFailures, [], 'every ack of a claimed job was accepted')
  const lost = created.filter((id) => !acked.has(id))
  t.same(lost.slice(0, 10), [], `no job lost (${lost.length} never claimed and acked)`)
  t.equal(claims.size, totalJobs, 'exactly one claim per job')
  t.ok(
    [...claims.keys()].every((k) => k.endsWith('#1')),
    'every claim was the first attempt',
  )
  const byProcess = [0, 1].map((p) => [...claims.values()].filter((w) => w.startsWith(`p${p}-`)).length)
  t.ok(
    byProcess.every((n) => n > 0),
    `both processes claimed jobs (${byProcess.join(' and ')})`,
  )

  // On a timeout the assertion below shows how far the read model got.
  let states: Record<string, number> = {}
  await eventually(
    async () => {
      const rows = await sql<
        { state: string; n: number }[]
      >`SELECT state, count(*)::int AS n FROM jobs WHERE project_id = ${projectId} GROUP BY state`
      states = Object.fromEntries(rows.map((r) => [r.state, r.n]))
      return states.succeeded === totalJobs
    },
    30_000,
    'every job row to be succeeded',
  ).catch(() => undefined)
  t.same(states, { succeeded: totalJobs }, 'the read model holds every job, all succeeded')

  const listed = new Map<string, string>()
  let cursor: string | null = null
  do {
    const query: string = cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`
    const page = await httpRequest(services[1]!.url, apiKey, 'GET', `/jobsvc/v1/jobs?limit=100${query}`)
    t.equal(page.status, 200)
    for (const job of page.body.data as Array<{ id: string; state: string }>) listed.set(job.id, job.state)
    cursor = page.body.next_cursor
  } while (cursor !== null)
  t.equal(listed.size, totalJobs, 'the list pages through every job')
  t.ok(
    created.every((id) => listed.get(id) === 'succeeded'),
    'the list shows every created job succeeded',
  )
})
