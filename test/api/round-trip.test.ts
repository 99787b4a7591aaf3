import t, { type Test } from 'tap'
import { startHarness, type HttpResponse } from '../support/harness.ts'
import { answeredFromText, asStoredErrorText, readJobsBack, roundTripMismatches, type JobView } from '../support/round-trip.ts'

// Issue 23, item 1: whatever JSON the API accepts reads back unchanged from every read model,
// list and export; what no read model (nor the log) can hold, U+0000 and unpaired surrogates, is
// refused with 400 `invalid_request` naming its path before anything is appended, except in a
// worker's error texts, which are stored with U+FFFD in their place (refusing an ack would strand
// its job).
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })

/** Strings Postgres, JSON, CSV or JavaScript treat specially, all of which must come back as sent. */
const awkward: Record<string, string> = {
  backslashes: 'C:\\path\\to\\ \\ end\\',
  escapesAsText: 'the text \\u0000, \\ud800 and \\n, not the characters',
  quotes: `"double" 'single' \`back\` ''`,
  nonCharacters: '\ufffe\uffff\ufdd0',
  separators: 'line\u2028paragraph\u2029end',
  controls: '\u0001\u0007\b\t\n\v\f\r\u001b\u001f\u007f\u0085\u00a0',
  surrogatePairs: '😀 👍🏽 🇫🇷 𝄞 \ud83d\ude00',
  byteOrderMark: '\ufeffbom',
  bidi: '\u202eevil\u202c',
  json: '{"a":1,"b":[null]}',
  sql: "'; DROP TABLE jobs; --",
  replacement: '\ufffd',
  empty: '',
  long: 'λ𝄞'.repeat(6_000),
}

/** Sent as text: a JSON serializer would write `-0` as `0` and round the large integer first. */
const payloadText = `{
  "strings": ${JSON.stringify(awkward)},
  "a.b": 1, "$where": "this.x", "$": {"$in": []}, ".": [], "": "", " ": " ",
  "numbers": [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -5e-324, 9007199254740993, -0, 0.1, 1e21, 1E-7, 123.4500, 0],
  "empties": [{}, [], [[]], {"a": {}}, {"": {"": []}}, null, true, false, ""],
  "zz": 1, "aa": 2, "b": 3, "10": "an index-like key", "2": "another"
}`

const tags: Record<string, string> = Object.fromEntries(
  // Cut by code points: a cut through a surrogate pair would leave one unpaired, which is refused.
  Object.entries(awkward).map(([name, value], i) => [[`a.b${i}`, `$${name}`, name, `${name} \u2028`][i % 4]!, [...value].slice(0, 200).join('')]),
)

/** Each text crosses its bound (10,000 and 65,536 UTF-16 units) in the middle of a surrogate pair. */
const errorIn = {
  type: 'Err\u0000or\ud800',
  message: `${`${Object.values(awkward).join('|').slice(0, 8_000)}|nul:\u0000|lone:\ud800|low:x\udc00y|pair:😀|`.padEnd(9_999, 'm')}😀 cut`,
  stack_trace: `${'s'.repeat(65_535)}😀 cut`,
}

function isRefused(t: Test, res: HttpResponse, path: string): void {
  t.equal(res.status, 400, `${path}: ${JSON.stringify(res.body).slice(0, 300)}`)
  t.equal(res.body?.error?.code, 'invalid_request')
  t.match(res.body?.error?.message, `${path}: `, `the refusal names ${path}`)
}

t.test('U+0000 and unpaired surrogates in payloads, tags and recurring payloads are refused before anything is appended', async (t) => {
  const before = await h.runtime.store.lastSequence()
  const create = (body: Record<string, unknown>) => h.request('POST', '/jobsvc/v1/jobs', { job_type: 'refused', ...body })
  isRefused(t, await create({ payload: { a: { b: ['ok', 'x\u0000y'] } } }), 'body.payload.a.b.1')
  isRefused(t, await create({ payload: { deep: [{ 'k\u0000': 1 }] } }), 'body.payload.deep.0')
  isRefused(t, await create({ payload: { lone: 'x\ud800' } }), 'body.payload.lone')
  isRefused(t, await create({ payload: { low: '\udc00' } }), 'body.payload.low')
  isRefused(t, await create({ payload: { ['\ud83d']: true } }), 'body.payload')
  isRefused(t, await create({ payload: {}, tags: { team: 'a\u0000' } }), 'body.tags.team')
  isRefused(t, await create({ payload: {}, tags: { ['t\udfff']: 'a' } }), 'body.tags')
  const schedule = await h.request('PUT', '/jobsvc/v1/recurring/rjob_refused', {
    job_type: 'refused',
    cron_expression: '0 * * * *',
    payload: { nested: { text: '\u0000' } },
  })
  isRefused(t, schedule, 'body.payload.nested.text')
  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: [{ job_type: 'refused', payload: { x: '\ud800' } }] })
  t.equal(batch.status, 200)
  t.equal(batch.body.results[0].status, 400)
  t.match(batch.body.results[0].error.message, 'body.jobs[0].payload.x: ', 'a batch item is refused alone, named by its path')
  t.equal(await h.runtime.store.lastSequence(), before, 'nothing was appended')
})

