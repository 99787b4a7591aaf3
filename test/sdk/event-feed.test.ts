import { CursorExpiredError, JobsvcClient, JobsvcError, type FeedEvent } from '@jobsvc/sdk'
import t from 'tap'
import { purgeExpiredJobs } from '../../services/roles/scheduler/retention.ts'
import { eventually, startHarness, withClockShifted } from '../support/harness.ts'

// The SDK's event feed calls, client.events() and client.eventsPage(), against a real service: a
// follower across pages and past the log's end, its retries, and retention's 410.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })
const day = 24 * 60 * 60 * 1000

interface FeedExchange {
  after: string | null
  wait: string | null
  answer: { next_cursor: string; has_more: boolean; count: number } | null
}

/** A client whose feed requests are recorded with their answers, and told apart from those still waiting. */
function recordingClient(apiKey = h.apiKey): { client: JobsvcClient; exchanges: FeedExchange[] } {
  const exchanges: FeedExchange[] = []
  const recording = new JobsvcClient({
    baseUrl: h.url,
    apiKey,
    fetch: async (input, init) => {
      const url = new URL(String(input))
      if (url.pathname !== '/jobsvc/v1/events') return fetch(input, init)
      const exchange: FeedExchange = { after: url.searchParams.get('after'), wait: url.searchParams.get('wait'), answer: null }
      exchanges.push(exchange)
      const res = await fetch(input, init)
      const body = await res.clone().json()
      exchange.answer = { next_cursor: body.next_cursor, has_more: body.has_more, count: body.data?.length ?? 0 }
      return res
    },
  })
  return { client: recording, exchanges }
}

async function thrown(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (err) {
    return err
  }
  throw new Error('expected an error')
}

async function drain(events: AsyncIterable<FeedEvent>, count: number): Promise<FeedEvent[]> {
  const seen: FeedEvent[] = []
  for await (const event of events) {
    seen.push(event)
    if (seen.length === count) break
  }
  return seen
}

t.test('events() follows the feed across pages and past its end, each event once and in order', async (t) => {
  const jobType = 'sdk-feed-follow'
  const create = async () => (await client.jobs.create({ job_type: jobType, payload: {} })).id
  const created = [await create(), await create(), await create(), await create()]
  const { client: follower, exchanges } = recordingClient()
  const stop = new AbortController()
  t.teardown(() => stop.abort())
  const seen: FeedEvent[] = []
  const following = (async () => {
    for await (const event of follower.events({ jobType, types: ['job_created'], limit: 3, signal: stop.signal })) {
      seen.push(event)
      // Jobs created while the follower is between pages: the next pages must hold them.
      if (created.length < 10) created.push(await create())
    }
  })()

  await eventually(
    async () => seen.length === 10 && exchanges.at(-1)?.answer === null,
    30_000,
    'the follower to read ten events and wait in a long poll at the end',
  )
  created.push(await create())
  await eventually(async () => seen.length === 11, 30_000, 'the follower to pick up the job created after it reached the end')
  stop.abort()
  await following
  t.pass('aborting the signal ends the iteration without an error')

  t.strictSame(
    seen.map((e) => e.aggregate_id),
    created,
    'every job_created, in the order of creation, none twice',
  )
  t.ok(
    seen.every((e) => e.type === 'job_created'),
    'types is sent',
  )
  t.equal(new Set(seen.map((e) => e.id)).size, seen.length, 'no event twice')
  const pages = exchanges.filter((x) => (x.answer?.count ?? 0) > 0)
  t.ok(pages.length >= 4, `ten events at three per page are four pages or more (${pages.length})`)
  t.equal(exchanges[0]!.after, null, 'the first page starts at the oldest event')
  for (let i = 1; i < exchanges.length; i++) {
    if (exchanges[i - 1]!.answer === null) continue
    t.equal(exchanges[i]!.after, exchanges[i - 1]!.answer!.next_cursor, `page ${i} resumes at the previous next_cursor`)
  }
  t.ok(
    exchanges.every((x) => x.wait === '20'),
    'each page is a long poll',
  )
})

t.test('events() resumes from after, and waits out a 503, a 429 and a lost connection', async (t) => {
  const jobType = 'sdk-feed-faults'
  const first = await client.jobs.create({ job_type: jobType, payload: {} })
  const second = await client.jobs.create({ job_type: jobType, payload: {} })
  const [firstCreated] = await drain(client.events({ jobType, types: ['job_created'] }), 1)
  t.equal(firstCreated!.aggregate_id, first.id)

  const faults = ['503', '429', 'network']
  const requests: string[] = []
  const flaky = new JobsvcClient({
    baseUrl: h.url,
    apiKey: h.apiKey,
    maxRetries: 0,
    retryBaseMs: 1,
    fetch: async (input, init) => {
      const fault = faults.shift()
      requests.push(fault ?? 'pass')
      const headers = { 'content-type': 'application/json', 'retry-after': '0' }
      if (fault === '503')
        return new Response(JSON.stringify({ error: { code: 'service_unavailable', message: 'restarting' } }), { status: 503, headers })
      if (fault === '429') return new Response(JSON.stringify({ error: { code: 'rate_limit_exceeded', message: 'busy' } }), { status: 429, headers })
      if (fault === 'network') throw new TypeError('fetch failed')
      return fetch(input, init)
    },
  })
  const [next] = await drain(flaky.events({ after: firstCreated!.cursor, jobType, types: ['job_created'] }), 1)
  t.equal(next!.aggregate_id, second.id, 'the event after the cursor, once the faults passed')
  t.strictSame(requests, ['503', '429', 'network', 'pass'])

  const invalid = await thrown(drain(client.events({ after: 'not-a-cursor' }), 1))
  t.match(invalid, { name: 'JobsvcError', code: 'invalid_cursor', status: 400 }, 'an error that cannot pass ends the iteration')
})

