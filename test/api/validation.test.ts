import fc from 'fast-check'
import t, { type Test } from 'tap'
import { eventually, startHarness, type HttpResponse } from '../support/harness.ts'

// Bad input of every kind must get the spec's envelope with the documented 4xx, never a 5xx.
// The scheduler is not needed here; the projector is, because poll claims from the read model.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })

const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/
const jobs = '/jobsvc/v1/jobs'
const minimal = { job_type: 'email', payload: { to: 'a@b.c' } }

/** The response is exactly `{error: {code, message, request_id}}` with this status and code. */
function isEnvelope(t: Test, res: HttpResponse, status: number, code: string, mentions?: string): void {
  t.equal(res.status, status, `status ${status}`)
  t.strictSame(Object.keys(res.body ?? {}), ['error'], 'the body is only the envelope')
  const error = res.body?.error ?? {}
  t.strictSame(Object.keys(error).sort(), ['code', 'message', 'request_id'])
  t.equal(error.code, code, `code ${code}`)
  t.type(error.message, 'string')
  t.not(error.message, '', 'the message is not empty')
  t.match(error.request_id, ulidPattern, 'request_id is a ULID')
  t.equal(error.request_id, res.headers.get('x-request-id'), 'request_id equals the X-Request-Id header')
  t.match(res.headers.get('content-type') ?? '', /^application\/json/)
  if (mentions !== undefined) t.match(error.message, mentions, `the message names ${mentions}`)
}

