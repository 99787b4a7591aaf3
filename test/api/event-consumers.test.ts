import t from 'tap'
import { purgeExpiredJobs } from '../../services/roles/scheduler/retention.ts'
import { eventually, httpRequest, installEnv, spawnService, startHarness, withClockShifted, type HttpResponse } from '../support/harness.ts'

/**
 * Named consumers of the event feed (issue 25, item 2), against the real NATS and Postgres:
 * positions kept by the service, ranges handed to one poll at a time, leases that send an
 * uncommitted range out again, seek, lag, the plan's cap, and a consumer shared by two pollers
 * in two API processes, one of them restarted.
 */

const day = 24 * 60 * 60 * 1000

interface FeedEvent {
  id: string
  cursor: string
  type: string
  aggregate_id: string
}

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })

async function createJobs(url: string, apiKey: string, n: number, queue = 'cons'): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < n; i++)
    ids.push((await httpRequest(url, apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'cons.job', queue, payload: { i } })).body.id)
  return ids
}

const api = (method: string, path: string, body?: unknown, apiKey = h.apiKey, url = h.url) => httpRequest(url, apiKey, method, path, body)

t.test('create, read, list, delete; names, filters and the plan cap are checked', async (t) => {
  const created = await api('POST', '/jobsvc/v1/event-consumers', { name: 'audit-sink', types: ['job_created'], start: 'earliest' })
  t.equal(created.status, 201)
  t.match(created.body, {
    name: 'audit-sink',
    types: ['job_created'],
    queue: null,
    job_type: null,
    ack_wait_seconds: 30,
    position: /^c1\./,
    lease_until: null,
    outstanding: 0,
  })
  t.equal((await api('POST', '/jobsvc/v1/event-consumers', { name: 'audit-sink' })).body.error.code, 'event_consumer_exists')
  for (const body of [
    { name: 'bad name' },
    { name: 'x', types: ['job_made'] },
    { name: 'x', start: { from_time: 'yesterday' } },
    { name: 'x', ack_wait_seconds: 1 },
  ]) {
    const res = await api('POST', '/jobsvc/v1/event-consumers', body)
    t.equal(res.status, 400, JSON.stringify(body))
    t.equal(res.body.error.code, 'invalid_request')
  }
  const listed = await eventually(async () => {
    const res = await api('GET', '/jobsvc/v1/event-consumers')
    return res.body.data.length === 1 ? res.body.data : null
  })
  t.equal(listed[0].name, 'audit-sink')
  const read = await api('GET', '/jobsvc/v1/event-consumers/audit-sink')
  t.equal(read.status, 200)
  t.type(read.body.lag_events, 'number')
  t.equal((await api('DELETE', '/jobsvc/v1/event-consumers/audit-sink')).status, 204)
  t.equal((await api('GET', '/jobsvc/v1/event-consumers/audit-sink')).body.error.code, 'event_consumer_not_found')
  t.equal((await api('POST', '/jobsvc/v1/event-consumers/audit-sink/poll', {})).status, 404)

  // The free plan allows three.
  const free = await h.newProject()
  for (const name of ['a', 'b', 'c']) t.equal((await api('POST', '/jobsvc/v1/event-consumers', { name }, free.apiKey)).status, 201, name)
  await eventually(async () => (await api('GET', '/jobsvc/v1/event-consumers', undefined, free.apiKey)).body.data.length === 3)
  const fourth = await api('POST', '/jobsvc/v1/event-consumers', { name: 'd' }, free.apiKey)
  t.equal(fourth.status, 409)
  t.equal(fourth.body.error.code, 'event_consumer_limit_reached')
})

