import t from 'tap'
import { httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

const h = await startHarness(t, import.meta.filename)

const ulid = /^[0-9A-HJKMNP-TV-Z]{26}$/
const jobIdShape = /^job_[0-9A-HJKMNP-TV-Z]{26}$/
const missingJob = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'

/** Every response this file receives, so one test can check the X-Request-Id rule on all of them. */
const responses: HttpResponse[] = []

async function as(apiKey: string, method: string, path: string, body?: unknown): Promise<HttpResponse> {
  const res = await httpRequest(h.url, apiKey, method, path, body)
  responses.push(res)
  return res
}

const call = (method: string, path: string, body?: unknown) => as(h.apiKey, method, path, body)

async function create(body: Record<string, unknown>, apiKey = h.apiKey): Promise<any> {
  const res = await as(apiKey, 'POST', '/jobsvc/v1/jobs', { payload: {}, ...body })
  if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}

async function claimOne(queue: string, workerId: string): Promise<any> {
  const res = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: workerId, queues: [queue], wait_seconds: 5 })
  if (res.body?.jobs?.length !== 1) throw new Error(`poll on ${queue} answered ${JSON.stringify(res.body)}`)
  return res.body.jobs[0]
}

const getJob = async (id: string) => (await call('GET', `/jobsvc/v1/jobs/${id}`)).body

/** A job of its own queue taken to dead_letter through a claim and a failed ack on its last attempt. */
async function deadLettered(queue: string): Promise<any> {
  const job = await create({ job_type: 'dl', queue, max_attempts: 1 })
  await claimOne(queue, 'wrk_dl')
  const ack = await call('POST', '/jobsvc/v1/workers/ack', {
    job_id: job.id,
    worker_id: 'wrk_dl',
    status: 'failed',
    error: { type: 'Boom', message: 'it broke', stack_trace: 'at x' },
  })
  if (ack.body?.action !== 'done') throw new Error(`ack answered ${JSON.stringify(ack.body)}`)
  return job
}

function isErrorEnvelope(t: Tap, res: HttpResponse, status: number, code: string): void {
  t.equal(res.status, status, `status ${status}`)
  t.equal(res.body?.error?.code, code, `code ${code}`)
  t.type(res.body?.error?.message, 'string')
  t.equal(res.body?.error?.request_id, res.headers.get('x-request-id'), 'request_id in the body is the header')
}

function byNewest(a: { created_at: string; id: string }, b: { created_at: string; id: string }): number {
  if (a.created_at !== b.created_at) return a.created_at < b.created_at ? 1 : -1
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0
}

t.test('POST /jobs answers 201 with the creation shape, defaults and a Location', async (t) => {
  const before = Date.now()
  const res = await call('POST', '/jobsvc/v1/jobs', { job_type: 'email.send', payload: { to: 'a@b.c' } })
  t.equal(res.status, 201)
  t.strictSame(Object.keys(res.body).sort(), ['attempt', 'created_at', 'id', 'job_type', 'max_attempts', 'queue', 'run_at', 'state'])
  t.match(res.body.id, jobIdShape, 'id is job_ and a 26-character ULID')
  t.equal(res.body.state, 'pending')
  t.equal(res.body.job_type, 'email.send')
  t.equal(res.body.queue, 'default', 'queue defaults to default')
  t.equal(res.body.run_at, null, 'run_at is null for immediate jobs')
  t.equal(res.body.attempt, 0)
  t.equal(res.body.max_attempts, 3, 'max_attempts defaults to 3')
  t.equal(new Date(res.body.created_at).toISOString(), res.body.created_at, 'created_at is an ISO instant in UTC')
  t.ok(Date.parse(res.body.created_at) >= before - 1000, 'created_at is now')
  t.equal(res.headers.get('location'), `/jobsvc/v1/jobs/${res.body.id}`)

  const custom = await create({ job_type: 'x', queue: 'critical', max_attempts: 7, timeout_seconds: 60, tags: { team: 'a' } })
  t.equal(custom.queue, 'critical')
  t.equal(custom.max_attempts, 7)
})

