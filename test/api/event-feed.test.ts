import t from 'tap'
import { DeliverPolicy } from '@nats-io/jetstream'
import { purgeExpiredJobs } from '../../services/roles/scheduler/retention.ts'
import { decodeEventMessage } from '../../streams/event-store.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { answerWithin, eventually, httpRequest, installEnv, spawnService, startHarness, type HttpResponse } from '../support/harness.ts'

/**
 * The project event feed, `GET /jobsvc/v1/events` (issue 25, item 1), against the real NATS and
 * Postgres: order and completeness checked against an independent read of the log (a nats.js
 * ordered consumer on the project's subjects), filters, cursors, retention's 410, the streams.
 */

const day = 24 * 60 * 60 * 1000

interface FeedEvent {
  id: string
  cursor: string
  type: string
  occurred_at: string
  project_id: string
  aggregate: string
  aggregate_id: string
  data: Record<string, unknown>
  state: Record<string, unknown> | null
}

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const other = await h.newProject()
const asOther = (path: string) => httpRequest(h.url, other.apiKey, 'GET', path)

/** Every event id of a project's messages in the log's order, read with nats.js's ordered consumer (not the feed's code). */
async function eventIdsInLog(projectId: string): Promise<string[]> {
  const stream = eventsStreamName(h.config.namespace)
  const subject = `${h.config.namespace}.evt.${projectId}.>`
  const info = await h.runtime.nats.jsm.streams.info(stream, { subjects_filter: subject })
  const total = Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0)
  const consumer = await h.runtime.nats.js.consumers.get(stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All })
  const ids: string[] = []
  if (total === 0) return ids
  const messages = await consumer.fetch({ max_messages: total, expires: 10_000 })
  for await (const m of messages) {
    for (const e of decodeEventMessage(m.data, m.seq).events) ids.push(e.id)
    if (m.info.pending === 0) break
  }
  await consumer.delete().catch(() => undefined)
  return ids
}

async function createJobs(apiKey: string, n: number, queue = 'feed', jobType = 'feed.job'): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < n; i++) {
    const res = await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: jobType, queue, payload: { i } })
    ids.push(res.body.id)
  }
  return ids
}

/** Claims and acks every pending job of `queue` (project of `apiKey`), reporting progress on the way. */
async function runJobs(apiKey: string, queue: string, count: number): Promise<void> {
  let done = 0
  while (done < count) {
    const poll = await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/workers/poll', {
      worker_id: 'w1',
      queues: [queue],
      capacity: 10,
      wait_seconds: 2,
    })
    for (const job of poll.body.jobs ?? []) {
      await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w1', progress: 0.5 })
      await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'w1', status: 'succeeded' })
      done++
    }
  }
}

async function readAll(query: string, apiKey = h.apiKey, limit = 1000): Promise<{ events: FeedEvent[]; cursor: string }> {
  const events: FeedEvent[] = []
  let cursor = ''
  for (;;) {
    const res: HttpResponse = await httpRequest(
      h.url,
      apiKey,
      'GET',
      `/jobsvc/v1/events?limit=${limit}${query}${cursor === '' ? '' : `&after=${cursor}`}`,
    )
    if (res.status !== 200) throw new Error(`feed answered ${res.status}: ${JSON.stringify(res.body)}`)
    events.push(...res.body.data)
    cursor = res.body.next_cursor
    if (!res.body.has_more) return { events, cursor }
  }
}

