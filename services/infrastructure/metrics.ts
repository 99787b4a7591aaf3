import { createHash, timingSafeEqual } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import { isMainThread } from 'node:worker_threads'
import {
  AggregatorRegistry,
  Counter,
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type MetricObjectWithValues,
  type MetricValue,
} from 'prom-client'
import type { Job, JobEvent } from '../../domain/job.ts'

/**
 * The process's Prometheus metrics. One registry per process, made once: prom-client's metric
 * objects keep their label children, so recording a request is a map lookup and an increment.
 * Labels are bounded: routes are fastify's route patterns (`/jobsvc/v1/jobs/:jobId`, or
 * `unmatched`), never raw URLs or project ids.
 */
export const metricsRegistry = new Registry()
// The role thread (services/roles/role-thread.ts) shares the process: its own process metrics
// would repeat the main thread's, and they would be summed when the two are served together.
if (isMainThread) collectDefaultMetrics({ register: metricsRegistry, prefix: 'jobsvc_' })

/** What another thread of the process hands over for one scrape (`Registry.getMetricsAsJSON`). */
export type MetricsSnapshot = MetricObjectWithValues<MetricValue<string>>[]

export const httpRequests = new Counter({
  name: 'jobsvc_http_requests_total',
  help: 'HTTP requests answered, by method, route pattern and status',
  labelNames: ['method', 'route', 'status'] as const,
  registers: [metricsRegistry],
})

export const httpDuration = new Histogram({
  name: 'jobsvc_http_request_duration_seconds',
  help: 'Time to answer an HTTP request, by method and route pattern',
  labelNames: ['method', 'route'] as const,
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [metricsRegistry],
})

export const connectionUp = new Gauge({
  name: 'jobsvc_connection_up',
  help: '1 while the process is connected to the dependency (nats, postgres), 0 otherwise',
  labelNames: ['dependency'] as const,
  registers: [metricsRegistry],
})

/**
 * Messages a durable consumer has yet to finish (not delivered yet plus delivered and unacked),
 * read from NATS at the scrape: the same for the whole install, whichever process answers. The
 * label names one of the service's own consumers, a fixed set.
 */
export const consumerPending = new Gauge({
  name: 'jobsvc_consumer_pending_messages',
  help: 'Messages a consumer has not finished: pending plus delivered and unacknowledged',
  labelNames: ['consumer'] as const,
  registers: [metricsRegistry],
})

/** The work queues' depth (alert e-mails to send, webhook deliveries scheduled), read at the scrape. */
export const workQueueMessages = new Gauge({
  name: 'jobsvc_work_queue_messages',
  help: 'Messages waiting in a work queue stream: mail (alert e-mails), deliveries (webhook attempts)',
  labelNames: ['queue'] as const,
  registers: [metricsRegistry],
})

const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]

/**
 * Job commands this process performed, counted as their events are appended: the API counts
 * creates, claims and acks, the scheduler the attempts its reaper fails or dead-letters. No
 * labels: queues and projects are the users' to name, so their number is not bounded.
 */
const jobEventCounters: Partial<Record<JobEvent['type'], Counter>> = {
  job_created: new Counter({ name: 'jobsvc_jobs_created_total', help: 'Jobs created', registers: [metricsRegistry] }),
  job_claimed: new Counter({ name: 'jobsvc_jobs_claimed_total', help: 'Attempts claimed by workers', registers: [metricsRegistry] }),
  job_succeeded: new Counter({ name: 'jobsvc_jobs_succeeded_total', help: 'Attempts that succeeded', registers: [metricsRegistry] }),
  job_attempt_failed: new Counter({
    name: 'jobsvc_jobs_failed_total',
    help: 'Attempts that failed (or were reaped) and will be retried',
    registers: [metricsRegistry],
  }),
  job_dead_lettered: new Counter({
    name: 'jobsvc_jobs_dead_lettered_total',
    help: 'Jobs dead-lettered: their last attempt failed or was reaped',
    registers: [metricsRegistry],
  }),
}

export const claimLatency = new Histogram({
  name: 'jobsvc_job_claim_latency_seconds',
  help: 'From when a job became claimable (created, or its run_at or retry time if later) to its claim',
  buckets: latencyBuckets,
  registers: [metricsRegistry],
})

/** Counts the job events one append wrote; `job` is the state after them. */
export function recordJobEvents(events: readonly JobEvent[], job: Job | null): void {
  for (const event of events) {
    jobEventCounters[event.type]?.inc()
    if (event.type === 'job_claimed' && job !== null) {
      const due = Math.max(Date.parse(job.created_at), job.run_at === null ? 0 : Date.parse(job.run_at))
      claimLatency.observe(Math.max(0, Date.parse(event.data.started_at) - due) / 1000)
    }
  }
}

export const webhookDeliveryAttempts = new Counter({
  name: 'jobsvc_webhook_delivery_attempts_total',
  help: 'Webhook delivery attempts by outcome (delivered, retryable_failure, permanent_failure)',
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
})