/** Sends `raw` as the body text exactly as given (no JSON encoding by the helper). */
function rawPost(path: string, raw: string | undefined, contentType: string | null = 'application/json') {
  return fetch(h.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.apiKey}`, ...(contentType === null ? {} : { 'content-type': contentType }) },
    body: raw,
  }).then(async (res) => {
    const text = await res.text()
    let body: unknown = text
    try {
      body = JSON.parse(text)
    } catch {
      // left as text; the envelope check then fails visibly
    }
    return { status: res.status, headers: res.headers, body } as HttpResponse
  })
}

t.test('POST /jobs: bodies that are not a JSON object', async (t) => {
  isEnvelope(t, await rawPost(jobs, '{"job_type": "x", "payload": {', 'application/json'), 400, 'invalid_request', 'JSON')
  isEnvelope(t, await rawPost(jobs, "{'job_type': 'x'}"), 400, 'invalid_request')
  isEnvelope(t, await rawPost(jobs, undefined, null), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, ''), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, '   '), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, '[]'), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, JSON.stringify([minimal])), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, 'null'), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, '"a string"'), 400, 'invalid_request', 'body')
  isEnvelope(t, await rawPost(jobs, '42'), 400, 'invalid_request', 'body')
})

t.test('POST /jobs: each field out of its rules is 400 invalid_request naming that field', async (t) => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['job_type missing', { payload: {} }, 'job_type'],
    ['job_type empty', { job_type: '', payload: {} }, 'job_type'],
    ['job_type 501 chars', { job_type: 'j'.repeat(501), payload: {} }, 'job_type'],
    ['job_type a number', { job_type: 7, payload: {} }, 'job_type'],
    ['job_type null', { job_type: null, payload: {} }, 'job_type'],
    ['payload missing', { job_type: 'x' }, 'payload'],
    ['payload null', { job_type: 'x', payload: null }, 'payload'],
    ['payload an array', { job_type: 'x', payload: [1, 2] }, 'payload'],
    ['payload a string', { job_type: 'x', payload: '{"a":1}' }, 'payload'],
    ['payload a number', { job_type: 'x', payload: 1 }, 'payload'],
    ['queue 101 chars', { ...minimal, queue: 'q'.repeat(101) }, 'queue'],
    ['queue empty', { ...minimal, queue: '' }, 'queue'],
    ['queue a number', { ...minimal, queue: 5 }, 'queue'],
    ['run_at not ISO', { ...minimal, run_at: 'tomorrow at noon' }, 'run_at'],
    ['run_at a date without time', { ...minimal, run_at: '2030-01-01' }, 'run_at'],
    ['run_at a number', { ...minimal, run_at: 1893456000000 }, 'run_at'],
    ['max_attempts 0', { ...minimal, max_attempts: 0 }, 'max_attempts'],
    ['max_attempts 101', { ...minimal, max_attempts: 101 }, 'max_attempts'],
    ['max_attempts 1.5', { ...minimal, max_attempts: 1.5 }, 'max_attempts'],
    ['max_attempts "3"', { ...minimal, max_attempts: '3' }, 'max_attempts'],
    ['max_attempts negative', { ...minimal, max_attempts: -1 }, 'max_attempts'],
    ['timeout_seconds 0', { ...minimal, timeout_seconds: 0 }, 'timeout_seconds'],
    ['timeout_seconds 86401', { ...minimal, timeout_seconds: 86_401 }, 'timeout_seconds'],
    ['timeout_seconds a string', { ...minimal, timeout_seconds: '60' }, 'timeout_seconds'],
    ['tags with a number value', { ...minimal, tags: { team: 'a', count: 3 } }, 'tags'],
    ['tags with a null value', { ...minimal, tags: { team: null } }, 'tags'],
    ['tags with an object value', { ...minimal, tags: { team: { name: 'a' } } }, 'tags'],
    ['tags as an array', { ...minimal, tags: ['a', 'b'] }, 'tags'],
    ['tags as a string', { ...minimal, tags: 'team=a' }, 'tags'],
    ['parent_job_id 37 chars', { ...minimal, parent_job_id: 'p'.repeat(37) }, 'parent_job_id'],
    ['parent_job_id a number', { ...minimal, parent_job_id: 12 }, 'parent_job_id'],
    ['idempotency_key 201 chars', { ...minimal, idempotency_key: 'k'.repeat(201) }, 'idempotency_key'],
    ['idempotency_key a number', { ...minimal, idempotency_key: 1 }, 'idempotency_key'],
  ]
  for (const [name, body, field] of cases) {
    t.test(name, async (t) => isEnvelope(t, await h.request('POST', jobs, body), 400, 'invalid_request', field))
  }
})

t.test('POST /jobs: validation stops at the first failure and names it', async (t) => {
  const res = await h.request('POST', jobs, { job_type: '', payload: null, queue: '', max_attempts: 0 })
  isEnvelope(t, res, 400, 'invalid_request', 'job_type')
  t.notMatch(res.body.error.message, 'max_attempts', 'only the first failure is named')
})

t.test('POST /jobs: a payload over 256 KiB is 400, a body over 1 MiB is 413', async (t) => {
  const over = await h.request('POST', jobs, { job_type: 'big', payload: { blob: 'x'.repeat(256 * 1024) } })
  isEnvelope(t, over, 400, 'invalid_request', 'payload')

  // Just under the limit: the serialized payload `{"blob":"…"}` is 11 bytes of framing.
  const under = await h.request('POST', jobs, { job_type: 'big', payload: { blob: 'x'.repeat(256 * 1024 - 11) } })
  t.equal(under.status, 201, 'a payload of exactly 256 KiB is accepted')

  const huge = await h.request('POST', jobs, { job_type: 'huge', payload: { blob: 'x'.repeat(1024 * 1024 + 1) } })
  isEnvelope(t, huge, 413, 'invalid_request')
})

t.test('POST /jobs: a body that is not JSON by content type is 415 invalid_request', async (t) => {
  const body = JSON.stringify(minimal)
  isEnvelope(t, await rawPost(jobs, body, 'application/xml'), 415, 'invalid_request')
  isEnvelope(t, await rawPost(jobs, 'job_type=x&payload=y', 'application/x-www-form-urlencoded'), 415, 'invalid_request')
  isEnvelope(t, await rawPost(jobs, body, 'text/plain'), 415, 'invalid_request')
  isEnvelope(t, await rawPost(jobs, body, 'multipart/form-data; boundary=x'), 415, 'invalid_request')
  t.equal((await rawPost(jobs, body, 'application/json; charset=utf-8')).status, 201, 'JSON with a charset is accepted')
})

t.test('POST /jobs: boundary values pass', async (t) => {
  const accepted: Array<[string, Record<string, unknown>]> = [
    ['job_type 500 chars', { job_type: 'j'.repeat(500), payload: {} }],
    ['queue 100 chars', { ...minimal, queue: 'q'.repeat(100) }],
    ['max_attempts 1', { ...minimal, max_attempts: 1 }],
    ['max_attempts 100', { ...minimal, max_attempts: 100 }],
    ['timeout_seconds 1', { ...minimal, timeout_seconds: 1 }],
    ['timeout_seconds 86400', { ...minimal, timeout_seconds: 86_400 }],
    ['idempotency_key 200 chars', { ...minimal, idempotency_key: 'k'.repeat(200) }],
    ['empty payload object', { job_type: 'x', payload: {} }],
    ['tags with string values', { ...minimal, tags: { team: 'a', env: '' } }],
    ['explicit nulls for optional fields', { ...minimal, queue: null, run_at: null, tags: null, parent_job_id: null }],
    ['run_at with an offset', { ...minimal, run_at: '2099-01-01T12:00:00+02:00' }],
  ]
  for (const [name, body] of accepted) {
    const res = await h.request('POST', jobs, body)
    t.equal(res.status, 201, name)
    t.match(res.body.id, /^job_[0-9A-HJKMNP-TV-Z]{26}$/, `${name}: a job id`)
  }
  const longType = await h.request('POST', jobs, { job_type: 'j'.repeat(500), payload: {}, queue: 'q'.repeat(100), max_attempts: 100 })
  t.equal(longType.body.job_type, 'j'.repeat(500), 'job_type is echoed whole')
  t.equal(longType.body.queue, 'q'.repeat(100))
  t.equal(longType.body.max_attempts, 100)

  const orphan = await h.request('POST', jobs, { ...minimal, parent_job_id: 'p'.repeat(36) })
  isEnvelope(t, orphan, 422, 'parent_not_found')
  const missingParent = await h.request('POST', jobs, { ...minimal, parent_job_id: 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV' })
  isEnvelope(t, missingParent, 422, 'parent_not_found')
})

t.test('workers: bad bodies are 400 invalid_request naming the field', async (t) => {
  const poll = '/jobsvc/v1/workers/poll'
  isEnvelope(t, await h.request('POST', poll, { queues: ['default'], wait_seconds: 0 }), 400, 'invalid_request', 'worker_id')
  isEnvelope(t, await h.request('POST', poll, { worker_id: 'w', wait_seconds: 0 }), 400, 'invalid_request', 'queues')
  isEnvelope(t, await h.request('POST', poll, { worker_id: 'w', queues: 'default', wait_seconds: 0 }), 400, 'invalid_request', 'queues')
  isEnvelope(
    t,
    await h.request('POST', poll, { worker_id: 'w', queues: ['default'], capacity: 0, wait_seconds: 0 }),
    400,
    'invalid_request',
    'capacity',
  )
  isEnvelope(
    t,
    await h.request('POST', poll, { worker_id: 'w', queues: ['default'], capacity: 51, wait_seconds: 0 }),
    400,
    'invalid_request',
    'capacity',
  )
  isEnvelope(
    t,
    await h.request('POST', poll, { worker_id: 'w', queues: ['default'], capacity: 2.5, wait_seconds: 0 }),
    400,
    'invalid_request',
    'capacity',
  )
  isEnvelope(t, await rawPost(poll, undefined, null), 400, 'invalid_request')
  const edge = await h.request('POST', poll, { worker_id: 'w-edge', queues: ['nothing-here'], capacity: 50, wait_seconds: 0 })
  t.equal(edge.status, 200, 'capacity 50 is accepted')
  t.strictSame(edge.body, { jobs: [] })

  const ack = '/jobsvc/v1/workers/ack'
  const job = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'
  isEnvelope(t, await h.request('POST', ack, { job_id: job, worker_id: 'w', status: 'done' }), 400, 'invalid_request', 'status')
  isEnvelope(t, await h.request('POST', ack, { job_id: job, worker_id: 'w' }), 400, 'invalid_request', 'status')
  isEnvelope(t, await h.request('POST', ack, { worker_id: 'w', status: 'succeeded' }), 400, 'invalid_request', 'job_id')
  isEnvelope(t, await h.request('POST', ack, { job_id: '', worker_id: 'w', status: 'succeeded' }), 400, 'invalid_request', 'job_id')
  isEnvelope(t, await h.request('POST', ack, { job_id: job, status: 'succeeded' }), 400, 'invalid_request', 'worker_id')
  isEnvelope(t, await h.request('POST', ack, { job_id: job, worker_id: '', status: 'succeeded' }), 400, 'invalid_request', 'worker_id')
  isEnvelope(
    t,
    await h.request('POST', ack, { job_id: job, worker_id: 'w', status: 'failed', duration_ms: 'slow' }),
    400,
    'invalid_request',
    'duration_ms',
  )
  isEnvelope(t, await h.request('POST', ack, { job_id: job, worker_id: 'w', status: 'failed', error: 'boom' }), 400, 'invalid_request', 'error')
  isEnvelope(t, await h.request('POST', ack, { job_id: job, worker_id: 'w', status: 'succeeded' }), 404, 'job_not_found')

  const heartbeat = '/jobsvc/v1/workers/heartbeat'
  isEnvelope(t, await h.request('POST', heartbeat, {}), 400, 'invalid_request', 'job_id')
  isEnvelope(t, await h.request('POST', heartbeat, { worker_id: 'w' }), 400, 'invalid_request', 'job_id')
  isEnvelope(t, await h.request('POST', heartbeat, { job_id: job }), 400, 'invalid_request', 'worker_id')
  isEnvelope(t, await rawPost(heartbeat, undefined, null), 400, 'invalid_request')
  isEnvelope(t, await h.request('POST', heartbeat, { job_id: job, worker_id: 'w' }), 404, 'job_not_found')
})

t.test('unknown routes are 404 route_not_found in the envelope', async (t) => {
  isEnvelope(t, await h.request('GET', '/nope'), 404, 'route_not_found')
  isEnvelope(t, await h.request('GET', '/jobsvc/v1/nope'), 404, 'route_not_found')
  isEnvelope(t, await h.request('DELETE', jobs), 404, 'route_not_found')
  isEnvelope(t, await h.request('PUT', '/jobsvc/v1/workers/poll', {}), 404, 'route_not_found')
  isEnvelope(t, await h.request('POST', '/jobsvc/v1/workers/nope', {}), 404, 'route_not_found')
})

t.test('a job id that is not job_ + ULID is 404 job_not_found', async (t) => {
  for (const id of [
    'abc',
    'job_',
    'job_123',
    'job_01arz3ndektsv4rrffq69g5fav',
    'job_01ARZ3NDEKTSV4RRFFQ69G5FAVX',
    'JOB_01ARZ3NDEKTSV4RRFFQ69G5FAV',
    '%00',
    'job_01ARZ3NDEKTSV4RRFFQ69G5FA%2F',
  ]) {
    isEnvelope(t, await h.request('GET', `${jobs}/${id}`), 404, 'job_not_found')
    isEnvelope(t, await h.request('POST', `${jobs}/${id}/cancel`), 404, 'job_not_found')
    isEnvelope(t, await h.request('POST', `${jobs}/${id}/retry`), 404, 'job_not_found')
    isEnvelope(t, await h.request('GET', `${jobs}/${id}/history`), 404, 'job_not_found')
  }
  isEnvelope(t, await h.request('GET', `${jobs}/job_01ARZ3NDEKTSV4RRFFQ69G5FAV`), 404, 'job_not_found', 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV')
})

t.test('cancel and retry accept an empty body sent as application/json', async (t) => {
  const json = { 'content-type': 'application/json' }
  const pending = await h.request('POST', jobs, minimal)
  const cancelled = await rawPost(`${jobs}/${pending.body.id}/cancel`, '')
  t.equal(cancelled.status, 200)
  t.strictSame(cancelled.body, { id: pending.body.id, state: 'cancelled' })

  const other = await h.request('POST', jobs, minimal)
  const noBody = await h.request('POST', `${jobs}/${other.body.id}/cancel`, undefined, json)
  t.equal(noBody.status, 200, 'no body at all with a JSON content type')
  t.equal(noBody.body.state, 'cancelled')

  const third = await h.request('POST', jobs, minimal)
  const emptyObject = await h.request('POST', `${jobs}/${third.body.id}/cancel`, {})
  t.equal(emptyObject.status, 200, 'an empty JSON object is accepted too')

  const failing = await h.request('POST', jobs, { job_type: 'flaky', payload: {}, queue: 'validation-retry', max_attempts: 1 })
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-retry', queues: ['validation-retry'], wait_seconds: 10 })
  t.equal(polled.body.jobs[0]?.id, failing.body.id, 'the job is claimed')
  const acked = await h.request('POST', '/jobsvc/v1/workers/ack', {
    job_id: failing.body.id,
    worker_id: 'w-retry',
    status: 'failed',
    error: { type: 'Boom', message: 'it broke', stack_trace: '' },
  })
  t.equal(acked.body.action, 'done', 'one attempt only: dead-lettered')
  const retried = await rawPost(`${jobs}/${failing.body.id}/retry`, '')
  t.equal(retried.status, 200)
  t.equal(retried.body.state, 'pending')
})

t.test('GET /jobs: wrong query values are 400', async (t) => {
  isEnvelope(t, await h.request('GET', `${jobs}?state=bogus`), 400, 'invalid_request', 'state')
  isEnvelope(t, await h.request('GET', `${jobs}?state=`), 400, 'invalid_request', 'state')
  isEnvelope(t, await h.request('GET', `${jobs}?created_after=yesterday`), 400, 'invalid_request', 'created_after')
  isEnvelope(t, await h.request('GET', `${jobs}?created_before=2024-13-45T00:00:00Z`), 400, 'invalid_request', 'created_before')
  isEnvelope(t, await h.request('GET', `${jobs}?queue=${'q'.repeat(101)}`), 400, 'invalid_request', 'queue')
  isEnvelope(t, await h.request('GET', `${jobs}?limit=0`), 400, 'invalid_limit')
  isEnvelope(t, await h.request('GET', `${jobs}?limit=101`), 400, 'invalid_limit')
  isEnvelope(t, await h.request('GET', `${jobs}?limit=ten`), 400, 'invalid_limit')
  isEnvelope(t, await h.request('GET', `${jobs}?cursor=not-a-cursor`), 400, 'invalid_cursor')
  const ok = await h.request('GET', `${jobs}?state=pending&limit=1`)
  t.equal(ok.status, 200, 'a valid state filter works')
})

/** `{"a": {"a": … {}}}` nested `levels` deep (the outermost object counts as one level). */
function nested(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = {}
  for (let i = 1; i < levels; i++) value = { a: value }
  return value
}

/** A cursor as the service would issue it, but holding whatever the caller wants. */
const forgedCursor = (createdAt: string, id: string) => Buffer.from(JSON.stringify([createdAt, id])).toString('base64url')

t.test('values Postgres cannot store are refused with 400, and the projector keeps going', async (t) => {
  const refused: Array<[string, Record<string, unknown>, string]> = [
    ['NUL in job_type', { job_type: 'a\u0000b', payload: {} }, 'job_type'],
    ['NUL in queue', { ...minimal, queue: 'q\u0000' }, 'queue'],
    ['NUL in idempotency_key', { ...minimal, idempotency_key: 'k\u0000' }, 'idempotency_key'],
    ['NUL in parent_job_id', { ...minimal, parent_job_id: 'job_\u0000' }, 'parent_job_id'],
    ['run_at in year 0', { ...minimal, run_at: '0000-01-01T00:00:00Z' }, 'run_at'],
    ['run_at in year 0 once in UTC', { ...minimal, run_at: '0001-01-01T00:30:00+01:00' }, 'run_at'],
    ['run_at past year 9999 once in UTC', { ...minimal, run_at: '9999-12-31T23:30:00-01:00' }, 'run_at'],
    ['payload nested 65 levels', { job_type: 'deep', payload: nested(65) }, 'payload'],
  ]
  for (const [name, body, field] of refused) {
    t.test(name, async (t) => isEnvelope(t, await h.request('POST', jobs, body), 400, 'invalid_request', field))
  }
  // Built as text: serializing such a value would overflow the stack of this test as well.
  const objects = `{"job_type":"deep","payload":${'{"a":'.repeat(5000)}{}${'}'.repeat(5000)}}`
  isEnvelope(t, await rawPost(jobs, objects), 400, 'invalid_request', 'payload')
  const arrays = `{"job_type":"deep","payload":{"a":${'['.repeat(5000)}${']'.repeat(5000)}}}`
  isEnvelope(t, await rawPost(jobs, arrays), 400, 'invalid_request', 'payload')

  const deepest = await h.request('POST', jobs, { job_type: 'deep', payload: nested(64) })
  t.equal(deepest.status, 201, 'a payload nested 64 levels is accepted')
  // Issue 23, item 1: no read model holds U+0000 back unchanged (test/api/round-trip.test.ts).
  isEnvelope(t, await h.request('POST', jobs, { job_type: 'nul-payload', payload: { k: 'v\u0000' } }), 400, 'invalid_request', 'payload.k')

  isEnvelope(t, await h.request('GET', `${jobs}?queue=%00`), 400, 'invalid_request', 'queue')
  isEnvelope(t, await h.request('GET', `${jobs}?job_type=a%00b`), 400, 'invalid_request', 'job_type')
  isEnvelope(t, await h.request('GET', `${jobs}?created_after=0000-06-01T00:00:00Z`), 400, 'invalid_request', 'created_after')
  isEnvelope(t, await h.request('GET', `${jobs}?cursor=${forgedCursor('2024-01-01T00:00:00Z', 'job_\u0000')}`), 400, 'invalid_cursor')
  isEnvelope(t, await h.request('GET', `${jobs}?cursor=${forgedCursor('+275760-09-13T00:00:00.000Z', 'job_x')}`), 400, 'invalid_cursor')
  isEnvelope(t, await h.request('GET', `${jobs}?cursor=${forgedCursor('not a date', 'job_x')}`), 400, 'invalid_cursor')

  const poll = '/jobsvc/v1/workers/poll'
  isEnvelope(t, await h.request('POST', poll, { worker_id: 'w', queues: ['\u0000'], wait_seconds: 0 }), 400, 'invalid_request', 'queues')
  isEnvelope(
    t,
    await h.request('POST', poll, { worker_id: 'w', queues: ['default'], job_types: ['a\u0000'], wait_seconds: 0 }),
    400,
    'invalid_request',
    'job_types',
  )
  isEnvelope(t, await h.request('POST', poll, { worker_id: 'w\u0000', queues: ['default'], wait_seconds: 0 }), 400, 'invalid_request', 'worker_id')
  const ack = { job_id: 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV', worker_id: 'w\u0000', status: 'succeeded' }
  isEnvelope(t, await h.request('POST', '/jobsvc/v1/workers/ack', ack), 400, 'invalid_request', 'worker_id')
  const register = '/jobsvc/v1/workers/register'
  isEnvelope(t, await h.request('POST', register, { worker_id: 'w\u0000', queues: [], job_types: [] }), 400, 'invalid_request', 'worker_id')
  const badSchedule = await h.request('POST', register, {
    worker_id: 'w',
    queues: ['default'],
    job_types: ['report'],
    recurring_schedules: [
      { job_type: 'report\u0000', cron_expression: '* * * * *' },
      { job_type: 'x', cron_expression: '*\u0000 * * * *' },
    ],
  })
  t.strictSame(badSchedule.body, { status: 'registered' }, 'a bad schedule is only logged (spec), never appended')

  const after = await h.request('POST', jobs, { job_type: 'after-unstorable', payload: {} })
  await eventually(
    async () => (await h.runtime.sql`SELECT 1 FROM jobs WHERE id = ${after.body.id}`).length === 1,
    10_000,
    'the projector to apply a later job',
  )
  t.pass('the projector applied every event and a later job')
})

/** Values of every JSON type, plus strings that stress encoders and Postgres text columns. */
const anyJson = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('', '\u0000', 'a\u0000b', '\ud800', 'x'.repeat(501), '2030-01-01T00:00:00Z', 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV', '__proto__'),
  fc.constantFrom(0, -1, 1, 1.5, 100, 101, 86_400, 86_401, Number.MAX_SAFE_INTEGER, -0, 1e300),
  fc.dictionary(fc.string({ unit: 'binary', maxLength: 8 }), fc.oneof(fc.string({ unit: 'binary', maxLength: 8 }), fc.integer()), { maxKeys: 3 }),
)

/** A body of random shape: most fields present with a random type, sometimes a non-object body. */
function bodies(fields: string[]) {
  const record = fc.record(Object.fromEntries(fields.map((f) => [f, anyJson])), { requiredKeys: [] })
  return fc.oneof(
    { weight: 8, arbitrary: record.map((r) => JSON.stringify(r)) },
    { weight: 1, arbitrary: anyJson.map((v) => JSON.stringify(v) ?? 'null') },
    {
      weight: 1,
      arbitrary: fc.string({ unit: 'binary', maxLength: 60 }),
    },
  )
}

t.test('fuzz: random bodies never get a 5xx and always get a well-formed answer', async (t) => {
  const seen = new Map<number, number>()
  const created: string[] = []
  const check = async (path: string, raw: string) => {
    const res = await rawPost(path, raw)
    seen.set(res.status, (seen.get(res.status) ?? 0) + 1)
    if (res.status === 201) created.push((res.body as any).id)
    if (res.status >= 500) throw new Error(`${path} answered ${res.status} to ${JSON.stringify(raw)}: ${JSON.stringify(res.body)}`)
    if (res.status >= 400) {
      const error = (res.body as any)?.error
      if (typeof error?.code !== 'string' || error.request_id !== res.headers.get('x-request-id')) {
        throw new Error(`${path} answered ${res.status} without the envelope to ${JSON.stringify(raw)}: ${JSON.stringify(res.body)}`)
      }
    }
  }
  const jobFields = ['job_type', 'payload', 'queue', 'run_at', 'max_attempts', 'timeout_seconds', 'idempotency_key', 'tags', 'parent_job_id']
  await fc.assert(
    fc.asyncProperty(bodies(jobFields), (raw) => check(jobs, raw)),
    { numRuns: 100 },
  )
  // Anchored on a valid shape (fields the case leaves out stay valid), so that many cases get past
  // the first field and reach deeper rules and the read model.
  await fc.assert(
    fc.asyncProperty(fc.record({ job_type: fc.constant('fuzz'), payload: fc.constant({}) }), bodies(jobFields), (base, raw) => {
      const parsed = (() => {
        try {
          return JSON.parse(raw)
        } catch {
          return null
        }
      })()
      const merged = parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? { ...base, ...parsed } : base
      return check(jobs, JSON.stringify(merged))
    }),
    { numRuns: 80 },
  )
  const real = await h.request('POST', jobs, { job_type: 'fuzz-target', payload: {}, queue: 'fuzz-ack' })
  const ackBodies = fc.oneof(
    bodies(['job_id', 'worker_id', 'status', 'duration_ms', 'error']),
    fc
      .record(
        { worker_id: anyJson, status: fc.constantFrom('succeeded', 'failed'), duration_ms: anyJson, error: anyJson },
        { requiredKeys: ['status'] },
      )
      .map((r) => JSON.stringify({ job_id: real.body.id, ...r })),
  )
  await fc.assert(
    fc.asyncProperty(ackBodies, (raw) => check('/jobsvc/v1/workers/ack', raw)),
    { numRuns: 100 },
  )
  t.comment(`statuses seen: ${JSON.stringify(Object.fromEntries([...seen].sort()))}`)
  t.ok(
    [...seen.keys()].every((s) => s < 500),
    'no 5xx',
  )
  t.ok(seen.has(400), 'some bodies were refused')
  t.ok(seen.has(201), 'some bodies were accepted, so the fuzz reaches past validation')
  // Accepted is not enough: an event the read model cannot store would stop the projector.
  const after = await h.request('POST', jobs, { job_type: 'after-fuzz', payload: {} })
  const ids = [...created, after.body.id]
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE id = ANY(${ids})`)[0]!.n === ids.length,
    10_000,
    'every accepted job in the read model',
  )
  t.pass(`all ${ids.length} accepted jobs were projected`)
})
