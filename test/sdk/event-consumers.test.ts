import http from 'node:http'
import { CursorExpiredError, JobsvcClient, JobsvcError, StaleCommitError, verifyWebhook, type FeedEvent } from '@jobsvc/sdk'
import t from 'tap'
import { purgeExpiredJobs } from '../../services/roles/scheduler/retention.ts'
import { eventually, startHarness, withClockShifted } from '../support/harness.ts'
import { gate, recordingLogger } from './support.ts'

// Named consumers (client.eventConsumers, its run() loop above all), webhook redelivery and replay,
// and operations through the SDK, against a real service with a webhook receiver on loopback.

interface Received {
  path: string
  headers: http.IncomingHttpHeaders
  body: string
}

/** Answers every delivery at once, except on `/hold`, which waits until `release` is called. */
async function startReceiver(t: { teardown(fn: () => unknown): void }) {
  const received: Received[] = []
  const held = gate()
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      const path = req.url ?? ''
      received.push({ path, headers: req.headers, body })
      if (path === '/hold') return void held.opened.then(() => res.writeHead(200).end())
      res.writeHead(200).end('ok')
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  t.teardown(held.open)
  const port = (server.address() as { port: number }).port
  return { at: (path: string) => received.filter((r) => r.path === path), port, base: `http://127.0.0.1:${port}`, release: held.open }
}

const receiver = await startReceiver(t)
const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'dispatcher'],
  config: { webhookAllowHosts: [`127.0.0.1:${receiver.port}`] },
})
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })
const day = 24 * 60 * 60 * 1000

async function createJobs(jobType: string, n: number, own = client): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < n; i++) ids.push((await own.jobs.create({ job_type: jobType, payload: { i } })).id)
  return ids
}

async function thrown(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (err) {
    return err
  }
  throw new Error('expected an error')
}

/** Starts `client.eventConsumers.run` in the background; `stop()` aborts it and waits for it to end. */
function runner(name: string, handler: (events: FeedEvent[]) => unknown, options: { limit?: number; own?: JobsvcClient } = {}) {
  const controller = new AbortController()
  const logger = recordingLogger()
  const own = options.own ?? client
  const done = own.eventConsumers.run(name, handler, { limit: options.limit ?? 100, waitSeconds: 1, signal: controller.signal, logger })
  done.catch(() => undefined)
  return {
    logger,
    done,
    stop: async () => {
      controller.abort()
      await done
    },
  }
}

t.test('create, get, list, poll, commit, seek and delete; a commit of a range a seek dropped is StaleCommitError', async (t) => {
  const jobType = 'sdk-cons-calls'
  const created = await client.eventConsumers.create({ name: 'calls', types: ['job_created'], job_type: jobType, ack_wait_seconds: 5 })
  t.match(created, { name: 'calls', types: ['job_created'], job_type: jobType, ack_wait_seconds: 5, outstanding: 0, lease_until: null })
  const start = created.position
  t.match(await thrown(client.eventConsumers.create({ name: 'calls' })), { name: 'JobsvcError', code: 'event_consumer_exists', status: 409 })

  const jobs = await createJobs(jobType, 3)
  const polled = await client.eventConsumers.poll('calls', { limit: 10 })
  t.same(
    polled.data.map((e) => e.aggregate_id),
    jobs,
  )
  t.type(polled.ack_cursor, 'string')
  t.match(await client.eventConsumers.get('calls'), { outstanding: 1, position: start, lag_events: Number })
  const committed = await client.eventConsumers.commit('calls', polled.ack_cursor)
  t.match(committed, { outstanding: 0, position: polled.ack_cursor })
  t.match(await client.eventConsumers.commit('calls', polled.ack_cursor), { position: polled.ack_cursor }, 'committing again is harmless')

  await eventually(async () => (await client.eventConsumers.list()).data.some((c) => c.name === 'calls'), 15_000, 'the list to show it')

  const [late] = await createJobs(jobType, 1)
  const next = await client.eventConsumers.poll('calls', { limit: 10 })
  t.same(
    next.data.map((e) => e.aggregate_id),
    [late],
  )
  t.match(await client.eventConsumers.seek('calls', { after: start }), { position: start, outstanding: 0 })
  const stale = await thrown(client.eventConsumers.commit('calls', next.ack_cursor))
  t.ok(stale instanceof StaleCommitError, 'a range the seek dropped cannot be committed')
  t.ok(stale instanceof JobsvcError)
  t.match(stale, { name: 'StaleCommitError', code: 'invalid_state', status: 409, ackCursor: next.ack_cursor })
  t.same(
    (await client.eventConsumers.poll('calls', { limit: 10 })).data.map((e) => e.aggregate_id),
    [...jobs, late],
    'after the seek, polls read again from where it put the consumer',
  )

  await client.eventConsumers.delete('calls')
  t.match(await thrown(client.eventConsumers.get('calls')), { code: 'event_consumer_not_found', status: 404 })
})

