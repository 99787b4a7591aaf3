import { createHmac } from 'node:crypto'
import http from 'node:http'
import { verifyWebhook } from '@jobsvc/sdk'
import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

// Issue 25, item 3: redelivering a delivery, replaying a subscription's events from the log (events
// from before it existed included) as an operation that can be stopped half-way and that resumes
// after its role restarts. Against the real NATS and Postgres, with a receiver on loopback.

interface Received {
  path: string
  headers: http.IncomingHttpHeaders
  body: string
}

async function startReceiver(t: { teardown(fn: () => unknown): void }) {
  const received: Received[] = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      const path = req.url ?? ''
      received.push({ path, headers: req.headers, body })
      if (path.startsWith('/slow')) return void setTimeout(() => res.writeHead(200).end(), 1_500)
      if (path.startsWith('/refuse')) return void res.writeHead(400).end()
      res.writeHead(200).end('ok')
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const port = (server.address() as { port: number }).port
  const at = (path: string) => received.filter((r) => r.path === path)
  return { received, at, port, base: `http://127.0.0.1:${port}` }
}

/** A replay's pace per endpoint: slow enough for a test to stop or restart it half-way. */
const perSecond = 5

const receiver = await startReceiver(t)
const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'dispatcher'],
  config: { webhookAllowHosts: [`127.0.0.1:${receiver.port}`] },
  tunables: { webhook_retry_delays_ms: [100, 200, 300, 400], webhook_timeout_ms: 3_000, webhook_replay_requests_per_second: perSecond },
})

const subscribe = async (path: string, events: unknown = ['job.created']) => {
  const res = await h.request('POST', '/jobsvc/v1/webhooks', { url: `${receiver.base}${path}`, events })
  t.equal(res.status, 201, JSON.stringify(res.body))
  return res.body as { id: string; secret: string }
}
const createJobs = async (n: number, queue: string) => {
  const ids: string[] = []
  for (let i = 0; i < n; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'replayed', queue, payload: { i } })
    t.equal(res.status, 201)
    ids.push(res.body.id)
  }
  return ids
}

// A subscription made before every job: once it has received a job's job.created, the dispatcher's
// fan-out has passed that event, so a subscription made after cannot get it live.
await subscribe('/canary')
const jobIdOf = (r: Received) => JSON.parse(r.body).data.job_id as string
/** Jobs whose job.created the fan-out has passed: a subscription made after them gets them only by a replay. */
const createJobsBefore = async (n: number, queue: string) => {
  const ids = await createJobs(n, queue)
  await eventually(async () => {
    const seen = new Set(receiver.at('/canary').map(jobIdOf))
    return ids.every((id) => seen.has(id))
  })
  return ids
}
const deliveriesOf = async (id: string, query = '') => (await h.request('GET', `/jobsvc/v1/webhooks/${id}/deliveries${query}`)).body
const operation = async (id: string) => (await h.request('GET', `/jobsvc/v1/operations/${id}`)).body
/** Just before now, as a replay's `since`: the events' times are the API's clock. */
const sinceNow = () => new Date(Date.now() - 1).toISOString()