t.test('POST /jobs with a future run_at is scheduled and echoes run_at', async (t) => {
  const runAt = new Date(Date.now() + 3_600_000).toISOString()
  const job = await create({ job_type: 'later', run_at: runAt })
  t.equal(job.state, 'scheduled')
  t.equal(job.run_at, runAt)
  const offset = await create({ job_type: 'later', run_at: runAt.replace('Z', '+00:00') })
  t.equal(offset.run_at, runAt, 'an offset form is echoed as the same instant in UTC')
})

t.test('POST /jobs refuses bodies outside the field bounds with 400 invalid_request', async (t) => {
  const cases: Array<[string, unknown]> = [
    ['no job_type', { payload: {} }],
    ['empty job_type', { job_type: '', payload: {} }],
    ['job_type over 500', { job_type: 'x'.repeat(501), payload: {} }],
    ['no payload', { job_type: 'x' }],
    ['null payload', { job_type: 'x', payload: null }],
    ['queue over 100', { job_type: 'x', payload: {}, queue: 'q'.repeat(101) }],
    ['max_attempts 0', { job_type: 'x', payload: {}, max_attempts: 0 }],
    ['max_attempts 101', { job_type: 'x', payload: {}, max_attempts: 101 }],
    ['timeout_seconds 0', { job_type: 'x', payload: {}, timeout_seconds: 0 }],
    ['timeout_seconds 86401', { job_type: 'x', payload: {}, timeout_seconds: 86_401 }],
    ['non-string tag value', { job_type: 'x', payload: {}, tags: { a: 1 } }],
    ['parent_job_id over 36', { job_type: 'x', payload: {}, parent_job_id: 'p'.repeat(37) }],
  ]
  for (const [name, body] of cases) {
    const res = await call('POST', '/jobsvc/v1/jobs', body)
    t.equal(res.status, 400, name)
    t.equal(res.body?.error?.code, 'invalid_request', name)
  }
  const bounds = await create({ job_type: 'x'.repeat(500), queue: 'q'.repeat(100), max_attempts: 100, timeout_seconds: 86_400 })
  t.equal(bounds.max_attempts, 100, 'the upper bounds themselves are accepted')
})

t.test('GET /jobs/{id} returns the full detail object right after the 201', async (t) => {
  const created = await create({
    job_type: 'report',
    queue: 'reports',
    payload: { n: 1, nested: { a: [1, 2] } },
    tags: { env: 'test' },
    timeout_seconds: 90,
  })
  const res = await call('GET', `/jobsvc/v1/jobs/${created.id}`)
  t.equal(res.status, 200)
  t.match(res.body, {
    id: created.id,
    state: 'pending',
    job_type: 'report',
    queue: 'reports',
    payload: { n: 1, nested: { a: [1, 2] } },
    created_at: created.created_at,
    started_at: null,
    completed_at: null,
    attempt: 0,
    max_attempts: 3,
    progress: null,
    duration_ms: null,
    error: null,
    tags: { env: 'test' },
  })
  for (const field of [
    'id',
    'state',
    'job_type',
    'queue',
    'payload',
    'created_at',
    'started_at',
    'completed_at',
    'attempt',
    'max_attempts',
    'progress',
    'duration_ms',
    'error',
    'tags',
  ]) {
    t.ok(field in res.body, `detail has ${field}`)
  }
  const untagged = await getJob((await create({ job_type: 'report' })).id)
  t.equal(untagged.tags, null, 'tags is null when none were given')
})

t.test('GET /jobs/{id} of an unknown or malformed id is 404 job_not_found', async (t) => {
  isErrorEnvelope(t, await call('GET', `/jobsvc/v1/jobs/${missingJob}`), 404, 'job_not_found')
  isErrorEnvelope(t, await call('GET', '/jobsvc/v1/jobs/not-a-job'), 404, 'job_not_found')
})

