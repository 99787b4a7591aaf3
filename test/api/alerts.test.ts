import t, { type Test } from 'tap'
import { evaluateAlerts } from '../../services/use-cases/alerts/alert-service.ts'
import { alertHandler } from '../../streams/aggregates.ts'
import { eventually, httpRequest, withClockShifted, type Harness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'
import { freshEmail, joinProject, newVerifiedUser, startPlatformHarness } from '../support/platform.ts'
import { alertDispatcherConsumerName, eventsStreamName, mailStreamName } from '../../streams/names.ts'

/**
 * The alert routes over HTTP, and evaluation driven by hand: no scheduler role runs, so each
 * `evaluateAlerts(h.runtime)` is one pass of what the scheduler does every alert_interval_ms.
 * The dispatcher role runs: it turns the alert events on the log into e-mails.
 * Every alert watches a queue of its own, so alerts of earlier tests stay quiet in later passes.
 */

const mailRetryDelaysMs = [200, 400]
const h = await startPlatformHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'dispatcher'],
  tunables: { mail_retry_delays_ms: mailRetryDelaysMs },
})

/**
 * Alerts e-mail only the project's members, so the alerts here belong to a project with people:
 * a user's own project (they own it), with a member joined for every address a test mails.
 */
const owner = await newVerifiedUser(h, { plan: 'business' })
const p: Harness = {
  ...h,
  apiKey: owner.apiKey,
  projectId: owner.projectId,
  request: (method, path, body, headers) => httpRequest(h.url, owner.apiKey, method, path, body, headers),
}
const { create, poll, ack } = jobsApi(p, { jobType: 'alerting' })
const sql = h.runtime.sql

/** A new member of the project (invited, signed up, joined): an address its alerts may e-mail. */
async function memberAddress(): Promise<string> {
  return (await joinProject(h, owner, owner.projectId, 'member')).email
}

const unknownId = `alr_01j${'a'.repeat(23)}`
const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

