import { Writable } from 'node:stream'
import { pino } from 'pino'
import t from 'tap'
import { metricsRegistry } from '../../services/infrastructure/metrics.ts'
import type { JobCommand } from '../../domain/job.ts'
import { jobHandler } from '../../streams/aggregates.ts'
import { eventsStreamName, eventSubject } from '../../streams/names.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

// Issue 23, item 3: a scheduler pass isolates its items. Twenty processing jobs of one project
// are poisoned in the two ways this test knows. Ten were acked by an older version of the API
// with U+0000 in the error text (it accepted them) while the projector is behind: their rows
// still say processing, and before, each reap of theirs threw when it wrote the row of the state
// the log holds (now the row is not moved past an error it cannot see, and nothing throws). Ten
// have rows the log no longer backs (their messages were removed under the read model: a log
// restored from an older backup, a purge run by hand): each reap of theirs throws, and nothing the
// projector will ever apply repairs them, so they are logged and held back. Another project's
// abandoned attempt is retried within its grace period. Before, each of the reaper's 16 workers
// stopped at the first item that threw, and these rows, the oldest, headed every pass: no attempt
// was reaped again.
const graceMs = 3_000
const h = await startHarness(t, import.meta.filename, { tunables: { reaper_grace_ms: graceMs, reaper_interval_ms: 100 } })
const other = await h.newProject()

/** Claims exactly `count` jobs of a queue for one worker, however the projector batches them. */
async function claimAll(apiKey: string, queue: string, count: number): Promise<string[]> {
  const claimed = new Set<string>()
  await eventually(
    async () => {
      const res = await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/workers/poll', {
        worker_id: 'wrk_lost',
        queues: [queue],
        capacity: 20,
        wait_seconds: 2,
      })
      for (const j of res.body.jobs) claimed.add(j.id)
      return claimed.size >= count
    },
    15_000,
    `claims on ${queue}`,
  )
  return [...claimed]
}

t.test('20 poisoned jobs of one project do not stop the reaper from retrying another project’s abandoned attempt in time', async (t) => {
  const lines: Array<Record<string, any>> = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)))
      done()
    },
  })
  await h.stopRole('scheduler')
  h.runtime.log = pino({ level: 'error' }, sink)
  await h.startRole('scheduler')
  const failuresCounted = async () => {
    const counter = metricsRegistry.getSingleMetric('jobsvc_scheduler_item_failures_total')
    return (await counter?.get())?.values.find((v) => v.labels.pass === 'reaper pass')?.value ?? 0
  }
  const countedBefore = await failuresCounted()

  for (let i = 0; i < 20; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'poisoned', queue: 'poisoned', timeout_seconds: 1, payload: { i } })
    t.equal(res.status, 201)
  }
  const poisoned = await claimAll(h.apiKey, 'poisoned', 20)
  t.equal(poisoned.length, 20)
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE queue = 'poisoned' AND state = 'processing'`)[0]!.n === 20,
    15_000,
    'the read model to show them processing',
  )
  const abandoned = await httpRequest(h.url, other.apiKey, 'POST', '/jobsvc/v1/jobs', {
    job_type: 'healthy',
    queue: 'healthy',
    timeout_seconds: 1,
    payload: {},
  })
  t.equal(abandoned.status, 201)
  await claimAll(other.apiKey, 'healthy', 1)
  await eventually(
    async () => (await h.runtime.sql`SELECT state FROM jobs WHERE id = ${abandoned.body.id}`)[0]?.state === 'processing',
    15_000,
    'the read model to show the abandoned attempt',
  )

  // The projector falls behind (stopped here), and an older API, which took U+0000 in error
  // texts, acks half the poisoned attempts: the log has them pending, their rows still processing.
  // The other half's messages leave the log while their rows still say processing.
  const acked = poisoned.slice(0, 10)
  const unbacked = poisoned.slice(10)
  await h.stopRole('projector')
  t.teardown(() => h.startRole('projector'))
  for (const id of acked) {
    const command: JobCommand = {
      type: 'ack_job',
      data: { worker_id: 'wrk_lost', status: 'failed', duration_ms: 5, error: { type: 'Boom', message: 'bad \u0000 text', stack_trace: '' } },
      meta: { now: new Date().toISOString(), random: 0.5 },
    }
    await jobHandler.decide(h.runtime, jobHandler.ref(h.projectId, id), command)
  }
  const ns = h.runtime.config.namespace
  for (const id of unbacked) await h.runtime.nats.jsm.streams.purge(eventsStreamName(ns), { filter: eventSubject(ns, h.projectId, 'job', id) })
  const reaped = await eventually(
    async () => {
      const job = (await httpRequest(h.url, other.apiKey, 'GET', `/jobsvc/v1/jobs/${abandoned.body.id}`)).body
      return job.state !== 'processing' && job
    },
    30_000,
    'the reaper to retry the abandoned attempt',
  )
  t.match(reaped, { state: 'pending', attempt: 1, error: { type: 'HeartbeatTimeout' } }, 'the abandoned attempt is retried')
  const history = (await httpRequest(h.url, other.apiKey, 'GET', `/jobsvc/v1/jobs/${abandoned.body.id}/history`)).body.data
  const claimedAt = Date.parse(history.find((e: { type: string }) => e.type === 'job_claimed').time)
  const reapedAt = Date.parse(history.at(-1).time)
  const reapableAt = claimedAt + 1_000 + graceMs
  t.ok(reapedAt - reapableAt <= graceMs, `retried ${reapedAt - reapableAt} ms after it could be, within its grace period of ${graceMs} ms`)

  const failed = (id: string) => lines.filter((l) => l.id === id && l.project_id === h.projectId && /reaper pass/.test(l.msg))
  t.same(
    unbacked.filter((id) => failed(id).length === 0),
    [],
    'each job the log no longer backs was tried, and logged with its project and id',
  )
  t.ok((await failuresCounted()) - countedBefore >= unbacked.length, 'and counted')
  const mostTries = Math.max(...unbacked.map((id) => failed(id).length))
  t.ok(mostTries <= 6, `a failing job is held back with a growing delay, not retried every pass (at most ${mostTries} tries each)`)
})
