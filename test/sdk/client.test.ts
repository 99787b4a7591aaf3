import { JobsvcClient, JobsvcError } from '@jobsvc/sdk'
import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { faultyProxy } from './support.ts'

// The typed client against a real service: every family of routes, the error class, and
// retries that never create a job twice.
const h = await startHarness(t, import.meta.filename)
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

async function thrown(promise: Promise<unknown>): Promise<JobsvcError> {
  try {
    await promise
  } catch (err) {
    if (err instanceof JobsvcError) return err
    throw err
  }
  throw new Error('expected a JobsvcError')
}

t.test('a create whose answer is lost is retried with the same Idempotency-Key and makes one job', async (t) => {
  const proxy = await faultyProxy(t, h.url, (req, n) => (req.method === 'POST' && n === 1 ? 'drop-answer' : 'pass'))
  const viaProxy = new JobsvcClient({ baseUrl: proxy.url, apiKey: h.apiKey, retryBaseMs: 10 })
  const job = await viaProxy.jobs.create({ job_type: 'once-only', payload: { n: 1 } })
  t.equal(proxy.seen.length, 2, 'sent twice')
  t.match(proxy.seen[0]!.idempotencyKey, /^[A-Za-z0-9_-]{1,200}$/, 'with a generated key the spec accepts')
  t.equal(proxy.seen[1]!.idempotencyKey, proxy.seen[0]!.idempotencyKey, 'the retry reuses it')
  const listed = await client.jobs.list({ job_type: 'once-only' })
  t.strictSame(
    listed.data.map((j) => j.id),
    [job.id],
    'one job, the one the retry answered',
  )

  const again = await client.jobs.create({ job_type: 'once-only', payload: { n: 1 } })
  t.not(again.id, job.id, 'a new call is a new key and a new job')
})

t.test('reads are retried after a 5xx; a 4xx is not retried', async (t) => {
  const proxy = await faultyProxy(t, h.url, (_req, n) => (n === 1 ? 'bad-gateway' : 'pass'))
  const viaProxy = new JobsvcClient({ baseUrl: proxy.url, apiKey: h.apiKey, retryBaseMs: 10 })
  t.ok(Array.isArray((await viaProxy.jobs.list()).data), 'the list answered after one 502')
  t.equal(proxy.seen.length, 2)
  const before = proxy.seen.length
  await thrown(viaProxy.jobs.get('job_01ARZ3NDEKTSV4RRFFQ69G5FAV'))
  t.equal(proxy.seen.length, before + 1, 'a 404 is sent once')
})

t.test('errors carry code, status, request id and Retry-After', async (t) => {
  const missing = await thrown(client.jobs.get('job_01ARZ3NDEKTSV4RRFFQ69G5FAV'))
  t.match(missing, { name: 'JobsvcError', code: 'job_not_found', status: 404, requestId: /^[0-9A-Z]{26}$/, retryAfter: null })
  const invalid = await thrown(client.jobs.create({ job_type: '', payload: {} }))
  t.match(invalid, { code: 'invalid_request', status: 400 })
  const bad = new JobsvcClient({ baseUrl: h.url, apiKey: 'sv_test_sk_00000000000000000000000000000000' })
  t.match(await thrown(bad.jobs.list()), { code: 'unauthorized', status: 401 })
  const nowhere = new JobsvcClient({ baseUrl: 'http://127.0.0.1:9', apiKey: h.apiKey, maxRetries: 1, retryBaseMs: 1 })
  t.match(await thrown(nowhere.jobs.list()), { code: 'network_error', status: 0 }, 'no answer is an error too')

  const from = new Date(Date.now() - 3_600_000).toISOString()
  const until = new Date(Date.now() + 60_000).toISOString()
  await (await client.jobs.export({ from, until })).text()
  const cooldown = await thrown(client.jobs.export({ from, until }))
  t.match(cooldown, { code: 'rate_limit_exceeded', status: 429 })
  t.ok(cooldown.retryAfter !== null && cooldown.retryAfter > 0, `Retry-After is read (${cooldown.retryAfter} s)`)
})