t.test('polls take successive ranges; commits move the position; an uncommitted range comes back after its lease', async (t) => {
  const p = await h.newProject()
  const consumer = await api(
    'POST',
    '/jobsvc/v1/event-consumers',
    { name: 'c1', types: ['job_created'], ack_wait_seconds: 5, start: 'latest' },
    p.apiKey,
  )
  t.equal(consumer.status, 201)
  const jobs = await createJobs(h.url, p.apiKey, 10)
  const first = await api('POST', '/jobsvc/v1/event-consumers/c1/poll', { limit: 4 }, p.apiKey)
  t.same(
    first.body.data.map((e: FeedEvent) => e.aggregate_id),
    jobs.slice(0, 4),
  )
  t.equal(first.body.has_more, true)
  const second = await api('POST', '/jobsvc/v1/event-consumers/c1/poll', { limit: 4 }, p.apiKey)
  t.same(
    second.body.data.map((e: FeedEvent) => e.aggregate_id),
    jobs.slice(4, 8),
    'the next poll takes the next range, not the first again',
  )
  const before = (await api('GET', '/jobsvc/v1/event-consumers/c1', undefined, p.apiKey)).body.position
  const secondFirst = await api('POST', '/jobsvc/v1/event-consumers/c1/commit', { cursor: second.body.ack_cursor }, p.apiKey)
  t.equal(secondFirst.status, 200)
  t.equal(secondFirst.body.position, before, "a later range's commit does not cover an earlier range still out")
  t.equal(secondFirst.body.outstanding, 1)
  const firstToo = await api('POST', '/jobsvc/v1/event-consumers/c1/commit', { cursor: first.body.ack_cursor }, p.apiKey)
  t.equal(firstToo.body.position, second.body.ack_cursor, 'once the gap is filled, the position passes both')
  t.equal(firstToo.body.lease_until, null, 'nothing is out')
  const stranger = await api(
    'POST',
    '/jobsvc/v1/event-consumers/c1/commit',
    { cursor: (await api('GET', '/jobsvc/v1/events?limit=1000', undefined, p.apiKey)).body.next_cursor },
    p.apiKey,
  )
  t.equal(stranger.body.error?.code, 'invalid_state', "a cursor that is no poll's ack_cursor")

  const third = await api('POST', '/jobsvc/v1/event-consumers/c1/poll', { limit: 4 }, p.apiKey)
  t.same(
    third.body.data.map((e: FeedEvent) => e.aggregate_id),
    jobs.slice(8),
  )
  // Not committed: once its lease ends, the next poll gets the same range again.
  const again = await withClockShifted(h.runtime, 10_000, () => api('POST', '/jobsvc/v1/event-consumers/c1/poll', { limit: 4 }, p.apiKey))
  t.same(
    again.body.data.map((e: FeedEvent) => e.id),
    third.body.data.map((e: FeedEvent) => e.id),
    'at least once: redelivered after the lease',
  )
  const empty = await api('POST', '/jobsvc/v1/event-consumers/c1/poll', { limit: 4 }, p.apiKey)
  t.same(empty.body.data, [], 'while the new lease holds, nothing else is out')

  // Long poll: waits for the next event.
  await api('POST', '/jobsvc/v1/event-consumers/c1/commit', { cursor: again.body.ack_cursor }, p.apiKey)
  const waiting = api('POST', '/jobsvc/v1/event-consumers/c1/poll', { limit: 4, wait: 10 }, p.apiKey)
  await new Promise((r) => setTimeout(r, 300))
  const [late] = await createJobs(h.url, p.apiKey, 1)
  t.same(
    (await waiting).body.data.map((e: FeedEvent) => e.aggregate_id),
    [late],
  )

  const read = await api('GET', '/jobsvc/v1/event-consumers/c1', undefined, p.apiKey)
  t.ok(read.body.lag_events >= 1, 'the uncommitted event counts in the lag')
  t.ok(read.body.lag_seconds >= 0)
})

t.test('seek moves the consumer back or forward', async (t) => {
  const p = await h.newProject()
  await api('POST', '/jobsvc/v1/event-consumers', { name: 's', types: ['job_created'], start: 'earliest' }, p.apiKey)
  await new Promise((r) => setTimeout(r, 20))
  const middle = new Date().toISOString()
  const jobs = await createJobs(h.url, p.apiKey, 4)
  const all = await api('POST', '/jobsvc/v1/event-consumers/s/poll', { limit: 10 }, p.apiKey)
  t.same(
    all.body.data.map((e: FeedEvent) => e.aggregate_id),
    jobs,
  )
  const back = await api('POST', '/jobsvc/v1/event-consumers/s/seek', { after: all.body.data[1].cursor }, p.apiKey)
  t.equal(back.status, 200)
  t.same(
    (await api('POST', '/jobsvc/v1/event-consumers/s/poll', { limit: 10 }, p.apiKey)).body.data.map((e: FeedEvent) => e.aggregate_id),
    jobs.slice(2),
  )
  await api('POST', '/jobsvc/v1/event-consumers/s/seek', { from_time: middle }, p.apiKey)
  t.same(
    (await api('POST', '/jobsvc/v1/event-consumers/s/poll', { limit: 10 }, p.apiKey)).body.data.map((e: FeedEvent) => e.aggregate_id),
    jobs,
    'from_time: from the first event at or after it',
  )
  t.equal((await api('POST', '/jobsvc/v1/event-consumers/s/seek', { after: 'nonsense' }, p.apiKey)).body.error.code, 'invalid_cursor')
})