t.test('redelivery: the same event id and body, signed with the current secret after a rotation, marked as a redelivery', async (t) => {
  const sub = await subscribe('/redeliver')
  const [jobId] = await createJobs(1, 'redeliver')
  const first = await eventually(async () => receiver.at('/redeliver')[0])
  const original = await eventually(async () => {
    const d = (await deliveriesOf(sub.id)).data[0]
    return d?.status === 'delivered' ? d : null
  })
  t.match(original, { id: /^del_/, event_type: 'job.created', redelivery_of: null, operation_id: null })
  t.equal(original.event_id, first.headers['x-service-event-id'], 'each delivery record names its event')
  t.notOk('x-jobsvc-redelivery' in first.headers, 'a first delivery carries the spec’s headers only')

  const rotated = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/rotate-secret`)
  t.equal(rotated.status, 200)
  const res = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`)
  t.equal(res.status, 202, JSON.stringify(res.body))
  t.match(res.body, {
    id: /^del_/,
    event_id: original.event_id,
    event_type: 'job.created',
    status: 'pending',
    attempt: 1,
    redelivery_of: original.id,
  })
  t.not(res.body.id, original.id, 'a new delivery')

  const again = await eventually(async () => receiver.at('/redeliver')[1])
  t.equal(again.body, first.body, 'the same body: the same event id, time and data')
  t.equal(jobIdOf(again), jobId)
  t.equal(again.headers['x-service-event-id'], original.event_id)
  t.equal(again.headers['x-jobsvc-redelivery'], original.id, 'the header names the delivery it repeats')
  const header = String(again.headers['x-service-signature'])
  const event = verifyWebhook({ rawBody: again.body, signatureHeader: header, secrets: rotated.body.secret })
  t.equal(event.event_id, original.event_id, 'the SDK verifies it with the current secret')
  const ts = header.split(',')[0]!.slice(2)
  t.equal(
    header.split(',')[1],
    `v1=${createHmac('sha256', rotated.body.secret).update(`${ts}.${again.body}`).digest('hex')}`,
    'the current secret signs first',
  )
  t.not(header, first.headers['x-service-signature'], 'a new signature')

  const listed = await eventually(async () => {
    const l = await deliveriesOf(sub.id)
    return l.data.length === 2 && l.data.every((d: { status: string }) => d.status === 'delivered') ? l : null
  })
  t.same(
    listed.data.map((d: { id: string }) => d.id),
    [res.body.id, original.id],
    'newest first',
  )
  t.same(
    listed.data.map((d: { event_id: string }) => d.event_id),
    [original.event_id, original.event_id],
  )
  t.equal((await deliveriesOf(sub.id, '?status=failed')).data.length, 0, 'the status filter')
  t.equal((await deliveriesOf(sub.id, '?event_type=job.created&status=delivered')).data.length, 2)
  t.equal((await deliveriesOf(sub.id, `?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`)).data.length, 0, 'since')
  t.equal((await deliveriesOf(sub.id, `?until=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`)).data.length, 2, 'until')
  isError(t, await h.request('GET', `/jobsvc/v1/webhooks/${sub.id}/deliveries?since=yesterday`), 400, 'invalid_request')
  isError(t, await h.request('GET', `/jobsvc/v1/webhooks/${sub.id}/deliveries?status=lost`), 400, 'invalid_request')

  isError(t, await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/deliveries/del_${'0'.repeat(26)}/redeliver`), 404, 'delivery_not_found')
  const other = await subscribe('/redeliver-other')
  isError(
    t,
    await h.request('POST', `/jobsvc/v1/webhooks/${other.id}/deliveries/${original.id}/redeliver`),
    404,
    'delivery_not_found',
    'another subscription’s delivery',
  )
})

t.test('a delivery still pending is not redelivered', async (t) => {
  const sub = await subscribe('/slow')
  await createJobs(1, 'slow')
  await eventually(async () => receiver.at('/slow')[0])
  const pending = await eventually(async () => (await deliveriesOf(sub.id)).data[0])
  isError(t, await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/deliveries/${pending.id}/redeliver`), 409, 'invalid_state')
})

t.test('a missing replay sends the events from before the subscription existed, verifiable with the SDK', async (t) => {
  const since = sinceNow()
  const jobIds = await createJobsBefore(3, 'before')
  const sub = await subscribe('/missing')
  await new Promise((r) => setTimeout(r, 200))
  t.equal(receiver.at('/missing').length, 0, 'the jobs were created before the subscription: nothing went out live')

  const dry = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'missing', dry_run: true })
  t.equal(dry.status, 200, JSON.stringify(dry.body))
  t.same(dry.body, { matched: 3 })
  t.equal((await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'failed', dry_run: true })).body.matched, 0)
  t.equal((await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'all', dry_run: true })).body.matched, 3)
  const until = new Date(Date.parse(since) - 60_000).toISOString()
  isError(
    t,
    await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, until, mode: 'all' }),
    400,
    'invalid_request',
    'until before since',
  )
  isError(
    t,
    await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'all', event_types: ['job.failed'] }),
    400,
    'invalid_request',
  )
  isError(t, await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since: 'last week', mode: 'all' }), 400, 'invalid_request')
  isError(t, await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'some' }), 400, 'invalid_request')

  const started = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'missing' })
  t.equal(started.status, 202, JSON.stringify(started.body))
  t.match(started.body, { operation_id: /^op_/, matched: 3 })
  const opId = started.body.operation_id as string

  const done = await eventually(async () => {
    const op = await operation(opId)
    return op.status === 'succeeded' ? op : null
  })
  t.match(done, { id: opId, kind: 'webhook_replay', status: 'succeeded', matched: 3, processed: 3, succeeded: 3, failed: 0, error: null })
  t.ok(done.finished_at, 'finished_at is set')
  const hits = receiver.at('/missing')
  t.same(hits.map(jobIdOf).sort(), [...jobIds].sort(), 'every earlier job.created, once')
  for (const hit of hits) {
    const event = verifyWebhook({ rawBody: hit.body, signatureHeader: String(hit.headers['x-service-signature']), secrets: sub.secret })
    t.equal(event.event_type, 'job.created')
    t.equal(hit.headers['x-jobsvc-operation'], opId)
    t.notOk('x-jobsvc-redelivery' in hit.headers, 'never delivered before: not a redelivery')
  }
  const listed = await eventually(async () => {
    const l = await deliveriesOf(sub.id)
    return l.data.length === 3 && l.data.every((d: { status: string }) => d.status === 'delivered') ? l : null
  })
  t.ok(
    listed.data.every((d: { operation_id: string }) => d.operation_id === opId),
    'the deliveries name the replay',
  )
  const ops = (await h.request('GET', '/jobsvc/v1/operations')).body
  t.match(ops, { has_more: false, next_cursor: null })
  t.equal(ops.data[0].id, opId, 'the list, newest first')
  t.equal(
    (await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'missing', dry_run: true })).body.matched,
    0,
    'nothing missing any more',
  )
  isError(t, await h.request('DELETE', `/jobsvc/v1/operations/${opId}`), 409, 'invalid_state', 'an operation that ended cannot be stopped')
  isError(t, await h.request('GET', `/jobsvc/v1/operations/op_${'0'.repeat(26)}`), 404, 'operation_not_found')
})