async function newAlert(body: Record<string, unknown>, apiKey = p.apiKey): Promise<any> {
  const res = await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/alerts', body)
  if (res.status !== 201) throw new Error(`alert create answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}

async function getAlert(id: string): Promise<any> {
  const res = await p.request('GET', `/jobsvc/v1/alerts/${id}`)
  if (res.status !== 200) throw new Error(`alert get answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}

/** The alert e-mails `address` received (a member's address also got its sign-up and invitation mails). */
const mailsTo = (address: string) => h.smtp.mails.filter((m) => m.to.includes(address.toLowerCase()) && /^\[(alert|resolved)\] /.test(m.subject))

/**
 * Waits until every alert event on the log has become e-mails and every e-mail has left the
 * work queue (sent or given up): only then does "no (further) mail" mean anything.
 */
async function mailSettled(): Promise<void> {
  const ns = h.config.namespace
  const jsm = h.runtime.nats.jsm
  await eventually(
    async () => {
      const consumer = await jsm.consumers.info(eventsStreamName(ns), alertDispatcherConsumerName(ns))
      const queue = await jsm.streams.info(mailStreamName(ns))
      return consumer.num_pending === 0 && consumer.num_ack_pending === 0 && queue.state.messages === 0
    },
    15_000,
    'alert e-mails settled',
  )
}

/** Waits until the jobs read model (what evaluation measures) shows `n` pending jobs in `queue`. */
async function pendingIs(queue: string, n: number, projectId = p.projectId): Promise<void> {
  await eventually(
    async () => {
      const [row] = await sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${projectId} AND queue = ${queue} AND state = 'pending'`
      return row!.n === n
    },
    15_000,
    `${n} pending jobs in ${queue}`,
  )
}

async function jobStateIs(id: string, state: string): Promise<void> {
  await eventually(
    async () => (await sql<{ state: string }[]>`SELECT state FROM jobs WHERE id = ${id}`)[0]?.state === state,
    15_000,
    `${id} in ${state}`,
  )
}

/** Claims exactly `n` jobs of `queue` (as many polls as the read model needs). */
async function claim(queue: string, n: number, workerId: string): Promise<any[]> {
  const claimed: any[] = []
  await eventually(
    async () => {
      const res = await poll({ worker_id: workerId, queues: [queue], capacity: n - claimed.length, wait_seconds: 1 })
      if (res.status !== 200) throw new Error(`poll answered ${res.status}: ${JSON.stringify(res.body)}`)
      claimed.push(...res.body.jobs)
      return claimed.length === n
    },
    15_000,
    `${n} claims on ${queue}`,
  )
  return claimed
}

/** Runs `fn` with the service clock `ms` ahead, then puts the clock back. */
const withClockAhead = <T>(ms: number, fn: () => Promise<T>): Promise<T> => withClockShifted(h.runtime, ms, fn)

/** The event types on the alert's own subject, in log order. */
async function logOf(t: Test, id: string, projectId = p.projectId): Promise<string[]> {
  const records = await alertHandler.history(h.runtime.store, alertHandler.ref(projectId, id))
  for (const r of records) t.equal(r.subject, `${h.config.namespace}.evt.${projectId}.alert.${id}`, `seq ${r.seq} is on the alert's subject`)
  return records.flatMap((r) => r.message.events.map((e) => e.type))
}

const fullBody = (email: string) => ({
  name: 'Deep backlog',
  kind: 'queue_depth',
  queue: 'crud-q',
  threshold: 25,
  window_minutes: 30,
  email: [email],
  webhook: true,
  enabled: true,
})

t.test('create, list, get, update, delete; activity rows', async (t) => {
  const address = await memberAddress()
  t.strictSame((await p.request('GET', '/jobsvc/v1/alerts')).body, { data: [] }, 'no alerts at first')

  const res = await p.request('POST', '/jobsvc/v1/alerts', fullBody(address))
  t.equal(res.status, 201)
  const alert = res.body
  t.match(alert.id, /^alr_[0-9a-z]{26}$/, 'id is alr_ and a lowercase ULID')
  t.equal(res.headers.get('location'), `/jobsvc/v1/alerts/${alert.id}`)
  t.strictSame(alert, {
    id: alert.id,
    ...fullBody(address),
    status: 'ok',
    last_value: null,
    last_triggered_at: null,
    last_resolved_at: null,
    created_at: alert.created_at,
    updated_at: alert.created_at,
  })
  t.match(alert.created_at, iso)

  const minimal = await newAlert({ name: 'dl', kind: 'dead_letter_count', threshold: 0 })
  t.match(
    minimal,
    { name: 'dl', kind: 'dead_letter_count', threshold: 0, queue: null, window_minutes: 60, email: [], webhook: false, enabled: true, status: 'ok' },
    'defaults',
  )
  t.strictSame(minimal.email, [], 'email defaults to []')

  t.strictSame((await p.request('GET', '/jobsvc/v1/alerts')).body, { data: [alert, minimal] }, 'the list shows both, oldest first')
  t.strictSame(await getAlert(alert.id), alert, 'get answers the created alert')

  const changed = {
    ...fullBody(address),
    name: 'Deeper backlog',
    threshold: 50,
    queue: null,
    email: [address, await memberAddress()],
    webhook: false,
    enabled: false,
  }
  const put = await p.request('PUT', `/jobsvc/v1/alerts/${alert.id}`, changed)
  t.equal(put.status, 200)
  t.match(put.body, { ...changed, id: alert.id, status: 'ok', created_at: alert.created_at })
  t.strictSame(put.body.email, changed.email)
  t.ok(Date.parse(put.body.updated_at) >= Date.parse(alert.updated_at), 'updated_at moves on')
  t.strictSame(await getAlert(alert.id), put.body, 'get shows the change')
  t.strictSame((await p.request('GET', '/jobsvc/v1/alerts')).body.data[0], put.body, 'the list shows the change')

  const same = await p.request('PUT', `/jobsvc/v1/alerts/${alert.id}`, changed)
  t.equal(same.status, 200, 'the same settings again: 200')
  t.strictSame(same.body, put.body, 'and nothing changes, updated_at included')

  const partial = await p.request('PUT', `/jobsvc/v1/alerts/${minimal.id}`, {
    name: 'dl',
    kind: 'dead_letter_count',
    threshold: 0,
    window_minutes: 5,
    email: [address],
  })
  t.equal(partial.status, 200)
  const partialBack = await p.request('PUT', `/jobsvc/v1/alerts/${minimal.id}`, { name: 'dl', kind: 'dead_letter_count', threshold: 0 })
  t.match(
    partialBack.body,
    { window_minutes: 60, queue: null, webhook: false, enabled: true },
    'PUT replaces every setting: omitted ones return to their defaults',
  )
  t.strictSame(partialBack.body.email, [])

  const del = await p.request('DELETE', `/jobsvc/v1/alerts/${alert.id}`)
  t.equal(del.status, 204)
  t.equal(del.body, null, 'no body')
  isError(t, await p.request('GET', `/jobsvc/v1/alerts/${alert.id}`), 404, 'alert_not_found', 'get after delete')
  isError(t, await p.request('PUT', `/jobsvc/v1/alerts/${alert.id}`, changed), 404, 'alert_not_found', 'put after delete')
  isError(t, await p.request('DELETE', `/jobsvc/v1/alerts/${alert.id}`), 404, 'alert_not_found', 'delete after delete')
  t.same(
    (await p.request('GET', '/jobsvc/v1/alerts')).body.data.map((a: any) => a.id),
    [minimal.id],
    'a deleted alert leaves the list',
  )
  t.equal((await p.request('DELETE', `/jobsvc/v1/alerts/${minimal.id}`)).status, 204)

  const rows = await eventually(
    async () => {
      const r = await sql<{ kind: string; project_id: string; target_type: string; target_id: string }[]>`
        SELECT kind, project_id, target_type, target_id FROM activity WHERE target_id = ${alert.id} ORDER BY seq, id`
      return r.some((x) => x.kind === 'alert_deleted') && r
    },
    15_000,
    'alert_deleted in the activity feed',
  )
  // The projector applies the log in order, so with alert_deleted present every earlier row is too:
  // the no-op PUT wrote none.
  t.strictSame(
    rows.map((r) => ({ ...r })),
    ['alert_created', 'alert_updated', 'alert_deleted'].map((kind) => ({ kind, project_id: p.projectId, target_type: 'alert', target_id: alert.id })),
    'alert_created, one alert_updated, alert_deleted, each with the project',
  )
  t.strictSame(await logOf(t, alert.id), ['alert_created', 'alert_updated', 'alert_deleted'], 'the log holds the same three events')
})

t.test('unknown and malformed ids are 404 alert_not_found', async (t) => {
  const body = { name: 'x', kind: 'queue_depth', threshold: 1 }
  const ids = [
    unknownId,
    'nope',
    'alr_',
    `ALR_01J${'A'.repeat(23)}`,
    `alr_01J${'A'.repeat(23)}`,
    `alr_${'a'.repeat(27)}`,
    `job_01j${'a'.repeat(23)}`,
    'a'.repeat(100),
  ]
  for (const id of ids) {
    isError(t, await p.request('GET', `/jobsvc/v1/alerts/${id}`), 404, 'alert_not_found', `GET ${id}`)
    isError(t, await p.request('PUT', `/jobsvc/v1/alerts/${id}`, body), 404, 'alert_not_found', `PUT ${id}`)
    isError(t, await p.request('DELETE', `/jobsvc/v1/alerts/${id}`), 404, 'alert_not_found', `DELETE ${id}`)
  }
})

t.test('an id over 100 characters is 404 alert_not_found in the error envelope too', async (t) => {
  // Malformed ids are 404 alert_not_found, and every error uses the envelope (spec, "Errors").
  // Today Fastify's maxParamLength (100) answers first: 414 with its own body, no request_id.
  const body = { name: 'x', kind: 'queue_depth', threshold: 1 }
  for (const id of ['a'.repeat(101), `alr_${'a'.repeat(146)}`]) {
    for (const [method, payload] of [['GET'], ['PUT', body], ['DELETE']] as const) {
      const res = await p.request(method, `/jobsvc/v1/alerts/${id}`, payload)
      t.equal(res.status, 404, `${method} with a ${id.length}-character id: status`)
      t.match(res.body, { error: { code: 'alert_not_found', request_id: /^[0-9A-Z]{26}$/ } }, `${method} with a ${id.length}-character id: envelope`)
    }
  }
})

t.test("another project's alert is 404 alert_not_found and not listed", async (t) => {
  const other = await h.newProject()
  const mine = await newAlert({ name: 'mine', kind: 'queue_depth', queue: 'iso-q', threshold: 3 })
  const theirs = await newAlert({ name: 'theirs', kind: 'queue_depth', queue: 'iso-q', threshold: 3 }, other.apiKey)
  const as = (key: string, method: string, path: string, body?: unknown) => httpRequest(h.url, key, method, path, body)
  isError(t, await as(other.apiKey, 'GET', `/jobsvc/v1/alerts/${mine.id}`), 404, 'alert_not_found', 'get')
  isError(
    t,
    await as(other.apiKey, 'PUT', `/jobsvc/v1/alerts/${mine.id}`, { name: 'hijack', kind: 'queue_depth', threshold: 0 }),
    404,
    'alert_not_found',
    'put',
  )
  isError(t, await as(other.apiKey, 'DELETE', `/jobsvc/v1/alerts/${mine.id}`), 404, 'alert_not_found', 'delete')
  isError(t, await p.request('GET', `/jobsvc/v1/alerts/${theirs.id}`), 404, 'alert_not_found', 'and the other way round')
  t.same(
    (await as(other.apiKey, 'GET', '/jobsvc/v1/alerts')).body.data.map((a: any) => a.id),
    [theirs.id],
    'their list has only theirs',
  )
  t.notOk(
    (await p.request('GET', '/jobsvc/v1/alerts')).body.data.some((a: any) => a.id === theirs.id),
    'my list does not show theirs',
  )
  t.strictSame(await getAlert(mine.id), mine, 'my alert is untouched')
  t.equal((await p.request('DELETE', `/jobsvc/v1/alerts/${mine.id}`)).status, 204)
  t.equal((await as(other.apiKey, 'DELETE', `/jobsvc/v1/alerts/${theirs.id}`)).status, 204)
})

t.test('invalid bodies are 400 invalid_request on POST and PUT, and change nothing', async (t) => {
  const valid = { name: 'valid', kind: 'queue_depth', queue: 'bad-q', threshold: 5, window_minutes: 60, email: [owner.email] }
  const existing = await newAlert(valid)
  const { name: _n, ...noName } = valid
  const { kind: _k, ...noKind } = valid
  const { threshold: _th, ...noThreshold } = valid
  const cases: [string, unknown][] = [
    ['unknown kind', { ...valid, kind: 'cpu_usage' }],
    ['negative threshold', { ...valid, threshold: -1 }],
    ['fractional threshold', { ...valid, threshold: 1.5 }],
    ['threshold above 1e9', { ...valid, threshold: 1_000_000_001 }],
    ['threshold as a string', { ...valid, threshold: '5' }],
    ['window 0', { ...valid, window_minutes: 0 }],
    ['window 1441', { ...valid, window_minutes: 1441 }],
    ['11 e-mails', { ...valid, email: Array.from({ length: 11 }, (_, i) => `ops${i}@example.com`) }],
    ['malformed e-mail', { ...valid, email: ['ops@example.com', 'not-an-address'] }],
    ['e-mail as a string', { ...valid, email: 'ops@example.com' }],
    ['name too long', { ...valid, name: 'n'.repeat(101) }],
    ['empty name', { ...valid, name: '' }],
    ['empty queue', { ...valid, queue: '' }],
    ['enabled not a boolean', { ...valid, enabled: 'yes' }],
    ['missing name', noName],
    ['missing kind', noKind],
    ['missing threshold', noThreshold],
    ['an array', [valid]],
  ]
  for (const [what, body] of cases) {
    isError(t, await p.request('POST', '/jobsvc/v1/alerts', body), 400, 'invalid_request', `POST: ${what}`)
    isError(t, await p.request('PUT', `/jobsvc/v1/alerts/${existing.id}`, body), 400, 'invalid_request', `PUT: ${what}`)
  }
  isError(t, await p.request('POST', '/jobsvc/v1/alerts'), 400, 'invalid_request', 'POST without a body')
  t.same(
    (await p.request('GET', '/jobsvc/v1/alerts')).body.data.filter((a: any) => a.queue === 'bad-q').map((a: any) => a.id),
    [existing.id],
    'no alert was created',
  )
  t.strictSame(await getAlert(existing.id), existing, 'and the existing one is unchanged')

  const ten = [owner.email]
  while (ten.length < 10) ten.push(await memberAddress())
  const edges = await newAlert({ ...valid, name: 'n'.repeat(100), threshold: 1_000_000_000, window_minutes: 1440, email: ten })
  t.match(edges, { threshold: 1_000_000_000, window_minutes: 1440 }, 'the upper bounds are accepted')
  t.equal(edges.email.length, 10)
  t.match(await newAlert({ ...valid, threshold: 0, window_minutes: 1 }), { threshold: 0, window_minutes: 1 }, 'the lower bounds are accepted')
})

t.test('queue_depth: triggers once, holds without re-triggering, resolves once', async (t) => {
  const address = await memberAddress()
  const alert = await newAlert({ name: 'depth q1', kind: 'queue_depth', queue: 'q1', threshold: 2, email: [address] })
  const other = await h.newProject()
  const jobs = [await create({ queue: 'q1' }), await create({ queue: 'q1' })]
  for (let i = 0; i < 3; i++) await create({ queue: 'q1-other' })
  for (let i = 0; i < 3; i++) {
    const res = await httpRequest(h.url, other.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'alerting', queue: 'q1', payload: {} })
    t.equal(res.status, 201, 'a job of another project in q1')
  }
  await pendingIs('q1', 2)
  await pendingIs('q1-other', 3)
  await pendingIs('q1', 3, other.projectId)

  await evaluateAlerts(h.runtime)
  t.match(
    await getAlert(alert.id),
    { status: 'ok', last_triggered_at: null },
    'two pending (= threshold) is not above it; other queues and projects do not count',
  )
  t.equal(mailsTo(address).length, 0, 'no mail')

  jobs.push(await create({ queue: 'q1' }))
  await pendingIs('q1', 3)
  await evaluateAlerts(h.runtime)
  const firing = await getAlert(alert.id)
  t.match(firing, { status: 'firing', last_value: 3, last_resolved_at: null })
  t.match(firing.last_triggered_at, iso)
  const alertMail = await h.smtp.next(address, /^\[alert\] "depth q1"/)
  t.match(alertMail.text, /\b3\b/, 'the mail says the value')
  t.equal(mailsTo(address).length, 1, 'one mail')

  await evaluateAlerts(h.runtime)
  t.strictSame(await getAlert(alert.id), firing, 'the condition still holds: still firing, nothing changed')
  await mailSettled()
  t.equal(mailsTo(address).length, 1, 'no second mail')

  const claimed = await claim('q1', 2, 'wrk_depth')
  for (const job of claimed) t.strictSame((await ack({ job_id: job.id, worker_id: 'wrk_depth', status: 'succeeded' })).body, { action: 'done' })
  await pendingIs('q1', 1)
  await evaluateAlerts(h.runtime)
  const resolved = await getAlert(alert.id)
  t.match(resolved, { status: 'ok', last_value: 1, last_triggered_at: firing.last_triggered_at })
  t.ok(Date.parse(resolved.last_resolved_at) >= Date.parse(firing.last_triggered_at), 'last_resolved_at is set after the trigger')
  await h.smtp.next(address, /^\[resolved\] "depth q1"/)
  t.equal(mailsTo(address).length, 2, 'one resolution mail')

  await evaluateAlerts(h.runtime)
  t.strictSame(await getAlert(alert.id), resolved, 'evaluating again changes nothing')
  await mailSettled()
  t.equal(mailsTo(address).length, 2, 'and mails nobody')
  t.strictSame(await logOf(t, alert.id), ['alert_created', 'alert_triggered', 'alert_resolved'], 'the log: created, triggered, resolved')
})

t.test('dead_letter_count: a dead letter fires it; it resolves once it leaves the window', async (t) => {
  const address = await memberAddress()
  const alert = await newAlert({ name: 'dead q2', kind: 'dead_letter_count', queue: 'q2', threshold: 0, window_minutes: 10, email: [address] })
  const job = await create({ queue: 'q2', max_attempts: 1 })
  const [claimed] = await claim('q2', 1, 'wrk_dead')
  t.equal(claimed.id, job.id)
  t.strictSame((await ack({ job_id: job.id, worker_id: 'wrk_dead', status: 'failed', error: { type: 'Boom', message: 'boom' } })).body, {
    action: 'done',
  })
  await jobStateIs(job.id, 'dead_letter')

  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'firing', last_value: 1 })
  await h.smtp.next(address, /^\[alert\] "dead q2"/)

  await withClockAhead(9 * 60_000, () => evaluateAlerts(h.runtime))
  t.match(await getAlert(alert.id), { status: 'firing' }, 'nine minutes later it is still in the window')
  t.equal(mailsTo(address).length, 1, 'no second mail')

  await withClockAhead(11 * 60_000, () => evaluateAlerts(h.runtime))
  const resolved = await getAlert(alert.id)
  t.match(resolved, { status: 'ok', last_value: 0 }, 'eleven minutes later the dead letter left the 10 min window')
  t.match(resolved.last_resolved_at, iso)
  await h.smtp.next(address, /^\[resolved\] "dead q2"/)
  t.equal(mailsTo(address).length, 2)
  t.strictSame(await logOf(t, alert.id), ['alert_created', 'alert_triggered', 'alert_resolved'])
})