t.test(
  'every event of the project, in order, none of another, none twice: across pages and a resume, with a second API process appending',
  async (t) => {
    await createJobs(other.apiKey, 15, 'theirs')
    await createJobs(h.apiKey, 12)
    await runJobs(h.apiKey, 'feed', 6)

    const second = await spawnService(installEnv(h.config), ['--role', 'api'])
    t.teardown(() => second.stop())
    let appending = true
    const appended: string[] = []
    const appender = (async () => {
      while (appending) {
        const res = await httpRequest(second.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'feed.second', queue: 'feed', payload: {} })
        appended.push(res.body.id)
        await httpRequest(second.url, other.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'theirs', queue: 'theirs', payload: {} })
      }
    })()

    // Three pages, the cursor stored between them as a client would (a string), then a resume.
    const seen: FeedEvent[] = []
    let cursor: string | null = null
    for (let page = 0; page < 3; page++) {
      const res: HttpResponse = await h.request('GET', `/jobsvc/v1/events?limit=7${cursor === null ? '' : `&after=${encodeURIComponent(cursor)}`}`)
      t.equal(res.status, 200)
      t.equal(res.body.data.length, 7, `page ${page} is full`)
      t.equal(res.body.has_more, true)
      t.type(res.body.next_cursor, 'string')
      seen.push(...res.body.data)
      cursor = res.body.next_cursor
    }
    await eventually(async () => appended.length >= 5)
    appending = false
    await appender
    const stored = String(cursor)
    const rest = await readAll(`&after=${encodeURIComponent(stored)}`, h.apiKey, 50)
    seen.push(...rest.events)

    const inLog = await eventIdsInLog(h.projectId)
    t.same(
      seen.map((e) => e.id),
      inLog,
      'exactly the project events of the log, in its order',
    )
    t.equal(new Set(seen.map((e) => e.id)).size, seen.length, 'none twice')
    t.ok(
      seen.every((e) => e.project_id === h.projectId),
      'none of another project',
    )
    const types = new Set(seen.map((e) => e.type))
    for (const type of ['project_created', 'api_key_issued', 'job_created', 'job_claimed', 'job_progressed', 'job_succeeded'])
      t.ok(types.has(type), `holds ${type}`)
    for (const id of appended)
      t.ok(
        seen.some((e) => e.aggregate_id === id && e.type === 'job_created'),
        `the second process's ${id}`,
      )

    const job = seen.find((e) => e.type === 'job_succeeded')!
    t.match(job, { id: /^evt_/, cursor: /^c1\./, occurred_at: /Z$/, aggregate: 'job', aggregate_id: /^job_/, data: { worker_id: 'w1' } })
    t.equal(job.state?.state, 'succeeded', 'the state after the event')
    const created = seen.find((e) => e.type === 'job_created' && e.aggregate_id === job.aggregate_id)!
    t.equal(created.state?.state, 'pending', 'each event carries the state after it, not the latest')
    const progress = seen.find((e) => e.type === 'job_progressed')!
    t.match(progress, { aggregate: 'progress', data: { progress: 0.5 } })

    // The project's creation is one message of two events: each has its own state and cursor.
    const [first, second2] = seen
    t.same([first!.type, second2!.type], ['project_created', 'api_key_issued'])
    t.not(first!.cursor, second2!.cursor)
    t.same((first!.state as { keys: unknown[] }).keys, [], 'the state after project_created holds no key yet')
    t.equal((second2!.state as { keys: unknown[] }).keys.length, 1, 'the state after api_key_issued holds it')
    const resumedInside = await h.request('GET', `/jobsvc/v1/events?limit=1&after=${encodeURIComponent(first!.cursor)}`)
    t.equal(resumedInside.body.data[0].id, second2!.id, 'a cursor inside a message resumes at its next event')

    const empty = await h.request('GET', `/jobsvc/v1/events?after=${encodeURIComponent(rest.cursor)}`)
    t.same(empty.body.data, [])
    t.equal(empty.body.has_more, false)
    t.type(empty.body.next_cursor, 'string', 'never null, even on an empty page')
  },
)

t.test('filters keep what they ask for and still move the cursor past what they skip', async (t) => {
  const start = (await readAll('')).cursor
  const [a] = await createJobs(h.apiKey, 1, 'fq1', 'type.a')
  await createJobs(h.apiKey, 2, 'fq2', 'type.b')
  await runJobs(h.apiKey, 'fq1', 1)

  const q1 = await readAll(`&queue=fq1&after=${encodeURIComponent(start)}`)
  t.same(
    q1.events.map((e) => e.type),
    ['job_created', 'job_claimed', 'job_progressed', 'job_succeeded'],
    'a queue filter keeps its jobs and their progress reports',
  )
  t.ok(q1.events.every((e) => e.aggregate_id === a))
  const byType = await readAll(`&job_type=type.b&types=job_created&after=${encodeURIComponent(start)}`)
  t.equal(byType.events.length, 2)
  const byJob = await readAll(`&job_id=${a}&types=job_succeeded&after=${encodeURIComponent(start)}`)
  t.same(
    byJob.events.map((e) => [e.aggregate_id, e.type]),
    [[a, 'job_succeeded']],
  )

  // Nothing matches: the page is empty and its cursor is past everything looked at.
  const none = await h.request('GET', `/jobsvc/v1/events?types=alert_triggered&after=${encodeURIComponent(start)}`)
  t.same(none.body.data, [])
  t.not(none.body.next_cursor, start, 'the cursor moved past the skipped events')
  const [late] = await createJobs(h.apiKey, 1, 'fq1', 'type.a')
  const after = await readAll(`&types=job_created&after=${encodeURIComponent(none.body.next_cursor)}`)
  t.same(
    after.events.map((e) => e.aggregate_id),
    [late],
    'resuming from it gives only what came later',
  )

  for (const [query, code] of [
    ['types=job_made', 'invalid_request'],
    ['limit=0', 'invalid_limit'],
    ['limit=1001', 'invalid_limit'],
    ['wait=31', 'invalid_request'],
    ['wait=soon', 'invalid_request'],
    ['from_time=yesterday', 'invalid_request'],
    [`from_time=2026-01-01T00:00:00Z&after=${encodeURIComponent(start)}`, 'invalid_request'],
    ['job_id=a.b', 'invalid_request'],
    ['after=nonsense', 'invalid_cursor'],
    [`after=${encodeURIComponent(start.slice(0, -1) + (start.endsWith('A') ? 'B' : 'A'))}`, 'invalid_cursor'],
  ] as const) {
    const res = await h.request('GET', `/jobsvc/v1/events?${query}`)
    t.equal(res.status, 400, query)
    t.equal(res.body.error?.code, code, query)
  }
  const theirs = await asOther(`/jobsvc/v1/events?after=${encodeURIComponent(start)}`)
  t.equal(theirs.status, 400, "another project's cursor is not one this project was given")
  t.equal(theirs.body.error.code, 'invalid_cursor')
})