t.test('every accepted value reads back unchanged from the list, GET and both exports; error texts with U+FFFD', async (t) => {
  const expected = new Map<string, JobView>()
  const payload = answeredFromText(payloadText)
  const tagsText = JSON.stringify(tags)
  let minSeq = 0
  const seq = (res: HttpResponse) => (minSeq = Math.max(minSeq, Number(res.headers.get('x-event-seq'))))

  const body = (queue: string, extra = '') => `{"job_type":"round-trip","queue":"${queue}","payload":${payloadText},"tags":${tagsText}${extra}}`
  const created = await h.request('POST', '/jobsvc/v1/jobs', body('rt'))
  t.equal(created.status, 201, JSON.stringify(created.body))
  seq(created)
  expected.set(created.body.id, { payload, tags: tagsText, errorType: null, errorMessage: null, errorStack: null })

  const batch = await h.request(
    'POST',
    '/jobsvc/v1/jobs/batch',
    `{"jobs":[${body('rt')},{"job_type":"x","payload":{"bad":"\\u0000"}},${body('rt')}]}`,
  )
  t.same(
    batch.body.results.map((r: { status: number }) => r.status),
    [201, 400, 201],
    'the batch creates its good items and refuses the bad one alone',
  )
  seq(batch)
  for (const r of [batch.body.results[0], batch.body.results[2]]) {
    expected.set(r.body.id, { payload, tags: tagsText, errorType: null, errorMessage: null, errorStack: null })
  }

  const failing = await h.request('POST', '/jobsvc/v1/jobs', body('rt-ack', ',"max_attempts":1'))
  t.equal(failing.status, 201)
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-rt', queues: ['rt-ack'], wait_seconds: 5 })
  t.equal(polled.body.jobs?.[0]?.id, failing.body.id, 'the job is claimed')
  t.equal(JSON.stringify(polled.body.jobs[0].payload), payload, 'the worker gets the payload unchanged')
  const acked = await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: failing.body.id, worker_id: 'w-rt', status: 'failed', error: errorIn })
  t.equal(acked.status, 200, JSON.stringify(acked.body))
  seq(acked)
  const storedError = {
    errorType: 'Err\ufffdor\ufffd',
    errorMessage: asStoredErrorText(errorIn.message.slice(0, 10_000)),
    errorStack: asStoredErrorText(errorIn.stack_trace.slice(0, 65_536)),
  }
  t.ok(storedError.errorMessage.endsWith('m\ufffd'), 'a surrogate pair cut by the message bound is not left half')
  t.ok(storedError.errorStack.endsWith('s\ufffd'), 'nor by the stack trace bound')
  expected.set(failing.body.id, { payload, tags: tagsText, ...storedError })

  const views = await readJobsBack(h, [...expected.keys()], minSeq)
  t.same(roundTripMismatches(views, expected), [], 'list, GET, JSONL and CSV show every job exactly as accepted')
})

t.test('a recurring schedule payload reads back unchanged from the list, keys in their order', async (t) => {
  const put = await h.request(
    'PUT',
    '/jobsvc/v1/recurring/rjob_round-trip',
    `{"job_type":"round-trip","cron_expression":"0 0 1 1 *","payload":${payloadText}}`,
  )
  // Not in the assertion's message: U+2028 and U+0085 would break the TAP output's lines.
  t.equal(put.status, 201, 'the schedule is created')
  t.equal(JSON.stringify(put.body.payload), answeredFromText(payloadText), 'the PUT answers it')
  const list = await h.request('GET', `/jobsvc/v1/recurring?min_seq=${put.headers.get('x-event-seq')}`)
  const schedule = list.body.data.find((s: { id: string }) => s.id === 'rjob_round-trip')
  t.equal(JSON.stringify(schedule?.payload), answeredFromText(payloadText), 'the list, from the read model, answers it unchanged')
})
