import { createServer } from 'node:http'
// @ts-expect-error the parser ships no types; its output is prom2json's shape, typed below
import parsePrometheusTextFormat from 'parse-prometheus-text-format'
import t from 'tap'
import { ConfigError, loadConfig } from '../../services/infrastructure/config.ts'
import { startMetricsServer } from '../../services/infrastructure/metrics.ts'
import { serveMetrics } from '../../services/roles/metrics-endpoint.ts'
import { mailStreamName } from '../../streams/names.ts'
import { eventually, httpRequest, isolatedNames, removeIsolated, spawnService, startHarness } from '../support/harness.ts'
import { createProjectWithCli } from '../support/spawned-install.ts'
import { freePort } from '../support/private-nats.ts'

interface Family {
  name: string
  type: string
  metrics: Array<{ value?: string; labels?: Record<string, string>; count?: string; buckets?: Record<string, string> }>
}

const parse = parsePrometheusTextFormat as (text: string) => Family[]

/** The value of an unlabelled counter, or the sample count of an unlabelled histogram. */
const valueOf = (families: Family[], name: string) => {
  const family = families.find((f) => f.name === name)
  const metric = family?.metrics[0]
  return Number(family?.type === 'HISTOGRAM' ? (metric?.count ?? 0) : (metric?.value ?? 0))
}