t.test('GET /jobs lists newest first, ties by id, and filters', async (t) => {
  const other = await h.newProject()
  const made: any[] = []
  for (let i = 0; i < 3; i++) made.push(await create({ job_type: 'alpha', queue: 'q1' }, other.apiKey))
  for (let i = 0; i < 2; i++) made.push(await create({ job_type: 'beta', queue: 'q2' }, other.apiKey))
  // Concurrent creations are the likeliest to share a millisecond, which exercises the tie rule.
  made.push(...(await Promise.all(Array.from({ length: 6 }, () => create({ job_type: 'gamma', queue: 'q1' }, other.apiKey)))))
  const cancelled = made[1]
  t.equal((await as(other.apiKey, 'POST', `/jobsvc/v1/jobs/${cancelled.id}/cancel`)).status, 200)

  const all = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs')
  t.equal(all.status, 200)
  t.equal(all.body.has_more, false)
  t.equal(all.body.next_cursor, null)
  const ids = all.body.data.map((j: any) => j.id)
  t.same([...ids].sort(), made.map((j) => j.id).sort(), 'the list holds exactly the project’s jobs')
  t.same(
    ids,
    [...all.body.data].sort(byNewest).map((j: any) => j.id),
    'created_at descending, ties by id descending',
  )
  const first = all.body.data[0]
  t.same(
    Object.keys(first).sort(),
    Object.keys((await as(other.apiKey, 'GET', `/jobsvc/v1/jobs/${first.id}`)).body).sort(),
    'list items have the detail shape',
  )
  t.equal(all.body.data.find((j: any) => j.id === cancelled.id).state, 'cancelled', 'the list shows the cancel at once')

  const idsOf = async (query: string) => (await as(other.apiKey, 'GET', `/jobsvc/v1/jobs?${query}`)).body.data.map((j: any) => j.id).sort()
  const expect = (pred: (j: any) => boolean) =>
    made
      .filter(pred)
      .map((j) => j.id)
      .sort()
  t.same(await idsOf('state=cancelled'), [cancelled.id], 'state filter')
  t.same(
    await idsOf('state=pending'),
    expect((j) => j.id !== cancelled.id),
    'state filter, pending',
  )
  t.same(
    await idsOf('queue=q2'),
    expect((j) => j.queue === 'q2'),
    'queue filter',
  )
  t.same(
    await idsOf('job_type=gamma'),
    expect((j) => j.job_type === 'gamma'),
    'job_type filter',
  )
  t.same(
    await idsOf('job_type=alpha&queue=q1&state=pending'),
    expect((j) => j.job_type === 'alpha' && j.id !== cancelled.id),
    'filters combine',
  )
  t.same(await idsOf('queue=nope'), [], 'a queue without jobs lists nothing')

  const pivot = made[2].created_at
  t.same(
    await idsOf(`created_after=${encodeURIComponent(pivot)}`),
    expect((j) => j.created_at > pivot),
    'created_after is exclusive',
  )
  t.same(
    await idsOf(`created_before=${encodeURIComponent(pivot)}`),
    expect((j) => j.created_at < pivot),
    'created_before is exclusive',
  )
  const lo = made[0].created_at
  const hi = made[4].created_at
  t.same(
    await idsOf(`created_after=${encodeURIComponent(lo)}&created_before=${encodeURIComponent(hi)}`),
    expect((j) => j.created_at > lo && j.created_at < hi),
    'a window between two instants',
  )
  const bad = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs?state=running')
  t.equal(bad.status, 400, 'an unknown state is refused')
})

t.test('GET /jobs pages with limit and cursor, stable under concurrent creates', async (t) => {
  const other = await h.newProject()
  const made: any[] = []
  for (let i = 0; i < 7; i++) made.push(await create({ job_type: 'page' }, other.apiKey))
  const expected = (await as(other.apiKey, 'GET', '/jobsvc/v1/jobs?limit=100')).body.data.map((j: any) => j.id)
  t.equal(expected.length, 7)

  const seen: string[] = []
  let cursor: string | null = null
  let pages = 0
  for (;;) {
    const query: string = cursor === null ? 'limit=3' : `limit=3&cursor=${encodeURIComponent(cursor)}`
    const page: HttpResponse = await as(other.apiKey, 'GET', `/jobsvc/v1/jobs?${query}`)
    t.equal(page.status, 200)
    pages++
    t.ok(page.body.data.length <= 3, 'a page holds at most limit items')
    seen.push(...page.body.data.map((j: any) => j.id))
    t.equal(page.body.next_cursor === null, page.body.has_more === false, 'next_cursor is null exactly when has_more is false')
    if (!page.body.has_more) break
    t.type(page.body.next_cursor, 'string')
    cursor = page.body.next_cursor
    // Newer jobs written between pages sort before the cursor: they must not shift the rest.
    made.push(await create({ job_type: 'page' }, other.apiKey))
    await as(other.apiKey, 'POST', `/jobsvc/v1/jobs/${seen[seen.length - 1]}/cancel`)
  }
  t.equal(pages, 3)
  t.same(seen, expected, 'every job once, in order: no skips, no repeats')

  const exact = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs?limit=100&job_type=page&state=pending')
  t.equal(exact.body.has_more, false)
  const one = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs?limit=1')
  t.equal(one.body.data.length, 1, 'limit 1 is accepted')
  t.equal(one.body.has_more, true)
  const def = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs')
  t.equal(def.body.data.length, made.length, `limit defaults to 50 (all ${made.length} fit)`)
  for (let i = 0; i < 3; i++) made.push(...(await Promise.all(Array.from({ length: 15 }, () => create({ job_type: 'page' }, other.apiKey)))))
  const capped = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs')
  t.equal(capped.body.data.length, 50, 'the default page is 50')
  t.equal(capped.body.has_more, true)
})