t.test('jobs: create, batch, get, list and listAll, cancel, retry, history; batch acks', async (t) => {
  const batch = await client.jobs.createBatch([
    { job_type: 'tour', queue: 'tour', payload: { n: 1 } },
    { job_type: 'tour', queue: 'tour', payload: { n: 2 } },
    { job_type: 'tour', queue: 'tour', payload: { n: 3 }, run_at: new Date(Date.now() + 3_600_000).toISOString() },
    { job_type: '', payload: {} },
  ])
  t.match(batch, { created: 3, failed: 1 })
  t.match(batch.results[3], { status: 400, error: { code: 'invalid_request' } })
  const [first, second, later] = batch.results.slice(0, 3).map((r) => ('body' in r ? r.body : null)!)
  t.match(await client.jobs.get(first!.id), { id: first!.id, state: 'pending', payload: { n: 1 }, queue: 'tour' })

  const page = await client.jobs.list({ queue: 'tour', limit: 2 })
  t.equal(page.data.length, 2)
  t.equal(page.has_more, true)
  const all = []
  for await (const job of client.jobs.listAll({ queue: 'tour', limit: 1 })) all.push(job.id)
  t.strictSame(all.sort(), [first!.id, second!.id, later!.id].sort(), 'listAll follows the cursor to the end')

  t.match(await client.jobs.cancel(later!.id), { id: later!.id, state: 'cancelled' })
  t.match(await thrown(client.jobs.cancel(later!.id)), { code: 'invalid_state', status: 409 })

  const claimed = await client.workers.poll({ worker_id: 'wrk_tour', queues: ['tour'], capacity: 2, wait_seconds: 5 })
  t.equal(claimed.jobs.length, 2)
  const acks = await client.workers.ackBatch(claimed.jobs.map((j) => ({ job_id: j.id, worker_id: 'wrk_tour', status: 'failed' as const })))
  t.match(acks, { acked: 2, failed: 0 })
  t.match(await thrown(client.jobs.retry(first!.id)), { code: 'invalid_state' }, 'a pending job cannot be retried')
  const history = await client.jobs.history(first!.id)
  t.strictSame(
    history.data.map((e) => e.type),
    ['job_created', 'job_claimed', 'job_attempt_failed'],
  )
})

t.test('jobs: the job as of each event of its history (asOf), and the history filtered by types, since and until', async (t) => {
  const created = await client.jobs.create({ job_type: 'as-of', queue: 'sdk-as-of', payload: { n: 7 }, max_attempts: 1 })
  const [polled] = (await client.workers.poll({ worker_id: 'wrk_asof', queues: ['sdk-as-of'], wait_seconds: 5 })).jobs
  t.equal(polled?.id, created.id)
  await client.workers.heartbeat({ job_id: created.id, worker_id: 'wrk_asof', progress: 0.5 })
  await client.workers.ack({ job_id: created.id, worker_id: 'wrk_asof', status: 'failed', error: { type: 'Nope', message: 'no', stack_trace: '' } })
  const events = (await client.jobs.history(created.id)).data
  t.strictSame(
    events.map((e) => e.type),
    ['job_created', 'job_claimed', 'job_progressed', 'job_dead_lettered'],
  )

  const states = []
  for (const event of events) {
    const then = await client.jobs.get(created.id, { asOf: event.cursor })
    t.equal(then.as_of.sequence, event.sequence, `as of ${event.type}: where the read stopped`)
    states.push([then.state, then.progress, then.error?.type ?? null])
  }
  t.strictSame(states, [
    ['pending', null, null],
    ['processing', null, null],
    ['processing', 0.5, null],
    ['dead_letter', 0.5, 'Nope'],
  ])
  const byTime = await client.jobs.get(created.id, { asOf: new Date(Date.parse(events[0]!.time)) })
  t.match(byTime, { state: 'pending', payload: { n: 7 }, as_of: { time: events[0]!.time } }, 'a Date is sent as its instant')
  const now = await client.jobs.get(created.id)
  t.equal('as_of' in now, false, 'without asOf: the job now, as before')
  t.match(await thrown(client.jobs.get(created.id, { asOf: new Date(Date.parse(events[0]!.time) - 1) })), { code: 'job_not_found', status: 404 })
  t.match(await thrown(client.jobs.get(created.id, { asOf: 'last tuesday' })), { code: 'invalid_request', status: 400 })

  t.strictSame(
    (await client.jobs.history(created.id, { types: ['job_claimed', 'job_dead_lettered'] })).data,
    events.filter((e) => e.type === 'job_claimed' || e.type === 'job_dead_lettered'),
  )
  t.strictSame((await client.jobs.history(created.id, { types: 'job_progressed' })).data, [events[2]])
  const window = await client.jobs.history(created.id, { since: new Date(Date.parse(events[1]!.time)), until: events[2]!.time, limit: 5 })
  t.strictSame(
    window.data,
    events.filter((e) => e.time >= events[1]!.time && e.time <= events[2]!.time),
  )
  await t.rejects(client.jobs.history(created.id, { types: [] }), TypeError, 'an empty list of types is refused before it widens to every type')
  t.match(await thrown(client.jobs.history(created.id, { types: ['job_exploded'] })), { code: 'invalid_request', status: 400 })
})

