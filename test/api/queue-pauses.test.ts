import t from 'tap'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'
import { startWebhookReceiver } from '../support/webhook-receiver.ts'

// Pausing and resuming queues (docs/api-notes.md, "Queue pauses") against the real NATS and
// Postgres, with two API processes: each follows the project's events, so a pause made through
// one holds in the other's polls, both on the ready index and on the read-model fallback. The
// polls' safety-net re-check is set far beyond the test's waits, so a poll answering soon after a
// resume was woken by it.
const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler'],
  tunables: { poll_tick_ms: 20_000, reaper_grace_ms: 300, reaper_interval_ms: 100 },
  config: { webhookAllowLoopback: true },
})
const second = await startApiProcess(t, h.runtime)
const urls = [h.url, second.url]
const on = (process: number, method: string, path: string, body?: unknown) => httpRequest(urls[process]!, h.apiKey, method, path, body)

const poll = (process: number, workerId: string, queues: string[], waitSeconds: number, capacity = 5) =>
  on(process, 'POST', '/jobsvc/v1/workers/poll', { worker_id: workerId, queues, capacity, wait_seconds: waitSeconds })

async function createJobs(queue: string, n: number): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < n; i++) {
    const res = await on(i % 2, 'POST', '/jobsvc/v1/jobs', { job_type: 'qp', payload: { i }, queue })
    if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`)
    ids.push(res.body.id)
  }
  return ids
}

t.test('two processes, 8 pollers: nothing of a paused queue is claimed while the others are; a resume wakes the parked polls at once', async (t) => {
  const paused = await on(0, 'POST', '/jobsvc/v1/queues/mp-held/pause', { reason: 'maintenance' })
  t.equal(paused.status, 200)
  t.match(paused.body, { queue: 'mp-held', paused: true, reason: 'maintenance', until: null, paused_by: null })
  t.match(paused.headers.get('x-event-seq'), /^\d+$/)

  const held = await createJobs('mp-held', 40)
  const open = await createJobs('mp-open', 40)
  t.equal(held.length + open.length, 80, 'creates are accepted while the queue is paused, through both processes')

  const claimed = new Map<string, string>()
  const claimedHeldBeforeResume: string[] = []
  let resumed = false
  const heldSet = new Set(held)
  const openSet = new Set(open)
  const ackedOpen = new Set<string>()
  const ackedHeld = new Set<string>()
  const giveUpAt = Date.now() + 60_000
  const failures: unknown[] = []
  const poller = async (process: number, workerId: string) => {
    while ((ackedOpen.size < open.length || ackedHeld.size < held.length) && Date.now() < giveUpAt) {
      const res = await poll(process, workerId, ['mp-held', 'mp-open'], 2)
      if (res.status !== 200) {
        failures.push(res.body)
        return
      }
      for (const job of res.body.jobs as Array<{ id: string }>) {
        if (claimed.has(job.id)) failures.push(`${job.id} claimed twice`)
        claimed.set(job.id, workerId)
        if (heldSet.has(job.id) && !resumed) claimedHeldBeforeResume.push(job.id)
        const ack = await on(process, 'POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: workerId, status: 'succeeded', duration_ms: 1 })
        if (ack.status !== 200) failures.push(ack.body)
        if (openSet.has(job.id)) ackedOpen.add(job.id)
        if (heldSet.has(job.id)) ackedHeld.add(job.id)
      }
    }
  }
  const pollers = Array.from({ length: 8 }, (_, i) => poller(i % 2, `mp-w${i}`))
  await eventually(async () => ackedOpen.size === open.length, 30_000, 'the open queue to be worked off')
  // The pollers now wait on both queues with nothing claimable but the paused queue's jobs.
  await new Promise((r) => setTimeout(r, 1_000))
  t.same(claimedHeldBeforeResume, [], 'no job of the paused queue was claimed by either process')
  const list = await on(1, 'GET', '/jobsvc/v1/queues')
  t.equal(list.status, 200)
  t.match(list.body.data[0], { queue: 'mp-held', paused: true, reason: 'maintenance', counts: { pending: 40 } }, 'listed first, with its jobs')
  t.match(
    list.body.data.find((q: { queue: string }) => q.queue === 'mp-open'),
    { paused: false, reason: null },
  )

  resumed = true
  const resumedAt = Date.now()
  const res = await on(1, 'POST', '/jobsvc/v1/queues/mp-held/resume')
  t.equal(res.status, 200)
  t.match(res.body, { queue: 'mp-held', paused: false, reason: null, until: null, paused_at: null })
  await eventually(async () => ackedHeld.size > 0, 10_000, 'a first claim after the resume')
  const firstClaimMs = Date.now() - resumedAt
  t.ok(firstClaimMs < 3_000, `the parked polls were woken by the resume (first claim after ${firstClaimMs} ms; the re-check is 20 s)`)
  await Promise.all(pollers)
  t.same(failures, [])
  t.equal(ackedHeld.size, held.length, 'every job of the resumed queue claimed and acked')
})

t.test('a poll parked on a paused queue alone is woken by a resume through the other process', async (t) => {
  t.equal((await on(0, 'POST', '/jobsvc/v1/queues/park/pause', {})).status, 200)
  const [job] = await createJobs('park', 1)
  // Polls of both processes park: the index of each holds the job, and must leave it.
  const parked = [poll(0, 'park-a', ['park'], 8, 1), poll(1, 'park-b', ['park'], 8, 1)]
  const early = await Promise.race([Promise.all(parked), new Promise((r) => setTimeout(() => r('parked'), 1_500))])
  t.equal(early, 'parked', 'no poll answers while the queue is paused')
  const resumedAt = Date.now()
  t.equal((await on(1, 'POST', '/jobsvc/v1/queues/park/resume')).status, 200)
  const answers = await Promise.race([Promise.race(parked), new Promise((r) => setTimeout(() => r('still parked'), 5_000))])
  t.not(answers, 'still parked', 'a parked poll answered after the resume')
  t.ok(Date.now() - resumedAt < 3_000, `at once (${Date.now() - resumedAt} ms)`)
  const all = await Promise.all(parked)
  t.same(
    all.flatMap((r) => r.body.jobs.map((j: { id: string }) => j.id)),
    [job],
    'the job, handed out once',
  )
})

t.test('the read-model fallback respects the pause too', async (t) => {
  // Jobs created before a queue is first polled are not in the index: a poll reads them from the read model.
  const jobs = await createJobs('cold-held', 3)
  await eventually(async () => {
    const list = await on(0, 'GET', '/jobsvc/v1/queues')
    return list.body.data.find((q: { queue: string; counts: { pending: number } }) => q.queue === 'cold-held')?.counts.pending === 3
  })
  t.equal((await on(0, 'POST', '/jobsvc/v1/queues/cold-held/pause', {})).status, 200)
  for (const process of [0, 1]) {
    const res = await poll(process, `cold-${process}`, ['cold-held'], 0)
    t.same(res.body.jobs, [], `process ${process}: nothing from the read model either`)
  }
  t.equal((await on(1, 'POST', '/jobsvc/v1/queues/cold-held/resume')).status, 200)
  const res = await poll(1, 'cold-1', ['cold-held'], 5, 5)
  t.same(res.body.jobs.map((j: { id: string }) => j.id).sort(), [...jobs].sort(), 'claimed once resumed')
})

t.test('running jobs heartbeat and ack while their queue is paused; the reaper still retries a silent one', async (t) => {
  const [running] = await createJobs('busy', 1)
  const silent = (await on(1, 'POST', '/jobsvc/v1/jobs', { job_type: 'qp', payload: {}, queue: 'busy', timeout_seconds: 1 })).body.id as string
  const claimedNow = await poll(0, 'busy-w', ['busy'], 5, 2)
  t.same(claimedNow.body.jobs.map((j: { id: string }) => j.id).sort(), [running, silent].sort())
  t.equal((await on(1, 'POST', '/jobsvc/v1/queues/busy/pause', { reason: 'drain' })).status, 200)
  const beat = await on(0, 'POST', '/jobsvc/v1/workers/heartbeat', { job_id: running, worker_id: 'busy-w', progress: 0.5 })
  t.equal(beat.status, 200, 'a heartbeat is accepted')
  const ack = await on(1, 'POST', '/jobsvc/v1/workers/ack', { job_id: running, worker_id: 'busy-w', status: 'succeeded', duration_ms: 3 })
  t.equal(ack.status, 200, 'an ack is accepted')
  t.equal(ack.body.action, 'done')
  await eventually(
    async () => {
      const history = await on(0, 'GET', `/jobsvc/v1/jobs/${silent}/history`)
      return history.body.data?.some((e: { type: string }) => e.type === 'job_attempt_failed')
    },
    15_000,
    'the reaper to retry the silent attempt',
  )
  t.equal((await on(1, 'POST', '/jobsvc/v1/queues/busy/resume')).status, 200)
})

t.test('until: the queue resumes by itself, in every process, and waiting polls wake then', async (t) => {
  const until = new Date(Date.now() + 2_000).toISOString()
  const paused = await on(0, 'POST', '/jobsvc/v1/queues/timed/pause', { until })
  t.match(paused.body, { paused: true, until })
  const [job] = await createJobs('timed', 1)
  const started = Date.now()
  const res = await poll(1, 'timed-w', ['timed'], 10, 1)
  const waited = Date.now() - started
  t.same(
    res.body.jobs.map((j: { id: string }) => j.id),
    [job],
    'claimed once the pause ended',
  )
  t.ok(Date.now() >= Date.parse(until), 'not before until')
  t.ok(waited < 6_000, `woken at until, not at the poll's deadline (${waited} ms)`)
  const list = await on(1, 'GET', '/jobsvc/v1/queues')
  t.match(list.body.data.find((q: { queue: string }) => q.queue === 'timed') ?? { paused: false }, { paused: false })
  const ended = await eventually(
    async () => {
      const page = await on(0, 'GET', '/jobsvc/v1/activity?limit=100&kinds=queue_resumed')
      return (page.body.data ?? []).find((r: { target_id: string }) => r.target_id === 'timed')
    },
    10_000,
    'the scheduler to record the end',
  )
  t.match(ended, { kind: 'queue_resumed', summary: `Queue timed resumed: its pause ended at ${until}` })
  t.match(JSON.parse(ended.metadata), { automatic: true })
})