t.test('GET /jobs refuses a limit outside 1..100 and a cursor it did not issue', async (t) => {
  for (const limit of ['0', '101', '-1', 'abc', '1.5']) {
    isErrorEnvelope(t, await call('GET', `/jobsvc/v1/jobs?limit=${limit}`), 400, 'invalid_limit')
  }
  t.equal((await call('GET', '/jobsvc/v1/jobs?limit=100')).status, 200, 'limit 100 is accepted')
  const forged = Buffer.from(JSON.stringify({ nope: true })).toString('base64url')
  for (const cursor of ['garbage!', forged, 'eyJ']) {
    isErrorEnvelope(t, await call('GET', `/jobsvc/v1/jobs?cursor=${encodeURIComponent(cursor)}`), 400, 'invalid_cursor')
  }
})

t.test('another project’s job is not found on get, cancel, retry and history, and not listed', async (t) => {
  const other = await h.newProject()
  const mine = await create({ job_type: 'private' })
  const dead = await deadLettered('iso-dl')
  for (const [method, path] of [
    ['GET', `/jobsvc/v1/jobs/${mine.id}`],
    ['POST', `/jobsvc/v1/jobs/${mine.id}/cancel`],
    ['POST', `/jobsvc/v1/jobs/${dead.id}/retry`],
    ['GET', `/jobsvc/v1/jobs/${mine.id}/history`],
  ] as const) {
    isErrorEnvelope(t, await as(other.apiKey, method, path), 404, 'job_not_found')
  }
  const listed = await as(other.apiKey, 'GET', '/jobsvc/v1/jobs?limit=100')
  t.notOk(
    listed.body.data.some((j: any) => j.id === mine.id),
    'not in the other project’s list',
  )
  t.equal((await getJob(mine.id)).state, 'pending', 'the other project’s cancel did nothing')
  t.equal((await getJob(dead.id)).state, 'dead_letter', 'the other project’s retry did nothing')
})