t.test('a position retention has overtaken answers 410, never a silent jump', async (t) => {
  const p = await h.newProject()
  await api('POST', '/jobsvc/v1/event-consumers', { name: 'old', start: 'earliest' }, p.apiKey)
  const jobs = await createJobs(h.url, p.apiKey, 2, 'old')
  for (const id of jobs) await api('POST', `/jobsvc/v1/jobs/${id}/cancel`, undefined, p.apiKey)
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${p.projectId} AND state = 'cancelled'`)[0]!.n === 2,
  )
  const realNow = h.runtime.now
  h.runtime.now = () => new Date(Date.now() + 31 * day)
  try {
    t.ok((await purgeExpiredJobs(h.runtime)) >= 2)
  } finally {
    h.runtime.now = realNow
  }
  const polled = await api('POST', '/jobsvc/v1/event-consumers/old/poll', {}, p.apiKey)
  t.equal(polled.status, 410)
  t.equal(polled.body.error.code, 'cursor_expired')
  t.equal((await api('POST', '/jobsvc/v1/event-consumers/old/seek', { after: polled.body.error.oldest_cursor }, p.apiKey)).status, 200)
  t.equal((await api('POST', '/jobsvc/v1/event-consumers/old/poll', {}, p.apiKey)).status, 200, 'polls go on from where the log is whole')
})

t.test('one consumer shared by two pollers in two API processes, one restarted: nothing committed is lost or repeated', async (t) => {
  const p = await h.newProject()
  await api('POST', '/jobsvc/v1/event-consumers', { name: 'shared', types: ['job_created'], start: 'latest' }, p.apiKey)
  let second = await spawnService(installEnv(h.config), ['--role', 'api'])
  t.teardown(() => second.stop())
  const jobs = await createJobs(h.url, p.apiKey, 60, 'shared')
  const committedBatches: string[][] = []

  // The second process takes a range and dies before it commits; it comes back restarted.
  const held = await api('POST', '/jobsvc/v1/event-consumers/shared/poll', { limit: 7 }, p.apiKey, second.url)
  t.equal(held.body.data.length, 7, 'the killed process held a range')
  await second.stop('SIGKILL')
  second = await spawnService(installEnv(h.config), ['--role', 'api'])

  // Both processes poll and commit at once until nothing more is handed out.
  const worker = async (url: string) => {
    for (let idle = 0; idle < 3;) {
      const polled: HttpResponse = await api('POST', '/jobsvc/v1/event-consumers/shared/poll', { limit: 5 }, p.apiKey, url)
      if (polled.status !== 200) throw new Error(`poll answered ${polled.status}: ${JSON.stringify(polled.body)}`)
      const ids = polled.body.data.map((e: FeedEvent) => e.aggregate_id)
      if (ids.length === 0) {
        idle++
        await new Promise((r) => setTimeout(r, 50))
        continue
      }
      idle = 0
      const commit = await api('POST', '/jobsvc/v1/event-consumers/shared/commit', { cursor: polled.body.ack_cursor }, p.apiKey, url)
      if (commit.status === 200) committedBatches.push(ids)
    }
  }
  await Promise.all([worker(h.url), worker(second.url)])
  const before = (await api('GET', '/jobsvc/v1/event-consumers/shared', undefined, p.apiKey)).body
  t.equal(before.outstanding, 1, "only the killed poll's range is still out")
  t.notOk(
    committedBatches.flat().some((id) => held.body.data.some((e: FeedEvent) => e.aggregate_id === id)),
    'nobody else got its events while its lease held',
  )

  // Its lease ends (the clock is moved past it): the range goes, whole, to the next poll.
  await withClockShifted(h.runtime, 40_000, async () => {
    for (;;) {
      const polled = await api('POST', '/jobsvc/v1/event-consumers/shared/poll', { limit: 50 }, p.apiKey)
      const ids = polled.body.data.map((e: FeedEvent) => e.aggregate_id)
      if (ids.length === 0) break
      const commit = await api('POST', '/jobsvc/v1/event-consumers/shared/commit', { cursor: polled.body.ack_cursor }, p.apiKey)
      if (commit.status === 200) committedBatches.push(ids)
    }
  })
  const handled = committedBatches.flat()
  t.same([...handled].sort(), [...jobs].sort(), 'every event handled and committed once')
  t.equal(new Set(handled).size, handled.length, 'no event in two committed ranges')
  const after = (await api('GET', '/jobsvc/v1/event-consumers/shared', undefined, p.apiKey)).body
  t.equal(after.outstanding, 0)
  t.equal(after.lag_events, 0, 'the position is past every event')
})
