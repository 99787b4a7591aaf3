import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/**
 * The process's Prometheus metrics. One registry per process, made once: prom-client's metric
 * objects keep their label children, so recording a request is a map lookup and an increment.
 * Labels are bounded: routes are fastify's route patterns (`/jobsvc/v1/jobs/:jobId`, or
 * `unmatched`), never raw URLs or project ids.
 */
export const metricsRegistry = new Registry()
collectDefaultMetrics({ register: metricsRegistry, prefix: 'jobsvc_' })

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
 * Serves GET /metrics on its own port, apart from the public API, so that it is never exposed by
 * accident: off unless METRICS_PORT is set, and bound to HOST like the API.
 */
export async function startMetricsServer(
  host: string,
  port: number,
  beforeScrape: () => Promise<void>,
): Promise<{ address: string; server: Server }> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url?.split('?')[0] !== '/metrics') {
      res.writeHead(404).end()
      return
    }
    void (async () => {
      try {
        await beforeScrape()
        const body = await metricsRegistry.metrics()
        res.writeHead(200, { 'content-type': metricsRegistry.contentType }).end(body)
      } catch (err) {
        res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err))
      }
    })()
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => resolve())
  })
  const addr = server.address()
  const bound = typeof addr === 'object' && addr !== null ? addr.port : port
  return { address: `http://${host.includes(':') ? `[${host}]` : host}:${bound}/metrics`, server }
}