t.test('recurring, alerts, activity and metrics', async (t) => {
  const schedule = await client.recurring.upsert('rjob_nightly-report', { job_type: 'nightly-report', cron_expression: '0 3 * * *' })
  t.match(schedule, { id: 'rjob_nightly-report', queue: 'default', timezone: 'UTC' })
  t.ok((await client.recurring.list()).data.some((s) => s.id === schedule.id))
  await client.recurring.delete(schedule.id)
  t.match(await thrown(client.recurring.delete(schedule.id)), { code: 'recurring_job_not_found', status: 404 })

  const alert = await client.alerts.create({ name: 'backlog', kind: 'queue_depth', threshold: 100 })
  t.match(await client.alerts.get(alert.id), { name: 'backlog', threshold: 100, enabled: true })
  t.match(await client.alerts.update(alert.id, { name: 'backlog', kind: 'queue_depth', threshold: 50 }), { threshold: 50 })
  t.equal((await client.alerts.list()).data.length, 1)
  await client.alerts.delete(alert.id)

  const kinds = []
  for await (const item of client.activity.listAll({ limit: 5 })) kinds.push(item.kind)
  t.ok(kinds.includes('recurring_upserted') && kinds.includes('alert_created') && kinds.includes('job_created'), 'activity pages through the feed')

  const summary = await client.metrics.summary({ group_by: 'queue' })
  t.ok(summary.total > 0)
  t.ok(Array.isArray((await client.metrics.queues()).data))
  t.ok(Array.isArray((await client.metrics.throughput()).buckets))
  t.ok(Array.isArray((await client.metrics.jobTypes()).data))
})

t.test('retry policy: the project default and a queue override, set, read back and removed', async (t) => {
  const policy = { base_delay_seconds: 4, factor: 3, max_delay_seconds: 30, jitter_seconds: 2, max_attempts: 5 }
  t.equal((await client.retryPolicy.get()).source, 'service', "the service's default before any change")
  t.match(await client.retryPolicy.set(policy), { ...policy, source: 'project' })
  t.match(await client.retryPolicy.setForQueue('sdk-slow', { ...policy, base_delay_seconds: 60, max_delay_seconds: 600 }), {
    queue: 'sdk-slow',
    base_delay_seconds: 60,
    source: 'queue',
  })
  t.match(
    await client.retryPolicy.getForQueue('sdk-other'),
    { queue: 'sdk-other', ...policy, source: 'project' },
    'a queue without its own follows the project',
  )
  t.same(
    (await client.retryPolicy.get()).queues?.map((q) => q.queue),
    ['sdk-slow'],
  )
  await client.retryPolicy.removeForQueue('sdk-slow')
  t.equal((await client.retryPolicy.getForQueue('sdk-slow')).source, 'project')
  await client.retryPolicy.remove()
  t.equal((await client.retryPolicy.get()).source, 'service')
})

t.test('queues: paused with a reason and an until, listed, resumed', async (t) => {
  const until = new Date(Date.now() + 3_600_000).toISOString()
  t.match(await client.queues.pause('sdk-held', { reason: 'deploy', until }), { queue: 'sdk-held', paused: true, reason: 'deploy', until })
  const listed = await client.queues.list()
  t.match(listed.data[0], { queue: 'sdk-held', paused: true, reason: 'deploy', total: 0 }, 'a paused queue is listed, first, even without jobs')
  t.match(await client.queues.resume('sdk-held'), { queue: 'sdk-held', paused: false, reason: null })
  t.notOk(
    (await client.queues.list()).data.some((q) => q.queue === 'sdk-held'),
    'resumed and empty: no longer listed',
  )
})

