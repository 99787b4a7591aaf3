import { performance } from 'node:perf_hooks'
import type { Job, JobEvent } from '../../domain/job.ts'
import { applyMetricDeltas, MetricDeltas } from '../../projections/job-metrics.ts'
import { openSql } from '../../projections/database.ts'
import type { StoredEvent } from '../../streams/event-store.ts'
import { percentile } from './percentiles.ts'

/**
 * `npm run bench -- --spawn --metrics-jobs N`: the metrics routes' latency with N jobs in the
 * read model. Creating a million jobs through the service would take the better part of an hour
 * on this machine, so the jobs are seeded straight into the spawned service's database: the rows
 * by one INSERT ... SELECT, and the rollups by the projector's own code (MetricDeltas) fed with
 * the events each row implies (created, claimed, then succeeded, dead-lettered or cancelled).
 * The routes then read exactly what a live projector would have left.
 */

const queues = 10
const jobTypes = 50
const dayMs = 86_400_000

/** Seeds `count` jobs over the 30 days before `now`: 80% succeeded, 5% dead, 3% cancelled, 2% processing, 10% pending. */
async function seed(databaseUrl: string, projectId: string, count: number, now: Date, log: (line: string) => void): Promise<void> {
  // Two connections: the cursor holds one while each batch's rollups commit on the other.
  const sql = openSql(databaseUrl, { max: 2, applicationName: 'jobsvc-bench-metrics-seed' })
  try {
    const started = performance.now()
    await sql`
      INSERT INTO jobs (id, project_id, state, job_type, queue, payload, created_at, run_at, started_at, completed_at, attempt, max_attempts,
        timeout_seconds, progress, duration_ms, error, tags, parent_job_id, waiting_for_parent, worker_id, idempotency_key, updated_at, last_seq)
      SELECT 'job_metrics_' || lpad(i::text, 9, '0'), ${projectId}, s.state,
        'type-' || lpad((i::bigint * 7919 % ${jobTypes})::text, 2, '0'), 'queue-' || (i::bigint * 31 % ${queues}),
        '{}'::json, c.at, NULL,
        CASE WHEN s.state IN ('succeeded', 'dead_letter', 'processing') THEN c.at + interval '50 ms' END,
        CASE WHEN s.state IN ('succeeded', 'dead_letter') THEN c.at + interval '50 ms' + d.ms * interval '1 ms' END,
        CASE WHEN s.state IN ('succeeded', 'dead_letter', 'processing') THEN 1 ELSE 0 END, 1, 300, NULL,
        CASE WHEN s.state IN ('succeeded', 'dead_letter') THEN d.ms END,
        CASE WHEN s.state = 'dead_letter' THEN '{"type":"Error","message":"seeded"}'::json END,
        NULL, NULL, false,
        CASE WHEN s.state IN ('succeeded', 'dead_letter', 'processing') THEN 'bench-worker' END, NULL,
        c.at + interval '50 ms' + d.ms * interval '1 ms', 0
      FROM generate_series(1, ${count}::int) AS i,
        LATERAL (SELECT ${now}::timestamptz - (${count}::int - i) * (${30 * dayMs}::float8 / ${count}::int) * interval '1 ms' AS at) c,
        LATERAL (SELECT (5 + (i * 2654435761::bigint % 4000) * (i % 3 + 1)) AS ms) d,
        LATERAL (SELECT CASE
          WHEN i % 100 < 80 THEN 'succeeded' WHEN i % 100 < 85 THEN 'dead_letter' WHEN i % 100 < 88 THEN 'cancelled'
          WHEN i % 100 < 90 THEN 'processing' ELSE 'pending' END AS state) s`
    await sql`ANALYZE jobs`
    log(`bench: ${count} job rows seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`)

    const rollupStarted = performance.now()
    const rows = sql<SeededRow[]>`
      SELECT project_id, queue, job_type, state, created_at, started_at, completed_at, updated_at, duration_ms FROM jobs WHERE project_id = ${projectId}`.cursor(
      5000,
    )
    let applied = 0
    for await (const batch of rows) {
      const deltas = new MetricDeltas()
      for (const r of batch) {
        for (const e of impliedEvents(r)) deltas.add(r, e)
      }
      await sql.begin((tx) => applyMetricDeltas(tx, deltas))
      applied += batch.length
    }
    log(`bench: rollups of ${applied} jobs written by the projector's code in ${((performance.now() - rollupStarted) / 1000).toFixed(1)} s`)
    await sql`ANALYZE`
  } finally {
    await sql.end()
  }
}