t.test('a failed replay sends again the events whose delivery failed, each naming the delivery it repeats', async (t) => {
  const since = sinceNow()
  const sub = await subscribe('/refuse')
  const jobIds = await createJobs(2, 'refused')
  const failed = await eventually(async () => {
    const l = await deliveriesOf(sub.id, '?status=failed')
    return l.data.length === 2 ? l.data : null
  })
  const fixed = await h.request('PATCH', `/jobsvc/v1/webhooks/${sub.id}`, { url: `${receiver.base}/fixed` })
  t.equal(fixed.status, 200)
  const started = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'failed' })
  t.match(started.body, { operation_id: /^op_/, matched: 2 })
  const done = await eventually(async () => {
    const op = await operation(started.body.operation_id)
    return op.status === 'succeeded' ? op : null
  })
  t.match(done, { matched: 2, processed: 2, succeeded: 2, failed: 0 })
  const hits = receiver.at('/fixed')
  t.same(hits.map(jobIdOf).sort(), [...jobIds].sort())
  t.same(
    hits.map((hit) => hit.headers['x-jobsvc-redelivery']).sort(),
    failed.map((d: { id: string }) => d.id).sort(),
    'each names the failed delivery it repeats',
  )
  t.equal(
    (await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'failed', dry_run: true })).body.matched,
    0,
    'their latest deliveries went through',
  )
})

t.test('an operation stopped half-way: cancelled, fewer processed than matched, nothing more delivered', async (t) => {
  const since = sinceNow()
  await createJobsBefore(20, 'cancel')
  const sub = await subscribe('/cancel')
  const started = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'missing' })
  t.match(started.body, { matched: 20 })
  const opId = started.body.operation_id as string
  await eventually(async () => (await operation(opId)).processed >= 3)
  const stopped = await h.request('DELETE', `/jobsvc/v1/operations/${opId}`)
  t.equal(stopped.status, 200, JSON.stringify(stopped.body))
  t.match(stopped.body, { id: opId, status: 'cancelled' })
  t.ok(stopped.body.finished_at)
  // The deliveries already counted go out (what was done stays done); then nothing more.
  const op = await eventually(async () => {
    const now = await operation(opId)
    return receiver.at('/cancel').length === now.processed ? now : null
  })
  t.equal(op.status, 'cancelled')
  t.ok(op.processed < op.matched, `processed ${op.processed} < matched ${op.matched}`)
  await new Promise((r) => setTimeout(r, (3 * 1000) / perSecond + 500))
  t.equal(receiver.at('/cancel').length, op.processed, 'nothing more was delivered')
  t.equal((await operation(opId)).processed, op.processed)
  t.equal((await deliveriesOf(sub.id)).data.length, op.processed, 'a delivery for each event processed, no other')
  const again = await h.request('DELETE', `/jobsvc/v1/operations/${opId}`)
  t.equal(again.status, 200, 'stopping it again answers it as it is')
  t.equal(again.body.status, 'cancelled')
})

t.test('an operation resumes after its role restarts, and finishes with the right counts', async (t) => {
  const since = sinceNow()
  const jobIds = await createJobsBefore(12, 'resume')
  const sub = await subscribe('/resume')
  const started = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/replay`, { since, mode: 'missing' })
  t.match(started.body, { matched: 12 })
  const opId = started.body.operation_id as string
  await eventually(async () => (await operation(opId)).processed >= 3)
  await h.stopRole('dispatcher')
  const halfway = await operation(opId)
  t.equal(halfway.status, 'running', 'a stopped role leaves its operation running')
  t.ok(halfway.processed < 12, `stopped at ${halfway.processed}`)
  await new Promise((r) => setTimeout(r, 500))
  t.equal((await operation(opId)).processed, halfway.processed, 'nothing runs it meanwhile')

  await h.startRole('dispatcher')
  const done = await eventually(async () => {
    const op = await operation(opId)
    return op.status === 'succeeded' ? op : null
  }, 30_000)
  t.match(done, { status: 'succeeded', matched: 12, processed: 12, succeeded: 12, failed: 0 })
  const hits = receiver.at('/resume')
  t.equal(hits.length, 12, 'each event once: resumed, not started again')
  t.same(hits.map(jobIdOf).sort(), [...jobIds].sort())
  for (const hit of hits) verifyWebhook({ rawBody: hit.body, signatureHeader: String(hit.headers['x-service-signature']), secrets: sub.secret })
})