t.test('expiry: ttl_seconds on a create, a batch item and a schedule; a queue default set and removed', async (t) => {
  const own = await client.jobs.create({ job_type: 'sdk-ttl', payload: {}, queue: 'sdk-ttl', ttl_seconds: 600 })
  t.match(await client.jobs.get(own.id), { ttl_seconds: 600, expires_at: String })
  t.same(await client.queues.setSettings('sdk-ttl', { default_ttl_seconds: 120 }), { queue: 'sdk-ttl', default_ttl_seconds: 120 })
  const batch = await client.jobs.createBatch([{ job_type: 'sdk-ttl', payload: {}, queue: 'sdk-ttl' }])
  const created = batch.results[0]!
  t.equal('body' in created && (await client.jobs.get(created.body.id)).ttl_seconds, 120, "the queue's default")
  const listed = await client.queues.list()
  t.equal(listed.data.find((q) => q.queue === 'sdk-ttl')?.default_ttl_seconds, 120)
  t.same(await client.queues.setSettings('sdk-ttl', { default_ttl_seconds: null }), { queue: 'sdk-ttl', default_ttl_seconds: null })
  const schedule = await client.recurring.upsert('rjob_sdk-ttl-tick', { job_type: 'sdk-ttl-tick', cron_expression: '0 * * * *', ttl_seconds: 30 })
  t.equal(schedule.ttl_seconds, 30)
  await client.recurring.delete('rjob_sdk-ttl-tick')
})

t.test('dedup: a held key answers the existing job with `deduplicated`, on a create and a batch item', async (t) => {
  const dedup = { key: 'sdk-dedup-1', scope: 'queue' as const, while: 'active' as const }
  const first = await client.jobs.create({ job_type: 'sdk-dedup', payload: { n: 1 }, queue: 'sdk-dedup', dedup })
  t.notOk('deduplicated' in first, 'a new job answers the 201 body')
  const again = await client.jobs.create({ job_type: 'sdk-dedup', payload: { n: 2 }, queue: 'sdk-dedup', dedup })
  t.ok('deduplicated' in again && again.deduplicated)
  t.match(again, { id: first.id, payload: { n: 1 } })
  const batch = await client.jobs.createBatch([{ job_type: 'sdk-dedup', payload: {}, queue: 'sdk-dedup', dedup }])
  t.match(batch, { created: 0, failed: 0 })
  t.match(batch.results[0], { status: 200, body: { id: first.id, deduplicated: true } })
  const replaced = await client.jobs.create({
    job_type: 'sdk-dedup',
    payload: { n: 3 },
    queue: 'sdk-dedup',
    dedup: { ...dedup, on_duplicate: 'replace_payload' },
  })
  t.match(replaced, { id: first.id, payload: { n: 3 }, deduplicated: true }, 'replace_payload gives the waiting job the new payload')
  const debounce = { key: 'sdk-debounce-1', seconds: 600, max_wait_seconds: 3600 }
  const quiet = await client.jobs.create({ job_type: 'sdk-dedup', payload: { n: 1 }, queue: 'sdk-dedup', debounce })
  t.match(quiet, { state: 'scheduled' })
  t.match(await client.jobs.create({ job_type: 'sdk-dedup', payload: { n: 2 }, queue: 'sdk-dedup', debounce }), {
    id: quiet.id,
    payload: { n: 2 },
    deduplicated: true,
  })
})

t.test('the jobs export streams JSONL records', async (t) => {
  // A project of its own, so that its export cooldown is not the one the error test used.
  const other = await h.newProject()
  const own = new JobsvcClient({ baseUrl: h.url, apiKey: other.apiKey })
  const created = await own.jobs.create({ job_type: 'exported', payload: { keep: true } })
  // The export reads the read model; a list waits for the projector to reach this project's write.
  await own.jobs.list({ limit: 1 })
  const download = await own.jobs.export({ from: new Date(Date.now() - 60_000).toISOString(), until: new Date(Date.now() + 60_000).toISOString() })
  t.match(download.filename, /^svc-jobs-prj_.+\.jsonl$/)
  const rows = []
  for await (const row of download.records()) rows.push(row)
  t.match(rows, [{ id: created.id, job_type: 'exported', payload: { keep: true } }])
})

t.test('priorities: given at creation, changed with setPriority, refused once the job runs', async (t) => {
  const job = await client.jobs.create({ job_type: 'sdk-prio', payload: {}, queue: 'sdk-prio', priority: 30 })
  t.equal((await client.jobs.get(job.id)).priority, 30)
  t.match(await client.jobs.setPriority(job.id, -600), { id: job.id, state: 'pending', priority: -600 })
  t.match(await thrown(client.jobs.setPriority(job.id, 601)), { code: 'invalid_request', status: 400 })
  const plain = await client.jobs.create({ job_type: 'sdk-prio', payload: {}, queue: 'sdk-prio-plain' })
  t.notOk('priority' in (await client.jobs.get(plain.id)), 'a job without one has no priority field')
  await client.jobs.cancel(plain.id)
  t.match(await thrown(client.jobs.setPriority(plain.id, 5)), { code: 'invalid_state', status: 409 })
})