t.test('GET /metrics on METRICS_PORT, apart from the API, moves with real traffic', async (t) => {
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const metricsPort = await freePort()
  const env = { JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl, METRICS_PORT: String(metricsPort) }
  const svc = await spawnService(env, ['--role', 'api'])
  t.teardown(() => svc.stop())
  const { apiKey } = await createProjectWithCli(env, 'm')
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

t.test('one process with every role: job counters, claim latency, webhook deliveries and projection lag', async (t) => {
  const names = isolatedNames(import.meta.filename, 'all')
  t.teardown(() => removeIsolated(names))
  const receiver = createServer((req, res) => req.resume().on('end', () => res.writeHead(204).end()))
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  t.teardown(() => receiver.close())
  const receiverPort = (receiver.address() as { port: number }).port
  const metricsPort = await freePort()
  const env = {
    JOBSVC_NAMESPACE: names.namespace,
    DATABASE_URL: names.databaseUrl,
    METRICS_PORT: String(metricsPort),
    WEBHOOK_ALLOW_HOSTS: `127.0.0.1:${receiverPort}`,
  }
  // No --role: the API on the main thread, projector, scheduler and dispatcher on the role thread.
  const svc = await spawnService(env, [])
  t.teardown(() => svc.stop())
  const { apiKey } = await createProjectWithCli(env, 'm')
  const api = (method: string, path: string, body?: unknown) => httpRequest(svc.url, apiKey, method, path, body)
  const scrape = async () => parse(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text())

  t.equal((await api('POST', '/jobsvc/v1/webhooks', { url: `http://127.0.0.1:${receiverPort}/hook`, events: ['job.succeeded'] })).status, 201)
  const before = await scrape()
  const create = async (jobType: string, maxAttempts: number) => {
    const res = await api('POST', '/jobsvc/v1/jobs', { job_type: jobType, queue: 'm', payload: {}, max_attempts: maxAttempts })
    t.equal(res.status, 201)
  }
  await create('ok', 3)
  await create('ok', 3)
  await create('flaky', 2)
  await create('doomed', 1)
  const jobs: Array<{ id: string; job_type: string }> = []
  while (jobs.length < 4) {
    const polled = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-m', queues: ['m'], capacity: 4 - jobs.length, wait_seconds: 5 })
    t.equal(polled.status, 200)
    if (polled.body.jobs.length === 0) break
    jobs.push(...polled.body.jobs)
  }
  t.equal(jobs.length, 4, 'all four claimed')
  for (const job of jobs) {
    const status = job.job_type === 'ok' ? 'succeeded' : 'failed'
    const error = { type: 'Boom', message: 'no', stack_trace: '' }
    const ack = await api('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'w-m', status, ...(status === 'failed' ? { error } : {}) })
    t.equal(ack.status, 200)
  }

  const moved = (after: Family[], name: string) => valueOf(after, name) - valueOf(before, name)
  let after = await scrape()
  t.equal(moved(after, 'jobsvc_jobs_created_total'), 4, 'created')
  t.equal(moved(after, 'jobsvc_jobs_claimed_total'), 4, 'claimed')
  t.equal(moved(after, 'jobsvc_jobs_succeeded_total'), 2, 'succeeded')
  t.equal(moved(after, 'jobsvc_jobs_failed_total'), 1, 'failed and to be retried')
  t.equal(moved(after, 'jobsvc_jobs_dead_lettered_total'), 1, 'dead-lettered')
  t.equal(moved(after, 'jobsvc_job_claim_latency_seconds'), 4, 'each claim in the claim latency histogram')

  // The role thread's numbers: deliveries of the two successes and the projector's commits.
  const deadline = Date.now() + 30_000
  const delivered = (families: Family[]) =>
    Number(
      families.find((f) => f.name === 'jobsvc_webhook_delivery_attempts_total')?.metrics.find((m) => m.labels?.outcome === 'delivered')?.value ?? 0,
    )
  // The role thread reports its registry on its own clock, so wait for the projector's commits as well.
  const projected = (families: Family[]) => valueOf(families, 'jobsvc_projection_lag_seconds')
  while ((delivered(after) < 2 || projected(after) < 8) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200))
    after = await scrape()
  }
  t.equal(delivered(after), 2, 'two webhook deliveries counted as delivered, from the role thread')
  t.ok(
    after.find((f) => f.name === 'jobsvc_webhook_delivery_duration_seconds')?.metrics.some((m) => Number(m.buckets?.['+Inf']) >= 2),
    'and their latency',
  )
  t.ok(projected(after) >= 8, "the projector's lag histogram has the jobs' events")
  const labelled = (name: string, label: string) =>
    Object.fromEntries((after.find((f) => f.name === name)?.metrics ?? []).map((m) => [m.labels?.[label], Number(m.value)]))
  const pending = labelled('jobsvc_consumer_pending_messages', 'consumer')
  t.ok(
    ['projector', 'dispatcher', 'alert_dispatcher', 'mailer'].every((c) => Number.isInteger(pending[c]) && pending[c] >= 0),
    "every consumer's backlog, read from NATS",
  )
  const queues = labelled('jobsvc_work_queue_messages', 'queue')
  t.ok(Number.isInteger(queues.mail) && Number.isInteger(queues.deliveries), 'the e-mail and delivery work queues')
  t.equal(
    after.filter((f) => f.name === 'jobsvc_process_cpu_seconds_total').length,
    1,
    "process metrics once: the role thread's are not added to the main thread's",
  )
})

t.test('the NATS readings are reused for a while; one scrape renders at a time; METRICS_TOKEN asks for a bearer token', async (t) => {
  // No role consumes the mail work queue here, so its depth moves only with what this test adds.
  const h = await startHarness(t, import.meta.filename, { roles: [], suffix: '_reuse' })
  const mailQueue = async (url: string, headers: Record<string, string> = {}) => {
    const res = await fetch(url, { headers })
    t.equal(res.status, 200, 'scraped')
    const family = parse(await res.text()).find((f) => f.name === 'jobsvc_work_queue_messages')
    return Number(family?.metrics.find((m) => m.labels?.queue === 'mail')?.value)
  }
  const addMail = () => h.runtime.nats.js.publish(`${h.config.namespace}.mail.metrics-test`, '{}')
  const serve = async (ttlMs: number) => {
    const served = await serveMetrics(h.runtime, 0, async () => [], { natsReadingsTtlMs: ttlMs })
    t.teardown(() => new Promise((resolve) => served.server.close(resolve)))
    return served.address
  }

  await t.test('a reading within its time to live is not asked of NATS again', async (t) => {
    const reusing = await serve(3_600_000)
    const first = await mailQueue(reusing)
    await addMail()
    const info = await h.runtime.nats.jsm.streams.info(mailStreamName(h.config.namespace))
    t.equal(info.state.messages, first + 1, 'the queue grew')
    t.equal(await mailQueue(reusing), first, 'the scrape answers the reading it already had')
    t.equal(await mailQueue(await serve(0)), first + 1, 'a server whose readings expire at once sees the new depth')
  })

  await t.test('scrapes that arrive together wait for one rendering and share its text', async (t) => {
    let renderings = 0
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const { address, server } = await startMetricsServer('127.0.0.1', 0, async () => {
      renderings++
      await gate
    })
    t.teardown(() => new Promise((resolve) => server.close(resolve)))
    let arrived = 0
    server.on('request', () => arrived++)
    const scrapes = [1, 2, 3].map(() => fetch(address).then(async (res) => ({ status: res.status, text: await res.text() })))
    await eventually(async () => arrived === 3, 15_000, 'three scrapes at the server')
    t.equal(renderings, 1, 'three scrapes in flight, one rendering')
    release()
    const answers = await Promise.all(scrapes)
    t.same(
      answers.map((a) => a.status),
      [200, 200, 200],
    )
    t.ok(
      answers.every((a) => a.text === answers[0]!.text && a.text.includes('jobsvc_')),
      'the same text for each',
    )
    t.equal((await fetch(address)).status, 200)
    t.equal(renderings, 2, 'a scrape after the first ended renders again')
  })

  await t.test('with a token, a scrape without it, or with another, is 401', async (t) => {
    const token = 'metrics-token-0123456789'
    t.equal(loadConfig({ JOBSVC_SECRET: 'metrics-test-secret-metrics', METRICS_TOKEN: token }).metricsToken, token, 'METRICS_TOKEN is read')
    t.equal(loadConfig({ JOBSVC_SECRET: 'metrics-test-secret-metrics' }).metricsToken, null, 'unset by default')
    t.throws(
      () => loadConfig({ JOBSVC_SECRET: 'metrics-test-secret-metrics', METRICS_TOKEN: 'short' }),
      ConfigError,
      'a short token is refused at start',
    )
    const guarded = await serveMetrics({ ...h.runtime, config: { ...h.config, metricsToken: token } }, 0, async () => [])
    t.teardown(() => new Promise((resolve) => guarded.server.close(resolve)))
    for (const [what, headers] of [
      ['no credentials', {}],
      ['another token', { authorization: 'Bearer metrics-token-0123456780' }],
      ['the token as Basic credentials', { authorization: `Basic ${token}` }],
    ] as const) {
      const res = await fetch(guarded.address, { headers })
      t.equal(res.status, 401, what)
      t.equal(res.headers.get('www-authenticate'), 'Bearer realm="metrics"', `${what}: says what it wants`)
      t.notMatch(await res.text(), /jobsvc_/, `${what}: no metrics`)
    }
    t.ok(Number.isInteger(await mailQueue(guarded.address, { authorization: `Bearer ${token}` })), 'the token scrapes')
  })
})
