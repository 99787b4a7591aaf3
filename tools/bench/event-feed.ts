import http from 'node:http'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import type { Config } from '../../services/infrastructure/config.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { Client } from './http-client.ts'
import { percentileMs } from './percentiles.ts'
import { seedEndedJobs } from './retention.ts'

/**
 * `npm run bench -- --spawn --feed-jobs N`: the tenants' event feed (`GET /jobsvc/v1/events`,
 * issue 25's targets). N jobs are run to their end through JobService (three events each), half
 * of them in the bench's project and half spread over ten other projects, so the log holds
 * other projects' events between the reader's. Then, against the spawned service:
 * - one reader takes the project's whole feed as NDJSON: events per second (target ≥ 20,000);
 * - pages of 100 events, walked from the start by their cursors, one request at a time: the
 *   answer time (target p50 ≤ 20 ms); then pages at cursors taken earlier, in a shuffled order,
 *   where no reader is kept; the same for one of the ten others (a twentieth of the log, so its
 *   pages skim more of the log before their filtered consumer is there);
 * - a live SSE tail of `job_created` while jobs are created at a steady 500 per second over HTTP:
 *   how long after the event's decision it is on the stream (target p50 ≤ 50 ms).
 */

const otherProjects = 10
const pageSamples = 300
const coldSamples = 50
const tailRate = 500
const tailSeconds = 10

export interface FeedBenchResult {
  feed_jobs: number
  feed_project_events: number
  feed_ndjson_events_per_s: number[]
  feed_page_p50_ms: number | null
  feed_page_p99_ms: number | null
  feed_cold_page_p50_ms: number | null
  feed_cold_page_p99_ms: number | null
  feed_sparse_page_p50_ms: number | null
  feed_sparse_cold_page_p50_ms: number | null
  feed_sparse_cold_page_p99_ms: number | null
  feed_tail_p50_ms: number | null
  feed_tail_p99_ms: number | null
  feed_tail_received: number
  feed_tail_sent: number
}

export async function benchEventFeed(options: {
  config: Readonly<Config>
  baseUrl: string
  project: { project_id: string; api_key: string }
  jobs: number
  signal: AbortSignal
  log: (line: string) => void
}): Promise<FeedBenchResult> {
  const { config, baseUrl, project, jobs, signal, log } = options
  const others: { id: string; apiKey: string }[] = []
  const runtime = await openRuntime(config, pino({ level: 'warn' }), 'jobsvc-bench-feed', { connections: 4, meteringConnections: 1 })
  try {
    for (let i = 0; i < otherProjects; i++) {
      const created = await createProject(runtime, { name: `feed-other-${i}`, plan: 'business', ownerEmail: null, keyEnvironment: 'test' })
      others.push({ id: created.project.id, apiKey: created.apiKey })
    }
    // Every other job is the bench project's: the rest are spread over the ten others.
    const projectIds = others.flatMap((other) => [project.project_id, other.id])
    const started = performance.now()
    const seeded = await seedEndedJobs(runtime, { projectIds, count: jobs, endedAt: new Date() })
    log(`bench: ${jobs} jobs run to their end in 11 projects (${seeded.messages} messages) in ${((performance.now() - started) / 1000).toFixed(1)} s`)
  } finally {
    await runtime.close()
  }
  signal.throwIfAborted()

  const ndjson: number[] = []
  let projectEvents = 0
  for (let run = 0; run < 3; run++) {
    const t0 = performance.now()
    projectEvents = await countNdjson(baseUrl, project.api_key)
    ndjson.push(Math.round(projectEvents / ((performance.now() - t0) / 1000)))
  }
  log(`bench: NDJSON reader, ${projectEvents} events of the project: ${ndjson.join(', ')} events/s`)

  const dense = await pageTimes(baseUrl, project.api_key)
  log(
    `bench: pages of 100 walked by cursor: p50 ${percentileMs(dense.walked, 50)} ms, p99 ${percentileMs(dense.walked, 99)} ms (${dense.walked.length} pages)`,
  )
  log(
    `bench: pages of 100 at a cold cursor: p50 ${percentileMs(dense.cold, 50)} ms, p99 ${percentileMs(dense.cold, 99)} ms (${dense.cold.length} pages)`,
  )
  // One of the ten others: a twentieth of the log, so a page of it skims some 2,000 messages.
  const sparse = await pageTimes(baseUrl, others[0]!.apiKey)
  log(
    `bench: a project with 1/20 of the log: pages walked p50 ${percentileMs(sparse.walked, 50)} ms, p99 ${percentileMs(sparse.walked, 99)} ms; at a cold cursor p50 ${percentileMs(sparse.cold, 50)} ms, p99 ${percentileMs(sparse.cold, 99)} ms (${sparse.walked.length}/${sparse.cold.length} pages)`,
  )

  const tail = await liveTail(baseUrl, project.api_key, signal)
  log(
    `bench: live tail at ${tailRate} jobs/s: ${tail.received}/${tail.sent} job_created events on the stream, p50 ${percentileMs(tail.lags, 50)} ms, p99 ${percentileMs(tail.lags, 99)} ms after their decision`,
  )
  return {
    feed_jobs: jobs,
    feed_project_events: projectEvents,
    feed_ndjson_events_per_s: ndjson,
    feed_page_p50_ms: percentileMs(dense.walked, 50),
    feed_page_p99_ms: percentileMs(dense.walked, 99),
    feed_cold_page_p50_ms: percentileMs(dense.cold, 50),
    feed_cold_page_p99_ms: percentileMs(dense.cold, 99),
    feed_sparse_page_p50_ms: percentileMs(sparse.walked, 50),
    feed_sparse_cold_page_p50_ms: percentileMs(sparse.cold, 50),
    feed_sparse_cold_page_p99_ms: percentileMs(sparse.cold, 99),
    feed_tail_p50_ms: percentileMs(tail.lags, 50),
    feed_tail_p99_ms: percentileMs(tail.lags, 99),
    feed_tail_received: tail.received,
    feed_tail_sent: tail.sent,
  }
}