t.test('eventsPage(): one page, the options as the query', async (t) => {
  const jobType = 'sdk-feed-page'
  const job = await client.jobs.create({ job_type: jobType, queue: 'sdk-feed-page', payload: { n: 1 } })
  await client.jobs.cancel(job.id)

  const page = await client.eventsPage({ jobId: job.id })
  t.strictSame(
    page.data.map((e) => e.type),
    ['job_created', 'job_cancelled'],
  )
  t.match(page.data[0], { aggregate: 'job', aggregate_id: job.id, project_id: h.projectId, data: { payload: { n: 1 } } })
  t.equal(page.hasMore, false)
  t.type(page.nextCursor, 'string')

  const one = await client.eventsPage({ queue: 'sdk-feed-page', limit: 1 })
  t.equal(one.data.length, 1)
  t.equal(one.hasMore, true, 'limit is sent')
  const rest = await client.eventsPage({ queue: 'sdk-feed-page', after: one.nextCursor })
  t.strictSame(
    rest.data.map((e) => e.type),
    ['job_cancelled'],
    'after resumes at nextCursor',
  )
  const cancelled = await client.eventsPage({ jobType, types: ['job_cancelled'], fromTime: new Date(Date.now() - 60_000) })
  t.strictSame(
    cancelled.data.map((e) => e.aggregate_id),
    [job.id],
    'types, jobType and a Date as fromTime',
  )
  const empty = await client.eventsPage({ after: page.nextCursor, jobId: job.id, waitSeconds: 0.2 })
  t.strictSame(empty.data, [], 'a short long poll answers an empty page at the end')
  t.equal(empty.hasMore, false)

  await t.rejects(client.eventsPage({ types: [] }), TypeError, 'an empty types list is refused, not read as every type')
  await t.rejects(drain(client.events({ types: [] }), 1), TypeError)
  t.match(await thrown(client.eventsPage({ limit: 5000 })), { code: 'invalid_limit', status: 400 })
})

t.test('a cursor from before what retention removed throws CursorExpiredError with oldestCursor', async (t) => {
  const p = await h.newProject()
  const own = new JobsvcClient({ baseUrl: h.url, apiKey: p.apiKey })
  const early = (await own.eventsPage({ limit: 1 })).nextCursor
  for (let i = 0; i < 2; i++) await own.jobs.create({ job_type: 'sdk-feed-old', queue: 'sdk-feed-old', payload: {} })
  // A poll answers as soon as one job is ready, so the second may take another.
  const claimed: Array<{ id: string }> = []
  for (let polls = 0; polls < 10 && claimed.length < 2; polls++) {
    const { jobs } = await own.workers.poll({ worker_id: 'wrk_sdk_feed', queues: ['sdk-feed-old'], capacity: 2 - claimed.length, wait_seconds: 5 })
    claimed.push(...jobs)
  }
  t.equal(claimed.length, 2)
  await own.workers.ackBatch(claimed.map((j) => ({ job_id: j.id, worker_id: 'wrk_sdk_feed', status: 'succeeded' as const })))
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${p.projectId} AND state = 'succeeded'`)[0]!.n === 2,
    15_000,
    'the read model to hold both jobs as succeeded',
  )
  const kept = await own.jobs.create({ job_type: 'sdk-feed-kept', payload: {} })
  // The free plan keeps ended jobs 30 days: a month later, retention removes them.
  t.ok((await withClockShifted(h.runtime, 31 * day, () => purgeExpiredJobs(h.runtime))) >= 2)

  const expired = await thrown(own.eventsPage({ after: early }))
  t.ok(expired instanceof CursorExpiredError, 'eventsPage throws CursorExpiredError')
  t.ok(expired instanceof JobsvcError, 'a JobsvcError, so code-based handling still works')
  const { oldestCursor } = expired as CursorExpiredError
  t.match(expired, { name: 'CursorExpiredError', code: 'cursor_expired', status: 410 })
  t.type(oldestCursor, 'string')

  const followed = await thrown(drain(own.events({ after: early }), 1))
  t.ok(followed instanceof CursorExpiredError, 'the follower throws it at once rather than retrying')
  t.equal((followed as CursorExpiredError).oldestCursor, oldestCursor)

  const resumed = await own.eventsPage({ after: oldestCursor, limit: 1000 })
  t.ok(
    resumed.data.some((e) => e.aggregate_id === kept.id),
    'oldestCursor reads on from what retention kept',
  )
})