t.test('two runners on one consumer: every job_created handled once, every range committed', async (t) => {
  const jobType = 'sdk-cons-shared'
  await client.eventConsumers.create({ name: 'shared', types: ['job_created'], job_type: jobType })
  const jobs = await createJobs(jobType, 30)
  const handled: Record<'a' | 'b', string[]> = { a: [], b: [] }
  // Each runner's first batch is held until the other has one too: both take part, holding distinct ranges at once.
  const both = gate()
  const handler = (which: 'a' | 'b') => async (events: FeedEvent[]) => {
    const first = handled[which].length === 0
    handled[which].push(...events.map((e) => e.aggregate_id))
    if (handled.a.length > 0 && handled.b.length > 0) both.open()
    if (first) await both.opened
  }
  const a = runner('shared', handler('a'), { limit: 4 })
  const b = runner('shared', handler('b'), { limit: 4 })
  await eventually(
    async () => {
      const c = await client.eventConsumers.get('shared')
      return handled.a.length + handled.b.length >= jobs.length && c.outstanding === 0 && c.position === c.delivered ? c : null
    },
    30_000,
    'both runners to handle and commit every event',
  )
  await a.stop()
  await b.stop()
  t.pass('aborting the signal resolves run()')

  const all = [...handled.a, ...handled.b]
  t.same([...all].sort(), [...jobs].sort(), 'every job_created')
  t.equal(new Set(all).size, all.length, 'none twice')
  t.ok(handled.a.length > 0 && handled.b.length > 0, `both runners handled events (${handled.a.length} and ${handled.b.length})`)
  t.same([...a.logger.entries, ...b.logger.entries], [], 'nothing logged')
})

t.test('a handler that throws: its range stays uncommitted and comes back, whole, after the lease', async (t) => {
  const jobType = 'sdk-cons-throws'
  const created = await client.eventConsumers.create({ name: 'throws', types: ['job_created'], job_type: jobType, ack_wait_seconds: 5 })
  const jobs = await createJobs(jobType, 3)
  const calls: string[][] = []
  const r = runner('throws', (events) => {
    calls.push(events.map((e) => e.id))
    if (calls.length === 1) throw new Error('downstream refused')
  })
  t.teardown(r.stop)
  await eventually(async () => calls.length === 1, 15_000, 'the first call')
  const held = await client.eventConsumers.get('throws')
  t.match(held, { position: created.position, outstanding: 1 }, 'not committed')
  t.match(r.logger.entries, [
    { level: 'error', message: /handler failed/, fields: { consumer: 'throws', events: 3, error: 'Error: downstream refused' } },
  ])
  await new Promise((resolve) => setTimeout(resolve, 1_500))
  t.equal(calls.length, 1, 'while the lease holds, nothing else is handed out')

  // The lease is 5 s: with the service's clock 10 s ahead, the runner's next poll gets the range again.
  await withClockShifted(h.runtime, 10_000, () => eventually(async () => calls.length === 2, 15_000, 'the range to come back'))
  t.same(calls[1], calls[0], 'the same events, whole')
  const done = await eventually(async () => {
    const c = await client.eventConsumers.get('throws')
    return c.outstanding === 0 ? c : null
  })
  t.equal(done.position, done.delivered, 'committed once the handler returned')
  const handled = (await client.eventsPage({ jobType, types: ['job_created'] })).data
  t.same(
    handled.map((e) => e.id),
    calls[1],
  )
  t.same(
    handled.map((e) => e.aggregate_id),
    jobs,
  )
})

t.test('run(): a commit refused as stale is logged and skipped; the events come again from where the seek put the consumer', async (t) => {
  const jobType = 'sdk-cons-stale'
  const created = await client.eventConsumers.create({ name: 'stale', types: ['job_created'], job_type: jobType })
  const jobs = await createJobs(jobType, 2)
  const calls: string[][] = []
  const r = runner('stale', async (events) => {
    calls.push(events.map((e) => e.aggregate_id))
    // Another operator moves the consumer back while this batch is being handled.
    if (calls.length === 1) await client.eventConsumers.seek('stale', { after: created.position })
  })
  t.teardown(r.stop)
  await eventually(async () => calls.length === 2 && (await client.eventConsumers.get('stale')).outstanding === 0, 15_000, 'the second handling')
  t.same(calls, [jobs, jobs])
  t.match(r.logger.entries, [{ level: 'warn', message: /commit refused as stale/, fields: { consumer: 'stale', events: 2 } }])
})