interface SeededRow {
  project_id: string
  queue: string
  job_type: string
  state: Job['state']
  created_at: Date
  started_at: Date | null
  completed_at: Date | null
  updated_at: Date
  duration_ms: number | null
}

/** The events a seeded row stands for, each at the time the row says it happened. */
function impliedEvents(r: SeededRow): StoredEvent<JobEvent>[] {
  const stored = (e: JobEvent, at: Date): StoredEvent<JobEvent> => ({ ...e, id: 'evt_seed', time: at.toISOString() })
  const events = [stored({ type: 'job_created', data: { state: 'pending' } } as JobEvent, r.created_at)]
  if (r.started_at !== null)
    events.push(
      stored({ type: 'job_claimed', data: { worker_id: 'bench-worker', attempt: 1, started_at: r.started_at.toISOString() } }, r.started_at),
    )
  if (r.state === 'succeeded') {
    events.push(
      stored(
        {
          type: 'job_succeeded',
          data: { worker_id: 'bench-worker', attempt: 1, duration_ms: r.duration_ms!, completed_at: r.completed_at!.toISOString() },
        },
        r.completed_at!,
      ),
    )
  } else if (r.state === 'dead_letter') {
    events.push(
      stored(
        {
          type: 'job_dead_lettered',
          data: {
            worker_id: 'bench-worker',
            attempt: 1,
            error: { type: 'Error', message: 'seeded', stack_trace: '' },
            duration_ms: r.duration_ms!,
            completed_at: r.completed_at!.toISOString(),
            reaped: false,
          },
        },
        r.completed_at!,
      ),
    )
  } else if (r.state === 'cancelled') {
    events.push(
      stored(
        { type: 'job_cancelled', data: { reason: 'requested', previous_state: 'pending', cancelled_at: r.updated_at.toISOString() } },
        r.updated_at,
      ),
    )
  }
  return events
}

export interface MetricsBenchResult {
  route: string
  requests: number
  p50_ms: number
  p99_ms: number
  max_ms: number
}

const toHundredths = (ms: number) => Math.round(ms * 100) / 100

/**
 * Seeds, then asks each metrics route `requests` times (after a warm-up), one request at a time
 * so each latency is the route's own, and reports p50, p99 and the worst per route.
 */
export async function benchMetrics(options: {
  baseUrl: string
  apiKey: string
  projectId: string
  databaseUrl: string
  jobs: number
  requests: number
  log: (line: string) => void
}): Promise<MetricsBenchResult[]> {
  const now = new Date()
  await seed(options.databaseUrl, options.projectId, options.jobs, now, options.log)
  const until = now.toISOString()
  const since = (days: number) => `from=${new Date(now.getTime() - days * dayMs).toISOString()}&until=${until}`
  // The largest answers each interval allows: 12 hours of minutes, 30 days of hours.
  const routes = [
    '/jobsvc/v1/metrics/summary',
    '/jobsvc/v1/metrics/summary?group_by=queue',
    '/jobsvc/v1/metrics/queues',
    '/jobsvc/v1/metrics/throughput',
    `/jobsvc/v1/metrics/throughput?${since(0.5)}&interval=minute`,
    `/jobsvc/v1/metrics/throughput?${since(30)}&interval=hour`,
    `/jobsvc/v1/metrics/throughput?${since(30)}&interval=day&queue=queue-3`,
    '/jobsvc/v1/metrics/job-types',
    `/jobsvc/v1/metrics/job-types?${since(30)}&limit=100`,
  ]
  const results: MetricsBenchResult[] = []
  for (const route of routes) {
    const ask = async () => {
      const started = performance.now()
      const res = await fetch(options.baseUrl + route, { headers: { authorization: `Bearer ${options.apiKey}` } })
      const body = await res.text()
      if (res.status !== 200) throw new Error(`${route} answered ${res.status}: ${body.slice(0, 300)}`)
      return performance.now() - started
    }
    for (let i = 0; i < 20; i++) await ask()
    const latencies: number[] = []
    for (let i = 0; i < options.requests; i++) latencies.push(await ask())
    const result = {
      route,
      requests: latencies.length,
      p50_ms: toHundredths(percentile(latencies, 50)!),
      p99_ms: toHundredths(percentile(latencies, 99)!),
      max_ms: toHundredths(percentile(latencies, 100)!),
    }
    options.log(`bench: ${route}: p50 ${result.p50_ms} ms, p99 ${result.p99_ms} ms, max ${result.max_ms} ms`)
    results.push(result)
  }
  return results
}