t.test('oldest_pending_age: fires when the oldest pending job waited too long, resolves when it is claimed', async (t) => {
  const address = await memberAddress()
  const alert = await newAlert({ name: 'age q3', kind: 'oldest_pending_age', queue: 'q3', threshold: 60, email: [address] })
  const job = await create({ queue: 'q3' })
  await pendingIs('q3', 1)

  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'ok' }, 'a fresh job is not old')
  t.equal(mailsTo(address).length, 0)

  await withClockAhead(2 * 60_000, async () => {
    await evaluateAlerts(h.runtime)
    const firing = await getAlert(alert.id)
    t.equal(firing.status, 'firing', 'two minutes later it fires')
    t.ok(firing.last_value >= 120, `last_value ${firing.last_value} is at least 120 s`)
    await h.smtp.next(address, /^\[alert\] "age q3"/)

    const [claimed] = await claim('q3', 1, 'wrk_age')
    t.equal(claimed.id, job.id)
    await pendingIs('q3', 0)
    await evaluateAlerts(h.runtime)
  })
  t.match(await getAlert(alert.id), { status: 'ok', last_value: 0 }, 'nothing pending: resolved')
  await h.smtp.next(address, /^\[resolved\] "age q3"/)
  t.equal(mailsTo(address).length, 2)
  t.strictSame(await logOf(t, alert.id), ['alert_created', 'alert_triggered', 'alert_resolved'])
})