t.test('refusals: an until not in the future, a body of the wrong shape', async (t) => {
  isError(t, await on(0, 'POST', '/jobsvc/v1/queues/x/pause', { until: new Date(Date.now() - 1000).toISOString() }), 400, 'invalid_request')
  isError(t, await on(0, 'POST', '/jobsvc/v1/queues/x/pause', { until: 'tomorrow' }), 400, 'invalid_request')
  isError(t, await on(0, 'POST', '/jobsvc/v1/queues/x/pause', { reason: 5 }), 400, 'invalid_request')
  const resumed = await on(0, 'POST', '/jobsvc/v1/queues/never-paused/resume')
  t.equal(resumed.status, 200, 'resuming a queue that is not paused')
  t.equal(resumed.body.paused, false)
})

t.test('activity rows and webhooks of pauses and resumes; `*` subscriptions get none', async (t) => {
  const receiver = await startWebhookReceiver(t)
  const bodies = receiver.received
  const base = receiver.base
  t.equal((await on(0, 'POST', '/jobsvc/v1/webhooks', { url: `${base}/queues`, events: ['queue.paused', 'queue.resumed'] })).status, 201)
  t.equal((await on(0, 'POST', '/jobsvc/v1/webhooks', { url: `${base}/all`, events: '*' })).status, 201)
  await h.startRole('dispatcher')
  t.teardown(() => h.stopRole('dispatcher'))
  t.equal((await on(0, 'POST', '/jobsvc/v1/queues/hooked/pause', { reason: 'deploy' })).status, 200)
  t.equal((await on(1, 'POST', '/jobsvc/v1/queues/hooked/resume')).status, 200)
  await on(0, 'POST', '/jobsvc/v1/jobs', { job_type: 'qp', payload: {}, queue: 'hooked' })
  const both = await eventually(async () => {
    // The dispatcher starts after the earlier tests' pauses: it sends those too, to subscriptions made before it started.
    const got = bodies.filter((b) => b.path === '/queues' && b.body.data.queue === 'hooked')
    return got.length >= 2 ? got : null
  })
  t.same(
    both.map((b) => b.body.event_type),
    ['queue.paused', 'queue.resumed'],
  )
  t.match(both[0]!.body.data, { schema_version: 1, project_id: h.projectId, queue: 'hooked', reason: 'deploy', until: null, paused_by: null })
  t.match(both[1]!.body.data, { schema_version: 1, project_id: h.projectId, queue: 'hooked', resumed_by: null })
  await eventually(async () => bodies.some((b) => b.path === '/all' && b.body.event_type === 'job.created'))
  t.notOk(
    bodies.some((b) => b.path === '/all' && b.body.event_type.startsWith('queue.')),
    '`*` keeps the spec meaning: no queue event',
  )
  const feed = await eventually(async () => {
    const page = await on(0, 'GET', '/jobsvc/v1/activity?limit=100&kinds=queue_paused,queue_resumed')
    const rows = (page.body.data ?? []).filter((r: { target_id: string }) => r.target_id === 'hooked')
    return rows.length === 2 ? rows : null
  })
  t.same(feed.map((r: { kind: string }) => r.kind).sort(), ['queue_paused', 'queue_resumed'])
  t.match(
    feed.find((r: { kind: string }) => r.kind === 'queue_paused'),
    { target_type: 'queue', summary: /hooked paused until resumed: deploy/ },
  )
})