t.test('run() rejects with CursorExpiredError when retention overtook the position', async (t) => {
  const p = await h.newProject()
  const own = new JobsvcClient({ baseUrl: h.url, apiKey: p.apiKey })
  await own.eventConsumers.create({ name: 'old', start: 'earliest' })
  for (const id of await createJobs('sdk-cons-old', 2, own)) await own.jobs.cancel(id)
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${p.projectId} AND state = 'cancelled'`)[0]!.n === 2,
  )
  // The free plan keeps ended jobs 30 days: a month later, retention removes them.
  t.ok((await withClockShifted(h.runtime, 31 * day, () => purgeExpiredJobs(h.runtime))) >= 2)

  const r = runner('old', () => t.fail('no event is handed out past a gap'), { own })
  const expired = await thrown(r.done)
  t.ok(expired instanceof CursorExpiredError)
  t.match(expired, { code: 'cursor_expired', status: 410, oldestCursor: String })
  await own.eventConsumers.seek('old', { after: (expired as CursorExpiredError).oldestCursor })
  t.type((await own.eventConsumers.poll('old')).ack_cursor, 'string', 'polls go on once it is moved')
})

t.test('replay, dry run, operations, cancel and redelivery through the SDK', async (t) => {
  // A subscription made before the jobs: once it has their job.created, fan-out has passed them,
  // so a subscription made after gets them only by a replay.
  const canary = await client.webhooks.create({ url: `${receiver.base}/canary`, events: ['job.created'] })
  t.teardown(() => client.webhooks.delete(canary.id))
  const since = new Date(Date.now() - 1)
  const jobs = await createJobs('sdk-replayed', 3)
  await eventually(async () => {
    const seen = new Set(receiver.at('/canary').map((r) => JSON.parse(r.body).data.job_id))
    return jobs.every((id) => seen.has(id))
  })
  const sub = await client.webhooks.create({ url: `${receiver.base}/missing`, events: ['job.created'] })

  t.same(await client.webhooks.replay(sub.id, { since, mode: 'missing', dryRun: true }), { matched: 3 }, 'a dry run counts')
  t.same(await client.webhooks.replay(sub.id, { since: since.toISOString(), mode: 'failed', eventTypes: ['job.created'], dryRun: true }), {
    matched: 0,
  })
  t.equal(receiver.at('/missing').length, 0, 'a dry run sends nothing')
  t.match(await thrown(client.webhooks.replay(sub.id, { since, mode: 'all', eventTypes: ['job.failed'] })), { code: 'invalid_request', status: 400 })

  const started = await client.webhooks.replay(sub.id, { since, until: new Date(), mode: 'missing' })
  t.match(started, { operation_id: /^op_/, matched: 3 })
  const done = await eventually(async () => {
    const op = await client.operations.get(started.operation_id)
    return op.status === 'succeeded' ? op : null
  }, 30_000)
  t.match(done, { kind: 'webhook_replay', matched: 3, processed: 3, succeeded: 3, failed: 0, error: null })
  const hits = receiver.at('/missing')
  t.same(hits.map((hit) => JSON.parse(hit.body).data.job_id).sort(), [...jobs].sort(), 'every earlier job.created, once')
  for (const hit of hits) verifyWebhook({ rawBody: hit.body, signatureHeader: String(hit.headers['x-service-signature']), secrets: sub.secret })
  t.match(
    await thrown(client.operations.cancel(started.operation_id)),
    { code: 'invalid_state', status: 409 },
    'an ended operation cannot be stopped',
  )

  const delivery = await eventually(async () => {
    const d = (await client.webhooks.deliveries(sub.id)).data.find((x) => x.status === 'delivered')
    return d ?? null
  })
  const again = await client.webhooks.redeliver(sub.id, delivery.id)
  t.match(again, { status: 'pending', attempt: 1, event_id: delivery.event_id, redelivery_of: delivery.id })
  const repeated = await eventually(async () => receiver.at('/missing').find((hit) => hit.headers['x-jobsvc-redelivery'] === delivery.id))
  t.equal(repeated.headers['x-service-event-id'], delivery.event_id, 'the same event')
  t.match(await thrown(client.webhooks.redeliver(sub.id, `del_${'0'.repeat(26)}`)), { code: 'delivery_not_found', status: 404 })

  // Deliveries to /hold stay unanswered, so the replay stays running until it is stopped.
  const holding = await client.webhooks.create({ url: `${receiver.base}/hold`, events: ['job.created'] })
  t.teardown(() => client.webhooks.delete(holding.id))
  const running = await client.webhooks.replay(holding.id, { since, mode: 'missing' })
  t.equal(running.matched, 3)
  const stopped = await client.operations.cancel(running.operation_id)
  t.match(stopped, { id: running.operation_id, status: 'cancelled', finished_at: String })
  t.match(await client.operations.cancel(running.operation_id), { status: 'cancelled' }, 'stopping it again answers it as it is')
  receiver.release()

  const listed = await eventually(async () => {
    const page = await client.operations.list({ limit: 1 })
    return page.data[0]?.id === running.operation_id ? page : null
  })
  t.match(listed, { has_more: true, next_cursor: String }, 'newest first, one per page')
  const every: string[] = []
  for await (const op of client.operations.listAll({ limit: 1 })) every.push(op.id)
  t.same(every, [running.operation_id, started.operation_id], 'listAll follows next_cursor')
  t.match(await thrown(client.operations.get(`op_${'0'.repeat(26)}`)), { code: 'operation_not_found', status: 404 })
})