t.test('disabling a firing alert resolves it at the next evaluation; a deleted alert says nothing', async (t) => {
  const address = await memberAddress()
  const body = { name: 'disable q4', kind: 'queue_depth', queue: 'q4', threshold: 0, email: [address] }
  const alert = await newAlert(body)
  await create({ queue: 'q4' })
  await pendingIs('q4', 1)
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'firing', last_value: 1 })
  await h.smtp.next(address, /^\[alert\] "disable q4"/)

  const put = await p.request('PUT', `/jobsvc/v1/alerts/${alert.id}`, { ...body, enabled: false })
  t.equal(put.status, 200)
  t.match(put.body, { enabled: false, status: 'firing' }, 'disabling does not resolve by itself')
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { enabled: false, status: 'ok' }, 'the next evaluation resolves it, though the condition holds')
  await h.smtp.next(address, /^\[resolved\] "disable q4"/)
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'ok' }, 'disabled: no trigger while the condition holds')
  t.equal(mailsTo(address).length, 2)

  t.equal((await p.request('PUT', `/jobsvc/v1/alerts/${alert.id}`, body)).status, 200, 'enabled again')
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'firing' }, 'fires again')
  await h.smtp.next(address, /^\[alert\] "disable q4"/)

  t.equal((await p.request('DELETE', `/jobsvc/v1/alerts/${alert.id}`)).status, 204)
  await evaluateAlerts(h.runtime)
  t.equal(mailsTo(address).length, 3, 'deleting a firing alert sends no resolution')
  t.strictSame(
    await logOf(t, alert.id),
    ['alert_created', 'alert_triggered', 'alert_updated', 'alert_resolved', 'alert_updated', 'alert_triggered', 'alert_deleted'],
    'the log in order',
  )
})

