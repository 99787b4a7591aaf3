import { createServer } from 'node:http'
import t from 'tap'
import { httpRequest, isolatedNames, removeIsolated, spawnService } from '../support/harness.ts'
import { createProjectWithCli } from '../support/spawned-install.ts'

interface ExportedSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
}

const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
const callerSpanId = '00f067aa0ba902b7'

t.test('with OTEL_EXPORTER_OTLP_ENDPOINT, request spans reach the collector, continuing the caller trace', async (t) => {
  const spans: ExportedSpan[] = []
  const collector = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      t.equal(req.url, '/v1/traces', 'spans are posted to the traces path of the endpoint')
      t.match(req.headers['content-type'], /json/, 'OTLP/HTTP with JSON bodies')
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        resourceSpans: Array<{ scopeSpans: Array<{ spans: ExportedSpan[] }> }>
      }
      for (const r of body.resourceSpans) for (const s of r.scopeSpans) spans.push(...s.spans)
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve))
  t.teardown(() => collector.close())
  const collectorPort = (collector.address() as { port: number }).port

  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const env = {
    JOBSVC_NAMESPACE: names.namespace,
    DATABASE_URL: names.databaseUrl,
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collectorPort}`,
  }
  const svc = await spawnService(env, ['--role', 'api'])
  t.teardown(() => svc.stop())
  const { apiKey } = await createProjectWithCli(env, 'tr')

  const created = await httpRequest(
    svc.url,
    apiKey,
    'POST',
    '/jobsvc/v1/jobs',
    { job_type: 'traced', payload: {} },
    { traceparent: `00-${traceId}-${callerSpanId}-01` },
  )
  t.equal(created.status, 201)
  const got = await httpRequest(svc.url, apiKey, 'GET', `/jobsvc/v1/jobs/${created.body.id}`)
  t.equal(got.status, 200)

  const deadline = Date.now() + 15_000
  while (spans.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  const create = spans.find((s) => s.name === 'POST /jobsvc/v1/jobs')
  t.ok(create, `the create's span, named by route pattern (${spans.map((s) => s.name).join(', ')})`)
  t.equal(create?.traceId, traceId, "in the caller's trace")
  t.equal(create?.parentSpanId, callerSpanId, "a child of the caller's span")
  const read = spans.find((s) => s.name === 'GET /jobsvc/v1/jobs/:jobId')
  t.ok(read, 'the read has a span too')
  t.not(read?.traceId, traceId, 'a request without traceparent starts a trace of its own')
})