t.test('from_time starts at the first event at or after it', async (t) => {
  await new Promise((r) => setTimeout(r, 20))
  const from = new Date().toISOString()
  const [job] = await createJobs(h.apiKey, 1, 'ft')
  const res = await h.request('GET', `/jobsvc/v1/events?from_time=${from}`)
  t.equal(res.status, 200)
  t.equal(res.body.data[0].aggregate_id, job)
  t.ok(res.body.data.every((e: FeedEvent) => e.occurred_at >= from))
})

t.test('a long poll waits for the first event, then answers at once', async (t) => {
  const end = (await readAll('')).cursor
  const waiting = h.request('GET', `/jobsvc/v1/events?wait=20&types=job_created&after=${encodeURIComponent(end)}`)
  await new Promise((r) => setTimeout(r, 300))
  const started = Date.now()
  const [job] = await createJobs(h.apiKey, 1, 'lp')
  const res = await waiting
  t.equal(res.status, 200)
  t.same(
    res.body.data.map((e: FeedEvent) => e.aggregate_id),
    [job],
  )
  t.ok(Date.now() - started < 15_000, 'answered with the event, not at the deadline')
})

t.test('NDJSON streams to the current end, then says where to resume', async (t) => {
  const all = await readAll('')
  const res = await fetch(`${h.url}/jobsvc/v1/events`, { headers: { authorization: `Bearer ${h.apiKey}`, accept: 'application/x-ndjson' } })
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /application\/x-ndjson/)
  const lines = (await res.text())
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
  const last = lines.pop()
  t.same(
    lines.map((e) => e.id),
    all.events.map((e) => e.id),
    'the same events as the pages',
  )
  t.same(last, { next_cursor: all.cursor, has_more: false })
})

t.test('server-sent events: live, and a resume from Last-Event-ID', async (t) => {
  const start = (await readAll('')).cursor
  const open = async (lastEventId: string) => {
    const controller = new AbortController()
    const res = await fetch(`${h.url}/jobsvc/v1/events?types=job_created`, {
      headers: { authorization: `Bearer ${h.apiKey}`, accept: 'text/event-stream', 'last-event-id': lastEventId },
      signal: controller.signal,
    })
    t.match(res.headers.get('content-type'), /text\/event-stream/)
    const reader = res.body!.getReader()
    let buffer = ''
    const frames: Array<{ id: string; data: FeedEvent }> = []
    const next = async (count: number) => {
      while (frames.length < count) {
        const { value, done } = await reader.read()
        if (done) throw new Error('the stream ended')
        buffer += new TextDecoder().decode(value)
        let cut
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, cut)
          buffer = buffer.slice(cut + 2)
          const id = /^id: (.*)$/m.exec(frame)?.[1]
          const data = /^data: (.*)$/m.exec(frame)?.[1]
          if (id !== undefined && data !== undefined) frames.push({ id, data: JSON.parse(data) })
        }
      }
      return frames.slice(0, count)
    }
    return { next, close: () => controller.abort() }
  }
  const first = await open(start)
  const jobs = await createJobs(h.apiKey, 3, 'sse')
  const got = await first.next(3)
  t.same(
    got.map((f) => f.data.aggregate_id),
    jobs,
    'appended events arrive live',
  )
  t.ok(
    got.every((f) => f.id === f.data.cursor),
    '`id:` is the cursor',
  )
  first.close()

  const more = await createJobs(h.apiKey, 2, 'sse')
  const resumed = await open(got[1]!.id)
  const again = await resumed.next(3)
  t.same(
    again.map((f) => f.data.aggregate_id),
    [jobs[2], ...more],
    'resumes after the Last-Event-ID, nothing lost, nothing twice',
  )
  resumed.close()
})