t.test('an alert without addresses triggers and resolves without sending mail', async (t) => {
  const alert = await newAlert({ name: 'silent q5', kind: 'queue_depth', queue: 'q5', threshold: 0, email: [] })
  const job = await create({ queue: 'q5' })
  await pendingIs('q5', 1)
  const before = h.smtp.mails.length
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'firing', last_value: 1 })
  t.equal((await p.request('POST', `/jobsvc/v1/jobs/${job.id}/cancel`)).status, 200, 'the job is cancelled')
  await pendingIs('q5', 0)
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'ok', last_value: 0 })
  await mailSettled()
  t.equal(h.smtp.mails.length, before, 'no mail was sent')
  t.strictSame(await logOf(t, alert.id), ['alert_created', 'alert_triggered', 'alert_resolved'], 'yet both are on the log')
})

/** Makes the alert on `queue` (threshold 0) fire: one pending job, then an evaluation. */
async function fire(t: Test, queue: string, address: string): Promise<any> {
  const alert = await newAlert({ name: `mail ${queue}`, kind: 'queue_depth', queue, threshold: 0, email: [address] })
  await create({ queue })
  await pendingIs(queue, 1)
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'firing' })
  return alert
}

t.test('an alert e-mail the SMTP server refuses is sent again after each wait, and once only', async (t) => {
  const address = await memberAddress()
  h.smtp.refuse(address, mailRetryDelaysMs.length)
  await fire(t, 'qm1', address)
  const mail = await h.smtp.next(address, /^\[alert\] "mail qm1"/)
  t.match(mail.text, /is firing/)
  t.equal(h.smtp.refusedCount(address), mailRetryDelaysMs.length, 'refused at every attempt but the last')
  await mailSettled()
  t.equal(mailsTo(address).length, 1, 'sent once')
})

