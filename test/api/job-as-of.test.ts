import t from 'tap'
import { encodeFeedCursor } from '../../services/use-cases/events/feed-cursor.ts'
import { purgeExpiredJobs } from '../../services/roles/scheduler/retention.ts'
import { eventually, httpRequest, startHarness, withClockShifted, type HttpResponse } from '../support/harness.ts'
import { projectJobsApi } from '../support/dashboard.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

// Issue 27, item 1: `GET /jobs/{id}?as_of=` answers a job as it was at a moment of its history,
// folded from its events; item 2: the history's `types`, `since` and `until` filters.

const h = await startHarness(t, import.meta.filename)
const api = jobsApi(h, { jobType: 'as-of' })
const day = 24 * 60 * 60 * 1000

const get = (path: string, apiKey = h.apiKey) => httpRequest(h.url, apiKey, 'GET', path)
const asOf = (jobId: string, moment: string, apiKey = h.apiKey) => get(`/jobsvc/v1/jobs/${jobId}?as_of=${encodeURIComponent(moment)}`, apiKey)

/** Every event of the job's history, page after page. */
async function wholeHistory(jobId: string, query = '', apiKey = h.apiKey): Promise<any[]> {
  const events: any[] = []
  for (let cursor: string | null = null; ;) {
    const page: HttpResponse = await get(
      `/jobsvc/v1/jobs/${jobId}/history?limit=3${query}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`,
      apiKey,
    )
    if (page.status !== 200) throw new Error(`history answered ${page.status}: ${JSON.stringify(page.body)}`)
    events.push(...page.body.data)
    if (!page.body.has_more) return events
    cursor = page.body.next_cursor
  }
}

async function ok(res: Promise<HttpResponse>, what: string): Promise<any> {
  const answer = await res
  if (answer.status !== 200) throw new Error(`${what} answered ${answer.status}: ${JSON.stringify(answer.body)}`)
  return answer.body
}

interface Recorded {
  step: string
  detail: Record<string, unknown>
  /** The step's last event: its time, its cursor and the sequence of its message. */
  time: string
  cursor: string
  sequence: number
}

t.test('as-of answers match the states recorded at each step of create, claim, failed ack, retry, claim, success', async (t) => {
  const queue = 'as-of-steps'
  const job = await api.create({ queue, payload: { to: 'ada@example.com' }, max_attempts: 1, tags: { team: 'mail' } })
  const recorded: Recorded[] = []
  const record = async (step: string) => {
    const detail = await ok(get(`/jobsvc/v1/jobs/${job.id}`), `GET after ${step}`)
    const last = (await wholeHistory(job.id)).at(-1)
    recorded.push({ step, detail, time: last.time, cursor: last.cursor, sequence: last.sequence })
  }
  const heartbeat = async (progress: number) =>
    ok(h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'wrk_asof', progress }), 'heartbeat')

  await record('create')
  await api.claimOne(queue, 'wrk_asof')
  await record('claim')
  await heartbeat(0.4)
  await record('progress 0.4')
  const error = { type: 'SmtpDown', message: 'the mail relay refused', stack_trace: 'at send (mail.ts:3:1)' }
  t.equal((await api.ack({ job_id: job.id, worker_id: 'wrk_asof', status: 'failed', error })).body.action, 'done', 'dead-lettered')
  await record('failed ack')
  await ok(h.request('POST', `/jobsvc/v1/jobs/${job.id}/retry`), 'retry')
  await record('retry')
  await api.claimOne(queue, 'wrk_asof')
  await record('claim again')
  await heartbeat(0.9)
  await record('progress 0.9')
  await api.ack({ job_id: job.id, worker_id: 'wrk_asof', status: 'succeeded', result: { delivered: 1 } })
  await record('success')

  t.same(
    recorded.map((r) => r.detail.state),
    ['pending', 'processing', 'processing', 'dead_letter', 'pending', 'processing', 'processing', 'succeeded'],
    'the job went through every step',
  )
  const latest = recorded.at(-1)!.sequence
  const compare = (t: Tap, answer: Record<string, unknown>, expected: Recorded, what: string) => {
    const { as_of: _point, ...detail } = answer
    t.same(Object.keys(detail).sort(), Object.keys(expected.detail).sort(), `${what}: the fields of the job detail object`)
    for (const [field, value] of Object.entries(expected.detail)) t.strictSame(detail[field], value, `${what}: ${field}`)
  }
  for (const step of recorded) {
    const byCursor = await asOf(job.id, step.cursor)
    t.equal(byCursor.status, 200, `${step.step}: as of its cursor`)
    compare(t, byCursor.body, step, `${step.step}, by cursor`)
    t.strictSame(byCursor.body.as_of, { sequence: step.sequence, latest_sequence: latest }, `${step.step}: where the read stopped, and the latest`)
    t.equal(byCursor.headers.get('x-event-seq'), String(latest), 'X-Event-Seq is the latest sequence')

    // Two steps may share a millisecond: an instant is as of the last event at it or before.
    const byTime = await asOf(job.id, step.time)
    const expected = recorded.filter((r) => r.time <= step.time).at(-1)!
    t.equal(byTime.status, 200, `${step.step}: as of its time`)
    compare(t, byTime.body, expected, `${step.step}, by time`)
    t.strictSame(byTime.body.as_of, { sequence: expected.sequence, latest_sequence: latest, time: step.time })
  }
  const offset = await asOf(job.id, recorded[3]!.time.replace('Z', '+00:00'))
  t.equal(offset.body.as_of.time, recorded[3]!.time, 'an instant with an offset is the same instant')

  const now = await ok(get(`/jobsvc/v1/jobs/${job.id}`), 'GET')
  const later = await asOf(job.id, new Date(Date.now() + day).toISOString())
  compare(t, later.body, { ...recorded.at(-1)!, detail: now }, 'a moment after the last event')
})

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