/**
 * Pages of 100 of a project's feed walked from the start by their cursors, one request at a time
 * (a reader is kept between them); then pages at cursors taken earlier, in a shuffled order, where
 * no reader is kept.
 */
async function pageTimes(baseUrl: string, apiKey: string): Promise<{ walked: number[]; cold: number[] }> {
  const client = new Client(baseUrl, apiKey, 4)
  const walked: number[] = []
  const cold: number[] = []
  try {
    const page = async (cursor: string, times: number[]) => {
      const t0 = performance.now()
      const reply = await client.request('GET', `/jobsvc/v1/events?limit=100${cursor === '' ? '' : `&after=${encodeURIComponent(cursor)}`}`)
      times.push(performance.now() - t0)
      if (reply.status !== 200) throw new Error(`a page answered ${reply.status}: ${JSON.stringify(reply.body)}`)
      return reply.body as { next_cursor: string; has_more: boolean }
    }
    const seen: string[] = []
    let cursor = ''
    for (let i = 0; i < pageSamples; i++) {
      const answer = await page(cursor, walked)
      cursor = answer.has_more ? answer.next_cursor : ''
      if (cursor !== '') seen.push(cursor)
    }
    const every = Math.max(1, Math.floor(seen.length / coldSamples))
    const shuffled = seen.filter((_, i) => i % every === 0).sort(() => Math.random() - 0.5)
    for (const c of shuffled) await page(c, cold)
  } finally {
    client.close()
  }
  return { walked, cold }
}

/** Reads the project's feed as NDJSON to its end; resolves to the events read. */
function countNdjson(baseUrl: string, apiKey: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${baseUrl}/jobsvc/v1/events`, { headers: { authorization: `Bearer ${apiKey}`, accept: 'application/x-ndjson' } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`the NDJSON feed answered ${res.statusCode}`))
      let lines = 0
      res.on('data', (chunk: Buffer) => {
        for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) lines++
      })
      // The last line says where to resume, not an event.
      res.on('end', () => resolve(lines - 1))
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

/** Opens an SSE tail of `job_created`, creates jobs at a steady rate, and times each event's arrival after its decision. */
async function liveTail(baseUrl: string, apiKey: string, signal: AbortSignal): Promise<{ lags: number[]; received: number; sent: number }> {
  const lags: number[] = []
  let received = 0
  // The tail starts at the feed's current end, as a reader that has caught up stands.
  const pager = new Client(baseUrl, apiKey, 1)
  let end = ''
  try {
    for (;;) {
      const reply = await pager.request(
        'GET',
        `/jobsvc/v1/events?types=job_created&limit=1000${end === '' ? '' : `&after=${encodeURIComponent(end)}`}`,
      )
      if (reply.status !== 200) throw new Error(`a page answered ${reply.status}`)
      end = reply.body.next_cursor
      if (!reply.body.has_more) break
    }
  } finally {
    pager.close()
  }
  const stream = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = http.get(
      `${baseUrl}/jobsvc/v1/events?types=job_created&after=${encodeURIComponent(end)}`,
      { headers: { authorization: `Bearer ${apiKey}`, accept: 'text/event-stream' } },
      resolve,
    )
    req.on('error', reject)
  })
  let buffer = ''
  stream.on('data', (chunk: Buffer) => {
    const at = Date.now()
    buffer += chunk.toString('utf8')
    let cut
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      const data = /^data: (.*)$/m.exec(frame)?.[1]
      if (data === undefined) continue
      const event = JSON.parse(data) as { occurred_at: string }
      lags.push(at - Date.parse(event.occurred_at))
      received++
    }
  })
  const client = new Client(baseUrl, apiKey, 64)
  let sent = 0
  try {
    const start = performance.now()
    const inFlight = new Set<Promise<unknown>>()
    for (let i = 0; i < tailRate * tailSeconds; i++) {
      signal.throwIfAborted()
      const due = start + (i * 1000) / tailRate
      const wait = due - performance.now()
      if (wait > 0) await sleep(wait)
      const p = client.request('POST', '/jobsvc/v1/jobs', { job_type: 'feed.tail', queue: 'feed-tail', payload: { i } }).then((r) => {
        if (r.status === 201) sent++
      })
      inFlight.add(p)
      void p.finally(() => inFlight.delete(p))
    }
    await Promise.all(inFlight)
    const deadline = performance.now() + 5_000
    while (received < sent && performance.now() < deadline) await sleep(50)
  } finally {
    client.close()
    stream.destroy()
  }
  return { lags, received, sent }
}