t.test('an alert e-mail refused past its last wait is given up, not tried forever', async (t) => {
  const address = await memberAddress()
  h.smtp.refuse(address, 100)
  await fire(t, 'qm2', address)
  await mailSettled()
  t.equal(h.smtp.refusedCount(address), mailRetryDelaysMs.length + 1, 'one attempt, then one after each wait')
  await new Promise((r) => setTimeout(r, 1_000))
  t.equal(h.smtp.refusedCount(address), mailRetryDelaysMs.length + 1, 'and no more')
  t.equal(mailsTo(address).length, 0)
})

t.test('an alert that fires while no dispatcher runs is mailed once one starts: the e-mail follows the log', async (t) => {
  const address = await memberAddress()
  await h.stopRole('dispatcher')
  try {
    await fire(t, 'qm3', address)
    await new Promise((r) => setTimeout(r, 300))
    t.equal(mailsTo(address).length, 0, 'nothing is sent while no dispatcher runs')
  } finally {
    await h.startRole('dispatcher')
  }
  await h.smtp.next(address, /^\[alert\] "mail qm3"/)
  await mailSettled()
  t.equal(mailsTo(address).length, 1, 'sent once')
})

t.test("alert e-mails go only to the current addresses of the project's members: anything else is 400 naming it", async (t) => {
  const member = await memberAddress()
  const stranger = freshEmail('stranger')
  const otherOwner = await newVerifiedUser(h)
  const invited = freshEmail('invited')
  const invite = await h.platform('POST', `/platform/v1/projects/${owner.projectId}/members`, { email: invited, role: 'member' }, { jwt: owner.jwt })
  t.equal(invite.status, 201, 'an invitation that is not accepted yet')
  const body = (email: string[]) => ({ name: 'recipients', kind: 'queue_depth', queue: 'rcpt-q', threshold: 1, email })
  const existing = await newAlert(body([member]))
  t.strictSame(existing.email, [member], "a member's address is accepted")

  const refusals: [string, string[], string][] = [
    ['an address of nobody here', [member, stranger], stranger],
    ["a member of another project (that project's owner)", [otherOwner.email], otherOwner.email],
    ['an invited address that has not joined', [invited], invited],
  ]
  for (const [what, email, named] of refusals) {
    for (const [method, path] of [
      ['POST', '/jobsvc/v1/alerts'],
      ['PUT', `/jobsvc/v1/alerts/${existing.id}`],
    ] as const) {
      const res = await p.request(method, path, body(email))
      isError(t, res, 400, 'invalid_request', `${method}: ${what}`)
      t.match(
        res.body.error.message,
        new RegExp(`^body\\.email\\[${email.indexOf(named)}\\]: ${named.replace(/[.+]/g, '\\$&')} is not the address of a member`),
        `${method}: the message names ${what}`,
      )
    }
  }
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/alerts', body([member])),
    400,
    'invalid_request',
    "another project's key cannot mail this project's member",
  )
  t.same(
    (await p.request('GET', '/jobsvc/v1/alerts')).body.data.filter((a: any) => a.queue === 'rcpt-q').map((a: any) => a.email),
    [[member]],
    'nothing was created or changed',
  )
  t.match(await newAlert(body([])), { email: [] }, 'no address at all is fine')
})

