import t from 'tap'
import { purgeExpiredJobs } from '../../services/scheduler/retention.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

const day = 24 * 60 * 60 * 1000

t.test('retention deletes exactly the expired terminal jobs of each plan, from the log and the read model', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const free = await h.newProject()
  const as = (key: string) => (method: string, path: string, body?: unknown) => httpRequest(h.url, key, method, path, body)
  const business = as(h.apiKey)
  const freeApi = as(free.apiKey)

  // In each project: one succeeded, one dead-lettered, one cancelled, one still pending.
  async function populate(api: ReturnType<typeof as>, tag: string) {
    const ids: Record<string, string> = {}
    for (const kind of ['ok', 'dead', 'cancel', 'pending']) {
      const runAt = kind === 'cancel' ? new Date(Date.now() + 3_600_000).toISOString() : undefined
      const res = await api('POST', '/jobsvc/v1/jobs', { job_type: `${tag}-${kind}`, queue: `q-${tag}-${kind}`, payload: {}, max_attempts: 1, ...(runAt ? { run_at: runAt } : {}) })
      ids[kind] = res.body.id
    }
    for (const kind of ['ok', 'dead']) {
      const polled = await eventually(async () => {
        const p = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: [`q-${tag}-${kind}`], wait_seconds: 1 })
        return p.body.jobs?.length ? p : null
      })
      const status = kind === 'ok' ? 'succeeded' : 'failed'
      await api('POST', '/jobsvc/v1/workers/ack', { job_id: polled.body.jobs[0].id, worker_id: 'w', status })
    }
    await api('POST', `/jobsvc/v1/jobs/${ids.cancel}/cancel`)
    return ids
  }
  const b = await populate(business, 'b')
  const f = await populate(freeApi, 'f')
  const rowCount = async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs`)[0]!.n as number
  await eventually(async () => (await rowCount()) === 8 && (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE state IN ('succeeded','dead_letter','cancelled')`)[0]!.n === 6)

  const stream = eventsStreamName(h.config.namespace)
  const messagesOf = async (projectId: string, jobId: string) => {
    const subject = `${h.config.namespace}.evt.${projectId}.job.${jobId}`
    const info = await h.runtime.nats.jsm.streams.info(stream, { subjects_filter: subject })
    return info.state.subjects?.[subject] ?? 0
  }

  const realNow = h.runtime.now
  t.teardown(() => void (h.runtime.now = realNow))
  h.runtime.now = () => new Date(Date.now() + 29 * day)
  t.equal(await purgeExpiredJobs(h.runtime), 0, 'nothing is 30 days old yet')

  h.runtime.now = () => new Date(Date.now() + 31 * day)
  t.equal(await purgeExpiredJobs(h.runtime), 3, "the free project's three terminal jobs go after 30 days")
  for (const kind of ['ok', 'dead', 'cancel']) {
    t.equal(await messagesOf(free.projectId, f[kind]!), 0, `free ${kind}: purged from the log`)
    t.equal((await freeApi('GET', `/jobsvc/v1/jobs/${f[kind]}`)).status, 404, `free ${kind}: 404`)
  }
  t.ok((await messagesOf(free.projectId, f.pending!)) > 0, 'a pending job stays')
  for (const kind of ['ok', 'dead', 'cancel']) t.ok((await messagesOf(h.projectId, b[kind]!)) > 0, `business ${kind} stays (180 days)`)
  t.equal(await rowCount(), 5)

  h.runtime.now = () => new Date(Date.now() + 181 * day)
  t.equal(await purgeExpiredJobs(h.runtime), 3, "the business project's terminal jobs go after 180 days")
  t.equal(await rowCount(), 2, 'only the two pending jobs are left')
  t.same((await h.runtime.sql`SELECT id FROM jobs ORDER BY id`).map((r) => r.id).sort(), [b.pending, f.pending].sort())
  t.equal(await purgeExpiredJobs(h.runtime), 0, 'and a second pass finds nothing')
  const counted = await h.runtime.sql<{ state: string; n: number }[]>`
    SELECT state, sum(count)::int AS n FROM job_state_counts GROUP BY state HAVING sum(count) <> 0 ORDER BY state`
  t.same(counted, [{ state: 'pending', n: 2 }], 'the metrics state counts lose the deleted jobs too')
})