t.test('before its creation a job is not found; unknown and other projects’ jobs neither', async (t) => {
  const earlier = await api.create({ queue: 'as-of-before' })
  const job = await api.create({ queue: 'as-of-before' })
  const [created] = await wholeHistory(job.id)
  isError(t, await asOf(job.id, new Date(Date.parse(created.time) - 1).toISOString()), 404, 'job_not_found', 'a millisecond before its job_created')
  const earlierCursor = (await wholeHistory(earlier.id))[0].cursor
  isError(t, await asOf(job.id, earlierCursor), 404, 'job_not_found', 'a cursor of an event stored before it')
  t.equal((await asOf(job.id, created.cursor)).body.state, 'pending', 'its own job_created: there')
  isError(t, await asOf('job_01ARZ3NDEKTSV4RRFFQ69G5FAV', new Date().toISOString()), 404, 'job_not_found', 'a job that never existed')
  const other = await h.newProject()
  isError(t, await asOf(job.id, created.time, other.apiKey), 404, 'job_not_found', "another project's job")
})

t.test('a malformed as_of is 400 invalid_request; a cursor not given to this project, 400 invalid_cursor', async (t) => {
  const job = await api.create({ queue: 'as-of-refused' })
  const [created] = await wholeHistory(job.id)
  for (const value of ['', 'yesterday', '2026-11-26', '2026-11-26 10:00:00Z', '2026-13-40T10:00:00Z', '1732615200', 'h.1.2']) {
    isError(t, await asOf(job.id, value), 400, 'invalid_request', `as_of=${JSON.stringify(value)}`)
  }
  const other = await h.newProject()
  const position = { seq: created.sequence, index: 'all' as const }
  isError(t, await asOf(job.id, encodeFeedCursor(other.projectId, position)), 400, 'invalid_cursor', "another project's cursor")
  const edited = created.cursor.replace(/^c1\.([0-9a-z]+)/, (_: string, s: string) => `c1.${(Number.parseInt(s, 36) + 1).toString(36)}`)
  isError(t, await asOf(job.id, edited), 400, 'invalid_cursor', 'an edited cursor')
  const historyCursor = (await get(`/jobsvc/v1/jobs/${job.id}/history?limit=1`)).body.next_cursor
  if (historyCursor !== null) isError(t, await asOf(job.id, historyCursor), 400, 'invalid_request', "the history's page cursor is no event's")
  const plain = await get(`/jobsvc/v1/jobs/${job.id}?unknown=1`)
  t.equal(plain.status, 200, 'other query parameters are ignored, as before')
  t.equal(plain.body.as_of, undefined, 'without as_of, no as_of field')
})

t.test('once retention removed a job, its moments are 410 history_expired; before it was made, 404', async (t) => {
  const free = await h.newProject()
  const freeApi = projectJobsApi(h, free.apiKey, { jobType: 'as-of' })
  const job = await freeApi.create({ queue: 'as-of-expired' })
  await freeApi.claimOne('as-of-expired', 'wrk_old')
  const acked = await freeApi.ack({ job_id: job.id, worker_id: 'wrk_old', status: 'succeeded' })
  const events = await wholeHistory(job.id, '', free.apiKey)
  t.equal((await asOf(job.id, events[1].cursor, free.apiKey)).body.state, 'processing', 'before retention, as of its claim')
  await eventually(
    async () => (await get(`/jobsvc/v1/jobs?state=succeeded&min_seq=${acked.headers.get('x-event-seq')}`, free.apiKey)).body.data?.length === 1,
  )
  // The free plan keeps ended jobs 30 days.
  t.equal(await withClockShifted(h.runtime, 31 * day, () => purgeExpiredJobs(h.runtime)), 1, 'retention removed it')
  isError(t, await get(`/jobsvc/v1/jobs/${job.id}`, free.apiKey), 404, 'job_not_found', 'a plain read: not found, as before')
  isError(t, await asOf(job.id, events[1].cursor, free.apiKey), 410, 'history_expired', 'as of the cursor of its claim')
  isError(t, await asOf(job.id, events[1].time, free.apiKey), 410, 'history_expired', 'as of the time of its claim')
  isError(t, await asOf(job.id, new Date().toISOString(), free.apiKey), 410, 'history_expired', 'as of now')
  isError(
    t,
    await asOf(job.id, new Date(Date.parse(events[0].time) - 60_000).toISOString(), free.apiKey),
    404,
    'job_not_found',
    'before its id was made',
  )
  const refused = await asOf(job.id, events[1].time, free.apiKey)
  t.match(refused.body.error.message, /retention/, 'the message says why')
  const kept = await api.create({ queue: 'as-of-kept' })
  t.equal((await asOf(kept.id, new Date().toISOString())).status, 200, 'a project retention did not touch answers as before')
})