t.test('no digest, sealed secret or token in any event', async (t) => {
  const created = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/feed-hook', events: ['job.created'] })
  t.equal(created.status, 201)
  const rotated = await h.request('POST', `/jobsvc/v1/webhooks/${created.body.id}/rotate-secret`)
  const { commandProject } = await import('../../services/use-cases/projects/project-service.ts')
  const { generateApiKey, apiKeyPrefix } = await import('../../services/use-cases/projects/api-keys.ts')
  const { createHash } = await import('node:crypto')
  const newKey = generateApiKey('test')
  const keyHash = createHash('sha256').update(newKey).digest('hex')
  await commandProject(h.runtime, h.projectId, {
    type: 'invite_member',
    data: {
      actor_user_id: null,
      invite_id: 'inv_feedtest',
      email: 'invitee@example.com',
      role: 'member',
      token_hash: 'f'.repeat(64),
      expires_at: new Date(Date.now() + day).toISOString(),
    },
    meta: { now: new Date().toISOString() },
  })
  await commandProject(h.runtime, h.projectId, {
    type: 'rotate_api_key',
    data: { actor_user_id: null, key: { prefix: apiKeyPrefix(newKey), key_hash: keyHash } },
    meta: { now: new Date().toISOString() },
  })
  const { events } = await readAll('', newKey)
  const text = JSON.stringify(events)
  const types = new Set(events.map((e) => e.type))
  for (const type of ['webhook_created', 'webhook_secret_rotated', 'api_key_issued', 'api_key_rotated', 'member_invited'])
    t.ok(types.has(type), `the scan covers ${type}`)
  t.notMatch(text, /"(key_hash|token_hash|password_hash|code_hash|code_hashes|secret_encrypted|previous_secret_encrypted)"/, 'no secret field')
  t.notOk(text.includes(keyHash), "no key's digest")
  t.notOk(text.includes('f'.repeat(64)), "no invitation token's digest")
  t.notOk(text.includes(newKey) || text.includes(h.apiKey), 'no key')
  for (const secret of [created.body.secret, rotated.body?.secret].filter((s) => typeof s === 'string'))
    t.notOk(text.includes(secret), 'no webhook secret')
})

t.test('a cursor from before what retention removed answers 410 with the oldest valid cursor', async (t) => {
  const p = await h.newProject()
  const api = (path: string, body?: unknown) => httpRequest(h.url, p.apiKey, body === undefined ? 'GET' : 'POST', path, body)
  const firstPage = await api('/jobsvc/v1/events?limit=1')
  const early = firstPage.body.next_cursor as string
  const jobs = await createJobs(p.apiKey, 3, 'old')
  await runJobs(p.apiKey, 'old', 3)
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${p.projectId} AND state = 'succeeded'`)[0]!.n === 3,
  )
  const beforeKeep = await readAll('', p.apiKey)
  const kept = await createJobs(p.apiKey, 1, 'kept')

  const realNow = h.runtime.now
  t.teardown(() => void (h.runtime.now = realNow))
  h.runtime.now = () => new Date(Date.now() + 31 * day)
  t.ok((await purgeExpiredJobs(h.runtime)) >= 3)
  h.runtime.now = realNow

  const expired = await api(`/jobsvc/v1/events?after=${encodeURIComponent(early)}`)
  t.equal(expired.status, 410)
  t.equal(expired.body.error.code, 'cursor_expired')
  t.type(expired.body.error.oldest_cursor, 'string')
  t.ok(expired.body.error.message.includes(expired.body.error.oldest_cursor), 'the message says it too')
  const resumed = await readAll(`&after=${encodeURIComponent(expired.body.error.oldest_cursor)}`, p.apiKey)
  t.ok(
    resumed.events.some((e) => e.aggregate_id === kept[0]),
    'the oldest valid cursor reads what retention kept',
  )
  t.notOk(
    resumed.events.some((e) => jobs.includes(e.aggregate_id)),
    'and none of what it removed',
  )
  t.ok(
    resumed.events.some((e) => e.type === 'history_expired'),
    'the feed says what retention removed',
  )
  const later = await api(`/jobsvc/v1/events?after=${encodeURIComponent(beforeKeep.cursor)}`)
  t.equal(later.status, 200, 'a cursor after the removed events still reads')
})

// Last: it stops the API role.
t.test('stopping the API answers a pending long poll with what it has', async (t) => {
  const end = (await readAll('')).cursor
  // fetch keeps its connection alive, as SDK clients do.
  const waiting = h.request('GET', `/jobsvc/v1/events?wait=25&after=${encodeURIComponent(end)}`)
  await new Promise((r) => setTimeout(r, 300))
  const stopped = await answerWithin(h.stopRole('api'), 30_000)
  t.not(stopped, 'pending', 'the role stopped')
  const answer = await waiting
  t.equal(answer.status, 200, 'the long poll answered with what it had')
  t.same(answer.body.data, [])
})