export const webhookDeliveryDuration = new Histogram({
  name: 'jobsvc_webhook_delivery_duration_seconds',
  help: "Time to send a webhook and read its receiver's answer (or give up), by outcome",
  labelNames: ['outcome'] as const,
  buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [metricsRegistry],
})

export const projectionLag = new Histogram({
  name: 'jobsvc_projection_lag_seconds',
  help: 'From when an event was decided to when the read models committed it',
  buckets: latencyBuckets,
  registers: [metricsRegistry],
})

/** Whether `authorization` is `Bearer <token>`, compared in constant time. */
function isBearer(authorization: string | undefined, token: string): boolean {
  const given = /^bearer (\S+)$/i.exec(authorization ?? '')?.[1] ?? ''
  const digest = (value: string) => createHash('sha256').update(value).digest()
  return timingSafeEqual(digest(given), digest(token))
}

/**
 * Messages a read model could not hold (projections/projection-failures.ts), by projection and by
 * what it wrote instead: `sanitised` (a storable copy of the job's row) or `skipped` (nothing).
 * Counted by the process that recorded them (the projector); the readiness probe shows those
 * still unresolved.
 */
export const projectionFailures = new Counter({
  name: 'jobsvc_projection_failures_total',
  help: 'Messages a read model could not hold, recorded in projection_failures, by projection and outcome (sanitised, skipped)',
  labelNames: ['projection', 'projected'] as const,
  registers: [metricsRegistry],
})

/**
 * Flow limits (issue 29): claims a gate refused, by why (concurrency, rate, held: a fixed set), and
 * slots taken. No per-key or per-queue labels: their number is the users'.
 */
export const limitRefusals = new Counter({
  name: 'jobsvc_limit_refusals_total',
  help: 'Claims a flow gate refused, by reason: concurrency (the key or queue is full), rate (no token), held (a worker said rate limited)',
  labelNames: ['reason'] as const,
  registers: [metricsRegistry],
})

export const limitSlotsTaken = new Counter({
  name: 'jobsvc_limit_slots_taken_total',
  help: 'Claims that took their flow gates (a slot or a token in each)',
  registers: [metricsRegistry],
})

/** What the flow limits hold back, all projects together, read at the scrape from the read models. */
export const limitGauges = {
  running: new Gauge({ name: 'jobsvc_limit_running_jobs', help: 'Running attempts holding a flow-gate slot', registers: [metricsRegistry] }),
  waiting: new Gauge({
    name: 'jobsvc_limit_waiting_jobs',
    help: 'Pending jobs a flow gate has refused since they last became due (waiting for their key or queue)',
    registers: [metricsRegistry],
  }),
  held: new Gauge({ name: 'jobsvc_limit_held_gates', help: "Flow gates a worker's rate_limited ack holds shut now", registers: [metricsRegistry] }),
}

/** Items a scheduler pass skipped because handling them threw (services/infrastructure/failing-items.ts), by pass. */
export const schedulerItemFailures = new Counter({
  name: 'jobsvc_scheduler_item_failures_total',
  help: 'Items a scheduler pass skipped because they failed (logged, then held back with an exponential backoff), by pass',
  labelNames: ['pass'] as const,
  registers: [metricsRegistry],
})

/**
 * Serves GET /metrics on its own port, apart from the public API, so that it is never exposed by
 * accident: off unless METRICS_PORT is set, and bound to HOST like the API. With a `token`
 * (METRICS_TOKEN) a scrape must carry it as a bearer token (401 otherwise).
 *
 * One scrape runs at a time: scrapes that arrive while one is being rendered wait for it and get
 * its text, so any number of scrapers at once cost the dependencies one round of readings.
 */
export async function startMetricsServer(
  host: string,
  port: number,
  beforeScrape: () => Promise<void>,
  otherThreads: () => Promise<MetricsSnapshot[]> = async () => [],
  token: string | null = null,
): Promise<{ address: string; server: Server }> {
  let rendering: Promise<string> | null = null
  const render = async () => {
    await beforeScrape()
    const others = await otherThreads()
    // Counters and histograms of several threads add up; each gauge is set by one thread only.
    const registry = others.length === 0 ? metricsRegistry : AggregatorRegistry.aggregate([await metricsRegistry.getMetricsAsJSON(), ...others])
    return registry.metrics()
  }
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url?.split('?')[0] !== '/metrics') {
      res.writeHead(404).end()
      return
    }
    if (token !== null && !isBearer(req.headers.authorization, token)) {
      res.writeHead(401, { 'content-type': 'text/plain', 'www-authenticate': 'Bearer realm="metrics"' }).end('a bearer token is required\n')
      return
    }
    rendering ??= render().finally(() => {
      rendering = null
    })
    rendering.then(
      (text) => res.writeHead(200, { 'content-type': metricsRegistry.contentType }).end(text),
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err)),
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => resolve())
  })
  const addr = server.address()
  const bound = typeof addr === 'object' && addr !== null ? addr.port : port
  return { address: `http://${host.includes(':') ? `[${host}]` : host}:${bound}/metrics`, server }
}