t.test('cancel is accepted from pending and scheduled only', async (t) => {
  const pending = await create({ job_type: 'c', queue: 'cancel-q' })
  const res = await call('POST', `/jobsvc/v1/jobs/${pending.id}/cancel`)
  t.equal(res.status, 200)
  t.strictSame(res.body, { id: pending.id, state: 'cancelled' })
  t.equal((await getJob(pending.id)).state, 'cancelled')

  const scheduled = await create({ job_type: 'c', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  t.strictSame((await call('POST', `/jobsvc/v1/jobs/${scheduled.id}/cancel`)).body, { id: scheduled.id, state: 'cancelled' })

  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${pending.id}/cancel`), 409, 'invalid_state')

  const processing = await create({ job_type: 'c', queue: 'cancel-q' })
  await claimOne('cancel-q', 'wrk_c')
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${processing.id}/cancel`), 409, 'invalid_state')
  t.equal((await getJob(processing.id)).state, 'processing', 'a processing job cannot be cancelled')

  await call('POST', '/jobsvc/v1/workers/ack', { job_id: processing.id, worker_id: 'wrk_c', status: 'succeeded' })
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${processing.id}/cancel`), 409, 'invalid_state')
  t.equal((await getJob(processing.id)).state, 'succeeded')

  const dead = await deadLettered('cancel-dl')
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${dead.id}/cancel`), 409, 'invalid_state')
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${missingJob}/cancel`), 404, 'job_not_found')
})

t.test('retry from dead_letter resets the job and raises max_attempts when attempts ran out', async (t) => {
  const dead = await deadLettered('retry-q')
  const failed = await getJob(dead.id)
  t.equal(failed.state, 'dead_letter')
  t.same(failed.error, { type: 'Boom', message: 'it broke', stack_trace: 'at x' })
  t.ok(failed.completed_at && failed.started_at && failed.duration_ms !== null, 'timing is set before the retry')

  const res = await call('POST', `/jobsvc/v1/jobs/${dead.id}/retry`)
  t.equal(res.status, 200)
  t.strictSame(res.body, { id: dead.id, state: 'pending', attempt: 1 })
  const after = await getJob(dead.id)
  t.match(after, {
    state: 'pending',
    attempt: 1,
    max_attempts: 2,
    error: null,
    started_at: null,
    completed_at: null,
    duration_ms: null,
    progress: null,
  })
  t.equal(after.worker_id, null, 'worker assignment cleared')

  const again = await claimOne('retry-q', 'wrk_r')
  t.equal(again.id, dead.id)
  t.equal(again.attempt, 2, 'the retried job runs a new attempt')
  t.equal(again.max_attempts, 2)
  const ack = await call('POST', '/jobsvc/v1/workers/ack', { job_id: dead.id, worker_id: 'wrk_r', status: 'failed' })
  t.strictSame(ack.body, { action: 'done' }, 'attempt 2 of 2 dead-letters again')
  t.strictSame((await call('POST', `/jobsvc/v1/jobs/${dead.id}/retry`)).body, { id: dead.id, state: 'pending', attempt: 2 })
  t.equal((await getJob(dead.id)).max_attempts, 3, 'max_attempts becomes attempt + 1 again')
})

t.test('retry from any state but failed or dead_letter is 409 invalid_state', async (t) => {
  const pending = await create({ job_type: 'r', queue: 'retry-bad' })
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${pending.id}/retry`), 409, 'invalid_state')
  await claimOne('retry-bad', 'wrk_x')
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${pending.id}/retry`), 409, 'invalid_state')
  await call('POST', '/jobsvc/v1/workers/ack', { job_id: pending.id, worker_id: 'wrk_x', status: 'succeeded' })
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${pending.id}/retry`), 409, 'invalid_state')
  const scheduled = await create({ job_type: 'r', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${scheduled.id}/retry`), 409, 'invalid_state')
  await call('POST', `/jobsvc/v1/jobs/${scheduled.id}/cancel`)
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${scheduled.id}/retry`), 409, 'invalid_state')
  isErrorEnvelope(t, await call('POST', `/jobsvc/v1/jobs/${missingJob}/retry`), 404, 'job_not_found')
})

