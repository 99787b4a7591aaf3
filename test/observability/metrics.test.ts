import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
// @ts-expect-error the parser ships no types; its output is prom2json's shape, typed below
import parsePrometheusTextFormat from 'parse-prometheus-text-format'
import t from 'tap'
import { httpRequest, isolatedNames, removeIsolated, repoRoot, spawnService } from '../support/harness.ts'
import { freePort } from '../support/private-nats.ts'

interface Family {
  name: string
  type: string
  metrics: Array<{ value?: string; labels?: Record<string, string>; count?: string; buckets?: Record<string, string> }>
}

const parse = parsePrometheusTextFormat as (text: string) => Family[]
const secret = 'test-secret-test-secret-test-secret'

t.test('GET /metrics on METRICS_PORT, apart from the API, moves with real traffic', async (t) => {
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const metricsPort = await freePort()
  const env = { JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl, METRICS_PORT: String(metricsPort) }
  const svc = await spawnService(env, ['--role', 'api'])
  t.teardown(() => svc.stop())
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', 'services/roles/cli.ts', 'project', 'create', '--name', 'm', '--plan', 'business'],
    {
      cwd: repoRoot,
      env: { ...process.env, ...env, JOBSVC_SECRET: secret },
    },
  )
  const { api_key: apiKey } = JSON.parse(stdout) as { api_key: string }
  const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`

  t.equal((await httpRequest(svc.url, null, 'GET', '/metrics')).status, 404, 'the public API does not serve metrics')

  const scrape = async () => {
    const res = await fetch(metricsUrl)
    t.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
    return parse(await res.text())
  }
  const created = (families: Family[]) =>
    families
      .find((f) => f.name === 'jobsvc_http_requests_total')
      ?.metrics.filter(
        (m) =>
          m.labels?.route?.startsWith('/jobsvc/v1/jobs') &&
          !m.labels.route.includes(':') &&
          m.labels?.method === 'POST' &&
          m.labels?.status === '201',
      )
      .reduce((sum, m) => sum + Number(m.value), 0) ?? 0

  const before = await scrape()
  for (let i = 0; i < 5; i++) {
    const res = await httpRequest(svc.url, apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'metrics', payload: {} })
    t.equal(res.status, 201)
  }
  const after = await scrape()
  t.equal(created(after) - created(before), 5, 'five creates counted by route pattern and status')
  const duration = after.find((f) => f.name === 'jobsvc_http_request_duration_seconds')
  t.equal(duration?.type, 'HISTOGRAM', 'request latency is a histogram')
  t.ok(
    duration?.metrics.some((m) => Number(m.buckets?.['+Inf']) >= 5),
    'the creates are in the latency histogram (this parser keeps only the buckets of a labelled histogram)',
  )
  const up = after.find((f) => f.name === 'jobsvc_connection_up')
  t.same(
    Object.fromEntries((up?.metrics ?? []).map((m) => [m.labels?.dependency, m.value])),
    { nats: '1', postgres: '1' },
    'NATS and Postgres connection state',
  )
  t.notOk(
    after.some((f) => f.metrics.some((m) => Object.values(m.labels ?? {}).some((v) => v.includes('job_')))),
    'no label carries a job id',
  )
})