t.test('history filters: types, since and until, with limit and cursor paging; each event carries its feed cursor', async (t) => {
  const queue = 'as-of-history'
  const job = await api.create({ queue })
  await api.claimOne(queue, 'wrk_hist')
  for (let i = 1; i <= 5; i++) {
    await ok(h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'wrk_hist', progress: i / 10 }), 'heartbeat')
  }
  await api.ack({ job_id: job.id, worker_id: 'wrk_hist', status: 'succeeded' })
  const all = await wholeHistory(job.id)
  t.same(
    all.map((e) => e.type),
    ['job_created', 'job_claimed', ...Array(5).fill('job_progressed'), 'job_succeeded'],
  )

  const feed = await ok(get(`/jobsvc/v1/events?job_id=${job.id}`), 'the event feed')
  t.strictSame(
    all.map((e) => e.cursor),
    all.map((e) => feed.data.find((f: { id: string }) => f.id === e.id)?.cursor),
    'each history event carries the cursor the event feed gives it',
  )

  t.strictSame(
    await wholeHistory(job.id, '&types=job_claimed,job_succeeded'),
    all.filter((e) => ['job_claimed', 'job_succeeded'].includes(e.type)),
    'types',
  )
  t.strictSame(
    await wholeHistory(job.id, '&types=job_progressed'),
    all.filter((e) => e.type === 'job_progressed'),
    'progress reports only',
  )
  t.strictSame(await wholeHistory(job.id, '&types=%20job_created%20,'), [all[0]], 'types are trimmed, empty ones dropped')

  const [since, until] = [all[2].time, all[5].time]
  const within = all.filter((e) => e.time >= since && e.time <= until)
  const q = `&since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}`
  t.strictSame(await wholeHistory(job.id, q), within, 'since and until are inclusive')
  t.strictSame(
    await wholeHistory(job.id, `${q}&types=job_progressed`),
    within.filter((e) => e.type === 'job_progressed'),
    'combined',
  )
  const first = await ok(get(`/jobsvc/v1/jobs/${job.id}/history?limit=2&types=job_progressed`), 'a first filtered page')
  t.equal(first.data.length, 2, 'a page holds limit events')
  t.equal(first.has_more, true)
  const rest = await ok(
    get(`/jobsvc/v1/jobs/${job.id}/history?limit=500&types=job_progressed&cursor=${encodeURIComponent(first.next_cursor)}`),
    'the rest',
  )
  t.strictSame(
    [...first.data, ...rest.data],
    all.filter((e) => e.type === 'job_progressed'),
    'the cursor resumes the filtered read',
  )

  const before = await ok(
    get(`/jobsvc/v1/jobs/${job.id}/history?until=${encodeURIComponent(new Date(Date.parse(all[0].time) - 60_000).toISOString())}`),
    'until before it',
  )
  t.strictSame([before.data, before.has_more, before.next_cursor], [[], false, null], 'nothing before its creation')
  const after = await ok(
    get(`/jobsvc/v1/jobs/${job.id}/history?since=${encodeURIComponent(new Date(Date.now() + day).toISOString())}`),
    'since after it',
  )
  t.strictSame(after.data, [], 'nothing after its last event')

  for (const query of [
    'types=job_exploded',
    'types=project_created',
    'types=,',
    'since=yesterday',
    'until=2026-11-26',
    `since=${encodeURIComponent(until)}&until=${encodeURIComponent(new Date(Date.parse(until) - 1).toISOString())}`,
  ]) {
    isError(t, await get(`/jobsvc/v1/jobs/${job.id}/history?${query}`), 400, 'invalid_request', query)
  }
  isError(t, await get(`/jobsvc/v1/jobs/job_01ARZ3NDEKTSV4RRFFQ69G5FAV/history?types=job_created`), 404, 'job_not_found', 'an unknown job, filtered')

  for (const e of all) {
    const state = (await asOf(job.id, e.cursor)).body
    if (e.type === 'job_progressed') t.equal(state.progress, e.data.progress, `as of report ${e.data.progress}: its progress`)
  }
})