t.test('GET /jobs/{id}/history answers the job’s events in order', async (t) => {
  const job = await create({ job_type: 'audited', queue: 'hist-q', payload: { k: 'v' } })
  await claimOne('hist-q', 'wrk_h')
  await call('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'wrk_h', status: 'succeeded', duration_ms: 42 })
  const res = await call('GET', `/jobsvc/v1/jobs/${job.id}/history`)
  t.equal(res.status, 200)
  const events = res.body.data
  t.same(
    events.map((e: any) => e.type),
    ['job_created', 'job_claimed', 'job_succeeded'],
  )
  for (let i = 1; i < events.length; i++) t.ok(events[i].sequence > events[i - 1].sequence, 'sequences increase')
  for (const e of events) {
    t.type(e.sequence, 'number')
    t.equal(new Date(e.time).toISOString(), e.time, `${e.type} has an ISO time`)
    t.type(e.data, 'object')
  }
  t.match(events[0].data, { job_id: job.id, job_type: 'audited', queue: 'hist-q', payload: { k: 'v' }, state: 'pending' })
  t.match(events[1].data, { worker_id: 'wrk_h', attempt: 1 })
  t.match(events[2].data, { worker_id: 'wrk_h', attempt: 1, duration_ms: 42 })
  isErrorEnvelope(t, await call('GET', `/jobsvc/v1/jobs/${missingJob}/history`), 404, 'job_not_found')
})

t.test('GET /jobs/{id}/history is paged: limit (default 100, 1 to 500) and cursor', async (t) => {
  const job = await create({ job_type: 'chatty', queue: 'hist-pages' })
  await claimOne('hist-pages', 'wrk_p')
  const reports = 120
  for (let i = 1; i <= reports; i++) {
    const beat = await call('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'wrk_p', progress: i / 1000 })
    if (beat.status !== 200) throw new Error(`heartbeat answered ${beat.status}`)
  }
  await call('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'wrk_p', status: 'succeeded' })
  const total = 2 + reports + 1
  const expectedTypes = ['job_created', 'job_claimed', ...Array.from({ length: reports }, () => 'job_progressed'), 'job_succeeded']

  const first = await call('GET', `/jobsvc/v1/jobs/${job.id}/history`)
  t.equal(first.status, 200)
  t.equal(first.body.job_id, job.id)
  t.equal(first.body.data.length, 100, `a job with ${total} events answers 100 by default`)
  t.equal(first.body.has_more, true)
  t.type(first.body.next_cursor, 'string')
  const second = await call('GET', `/jobsvc/v1/jobs/${job.id}/history?cursor=${encodeURIComponent(first.body.next_cursor)}`)
  t.equal(second.status, 200)
  t.equal(second.body.data.length, total - 100, 'the next page holds the rest')
  t.equal(second.body.has_more, false)
  t.equal(second.body.next_cursor, null, 'next_cursor is null exactly when has_more is false')
  const all = [...first.body.data, ...second.body.data]
  t.same(
    all.map((e: any) => e.type),
    expectedTypes,
    'oldest first, nothing skipped or repeated across pages',
  )
  t.same(
    all.map((e: any) => e.data.progress).filter((p: unknown) => p !== undefined),
    Array.from({ length: reports }, (_, i) => (i + 1) / 1000),
  )

  const small: any[] = []
  let pages = 0
  for (let cursor: string | null = null; ; pages++) {
    const page: HttpResponse = await call(
      'GET',
      `/jobsvc/v1/jobs/${job.id}/history?limit=7${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`,
    )
    t.ok(page.body.data.length <= 7, 'no page is longer than its limit')
    small.push(...page.body.data)
    if (!page.body.has_more) break
    cursor = page.body.next_cursor
  }
  t.equal(pages + 1, Math.ceil(total / 7), 'pages of 7')
  t.same(small, all, 'paging by 7 gives the same events')
  t.equal((await call('GET', `/jobsvc/v1/jobs/${job.id}/history?limit=500`)).body.data.length, total, 'limit 500 is allowed')

  for (const limit of ['0', '501', '-1', '1.5', 'ten']) {
    isErrorEnvelope(t, await call('GET', `/jobsvc/v1/jobs/${job.id}/history?limit=${limit}`), 400, 'invalid_limit')
  }
  const listCursor = (await call('GET', '/jobsvc/v1/jobs?limit=1')).body.next_cursor
  for (const cursor of ['nonsense', listCursor, Buffer.from('["h",0,0]').toString('base64url'), Buffer.from('["h",1,-1]').toString('base64url')]) {
    isErrorEnvelope(t, await call('GET', `/jobsvc/v1/jobs/${job.id}/history?cursor=${encodeURIComponent(cursor)}`), 400, 'invalid_cursor')
  }
  isErrorEnvelope(
    t,
    await call('GET', `/jobsvc/v1/jobs/${missingJob}/history?cursor=${encodeURIComponent(first.body.next_cursor)}`),
    404,
    'job_not_found',
  )
})

t.test('every response carried an X-Request-Id that is a ULID', async (t) => {
  const extra = [
    await httpRequest(h.url, null, 'GET', '/jobsvc/v1/jobs'),
    await httpRequest(h.url, h.apiKey, 'GET', '/jobsvc/v1/nowhere'),
    await httpRequest(h.url, null, 'GET', '/jobsvc/health/live'),
  ]
  t.equal(extra[0]!.status, 401)
  t.equal(extra[1]!.status, 404)
  const all = [...responses, ...extra]
  t.ok(all.length > 50, `${all.length} responses checked`)
  const statuses = new Set(all.map((r) => r.status))
  for (const s of [200, 201, 400, 401, 404, 409]) t.ok(statuses.has(s), `responses include a ${s}`)
  const bad = all.filter((r) => !ulid.test(r.headers.get('x-request-id') ?? ''))
  t.equal(bad.length, 0, 'no response lacks a ULID request id')
  t.equal(new Set(all.map((r) => r.headers.get('x-request-id'))).size, all.length, 'request ids are unique')
})
