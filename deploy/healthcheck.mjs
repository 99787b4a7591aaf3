// The image's health check (Dockerfile HEALTHCHECK, docker-compose.yml healthcheck:). Plain
// JavaScript so that a probe every few seconds costs a bare `node` start, without tsx compiling.
//
// `node deploy/healthcheck.mjs`: the API's readiness route (GET /jobsvc/health/ready on PORT),
// 200 once NATS, JetStream, Postgres and the migrations answer and the process is not stopping.
// `node deploy/healthcheck.mjs metrics`: for a process without the API (projector, dispatcher,
// scheduler), which serves no HTTP but GET /metrics on METRICS_PORT: healthy while it reports
// itself connected to NATS and to Postgres (jobsvc_connection_up), with METRICS_TOKEN if set.
//
// It reads the same variables as the service (README, Configuration) and exits 0 or 1.

const env = process.env
const mode = process.argv[2] ?? 'ready'
const timeoutMs = 2_500

/** The address a probe inside the container reaches the service on: HOST, or loopback when HOST binds every interface. */
function probeHost() {
  const host = env.HOST ?? '127.0.0.1'
  if (host === '0.0.0.0' || host === '::' || host === '') return '127.0.0.1'
  return host.includes(':') ? `[${host}]` : host
}

function fail(message) {
  process.stderr.write(`unhealthy: ${message}\n`)
  process.exit(1)
}

async function get(port, path, headers = {}) {
  return fetch(`http://${probeHost()}:${port}${path}`, { headers, signal: AbortSignal.timeout(timeoutMs) })
}

async function checkReady() {
  const port = env.PORT ?? '8080'
  if (port === '0') fail('PORT=0 picks a free port the probe cannot know; give the container a fixed PORT')
  const res = await get(port, '/jobsvc/health/ready')
  const body = await res.text()
  if (res.status !== 200) fail(`GET /jobsvc/health/ready answered ${res.status}: ${body}`)
}

async function checkMetrics() {
  const port = env.METRICS_PORT
  if (port === undefined || port === '' || port === '0') fail('METRICS_PORT is not set to a fixed port, so the process serves no /metrics to probe')
  const res = await get(port, '/metrics', env.METRICS_TOKEN ? { authorization: `Bearer ${env.METRICS_TOKEN}` } : {})
  const text = await res.text()
  if (res.status !== 200) fail(`GET /metrics answered ${res.status}`)
  for (const dependency of ['nats', 'postgres']) {
    if (!new RegExp(`^jobsvc_connection_up\\{dependency="${dependency}"\\} 1$`, 'm').test(text)) fail(`not connected to ${dependency}`)
  }
}

if (mode !== 'ready' && mode !== 'metrics') fail(`unknown check ${JSON.stringify(mode)}; checks are ready (the default) and metrics`)
await (mode === 'metrics' ? checkMetrics() : checkReady()).catch((err) => fail(err?.cause?.message ?? err?.message ?? String(err)))