t.test('a member removed after the alert was written gets no e-mail; the others still do', async (t) => {
  const staying = await memberAddress()
  const leaving = await joinProject(h, owner, owner.projectId, 'member')
  const alert = await newAlert({ name: 'removed q6', kind: 'queue_depth', queue: 'q6', threshold: 0, email: [staying, leaving.email] })
  const removed = await h.platform('DELETE', `/platform/v1/projects/${owner.projectId}/members/${leaving.userId}`, undefined, { jwt: owner.jwt })
  t.equal(removed.status, 204, 'the member is removed from the project')
  await create({ queue: 'q6' })
  await pendingIs('q6', 1)
  await evaluateAlerts(h.runtime)
  t.match(await getAlert(alert.id), { status: 'firing' })
  await h.smtp.next(staying, /^\[alert\] /)
  await mailSettled()
  t.equal(mailsTo(staying).length, 1, 'the remaining member is mailed')
  t.equal(mailsTo(leaving.email).length, 0, 'the removed member is not: the address is checked again when the mail is sent')
})

t.test('a member who turned alert e-mails off gets none; the others still do', async (t) => {
  const mailed = await memberAddress()
  const quiet = await joinProject(h, owner, owner.projectId, 'member')
  const queue = 'q-alerts-off'
  await newAlert({ name: 'opted out', kind: 'queue_depth', queue, threshold: 0, email: [mailed, quiet.email] })
  // Turned off after the alert listed the address: the preference is read when each e-mail is sent.
  const off = await h.platform('PATCH', '/platform/v1/account/notifications', { alert_emails: false }, { jwt: quiet.jwt })
  t.equal(off.status, 200, JSON.stringify(off.body))
  await create({ queue })
  await pendingIs(queue, 1)
  await evaluateAlerts(h.runtime)
  const sent = await h.smtp.next(mailed, /^\[alert\] /)
  t.match(sent.text, 'opted out')
  await mailSettled()
  t.same([mailsTo(mailed).length, mailsTo(quiet.email).length], [1, 0], 'the other member is mailed, the one who turned alert e-mails off is not')
})

t.test('the alert name cannot add headers or pass for the service’s own words in the subject', async (t) => {
  const address = await memberAddress()
  const victim = freshEmail('bcc-victim')
  const name = `Disk full\r\nBcc: ${victim}\r\nX-Spoof: "yes" \u202Eevil\u202C ${'z'.repeat(20)}`
  const alert = await newAlert({ name, kind: 'queue_depth', queue: 'q7', threshold: 0, email: [address] })
  t.equal(alert.name, name, 'the name is stored as written')
  await create({ queue: 'q7' })
  await pendingIs('q7', 1)
  await evaluateAlerts(h.runtime)
  const mail = await h.smtp.next(address, /^\[alert\] /)
  const flat = `Disk full Bcc: ${victim} X-Spoof: 'yes' evil ${'z'.repeat(20)}`
  t.equal(mail.subject, `[alert] "${[...flat].slice(0, 59).join('')}…" in project "My first project"`, 'one line, quoted, cut at 60 characters')
  t.match(mail.text, `The alert "${flat}" of project ${owner.projectId} is firing`, 'the body quotes the whole name on one line')
  await mailSettled()
  t.equal(h.smtp.mails.filter((m) => m.to.includes(victim)).length, 0, 'nobody else is mailed')
})

t.test('a project has at most max_alerts_per_project alerts: one more is 400, a deletion makes room', async (t) => {
  const max = h.config.tunables.max_alerts_per_project
  const other = await h.newProject()
  const as = (method: string, path: string, body?: unknown) => httpRequest(h.url, other.apiKey, method, path, body)
  const body = (i: number) => ({ name: `cap ${i}`, kind: 'queue_depth', queue: 'cap-q', threshold: 1_000 })
  for (let i = 0; i < max - 5; i++) await newAlert(body(i), other.apiKey)
  const racing = await Promise.all(Array.from({ length: 10 }, (_, i) => as('POST', '/jobsvc/v1/alerts', body(max + i))))
  t.same(
    racing.map((r) => r.status).sort(),
    [...Array.from({ length: 5 }, () => 201), ...Array.from({ length: 5 }, () => 400)],
    'ten creations at once with room for five: five are created',
  )
  for (const r of racing.filter((x) => x.status === 400)) isError(t, r, 400, 'invalid_request')
  t.match(racing.find((r) => r.status === 400)!.body.error.message, new RegExp(`has ${max} alerts`))
  const listed = (await as('GET', '/jobsvc/v1/alerts')).body.data
  t.equal(listed.length, max, `the project has ${max} alerts`)
  isError(t, await as('POST', '/jobsvc/v1/alerts', body(0)), 400, 'invalid_request', 'one more is refused')
  t.equal((await newAlert(body(0))).name, 'cap 0', "another project's alerts are not counted")
  t.equal((await as('DELETE', `/jobsvc/v1/alerts/${listed[0].id}`)).status, 204)
  t.equal((await as('POST', '/jobsvc/v1/alerts', body(0))).status, 201, 'a deleted alert makes room for one')
  isError(t, await as('POST', '/jobsvc/v1/alerts', body(0)), 400, 'invalid_request', 'and only one')
})
