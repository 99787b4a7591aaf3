import t from 'tap'
import { eventually, httpRequest } from '../support/harness.ts'
import { hostileRequest, operationsOf, seededRandom, type Credentials, type HostileRequest } from '../support/hostile-requests.ts'
import { newVerifiedUser, startPlatformHarness } from '../support/platform.ts'

// Issue 13, "Every answer in the envelope": a seeded run of hostile requests over every route
// the OpenAPI document lists gets no 5xx, and every answer carries X-Request-Id; every error
// answer is the spec's envelope naming the same request id. Afterwards the service still works
// (the projector was not poisoned by anything a request managed to store).
const seed = Number(process.env.JOBSVC_FUZZ_SEED ?? 20261124)
const requests = Number(process.env.JOBSVC_FUZZ_REQUESTS ?? 4000)
const concurrency = 8

const h = await startPlatformHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler', 'dispatcher'],
  tunables: { poll_max_wait_ms: 200 },
  config: { billingWebhookSecret: 'fuzz-billing-secret-0123456789' },
})
const owner = await newVerifiedUser(h, { plan: 'business' })
const other = await h.newProject()

// A few real resources, so some requests get past "not found" to the code behind it.
const ids: string[] = [owner.projectId]
for (let i = 0; i < 3; i++) {
  const created = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'fuzz', payload: { i } })
  ids.push(created.body.id)
}
const alert = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/alerts', { name: 'depth', kind: 'queue_depth', threshold: 10 })
if (alert.status === 201) ids.push(alert.body.id)
const schedule = await httpRequest(h.url, owner.apiKey, 'PUT', '/jobsvc/v1/recurring/rjob_fuzz', { job_type: 'fuzz', cron_expression: '*/5 * * * *' })
if (schedule.status === 200 || schedule.status === 201) ids.push('rjob_fuzz')
ids.push(owner.userId)

const doc = (await httpRequest(h.url, null, 'GET', '/jobsvc/v1/openapi.json')).body
const operations = operationsOf(doc)
const creds: Credentials = { apiKey: owner.apiKey, otherApiKey: other.apiKey, jwt: owner.jwt, projectId: owner.projectId, ids }

interface Finding {
  request: HostileRequest
  status: number
  problem: string
  body: string
}

async function send(request: HostileRequest): Promise<Finding | null> {
  const controller = new AbortController()
  // A valid progress stream or long poll may hold the connection; only its head is checked.
  const timer = setTimeout(() => controller.abort(), 10_000)
  try {
    const res = await fetch(h.url + request.path, { method: request.method, headers: request.headers, body: request.body, signal: controller.signal })
    const requestId = res.headers.get('x-request-id')
    const type = res.headers.get('content-type') ?? ''
    let text = ''
    if (type.startsWith('text/event-stream')) await res.body?.cancel()
    else text = await res.text()
    const finding = (problem: string): Finding => ({ request, status: res.status, problem, body: text.slice(0, 300) })
    if (res.status >= 500) return finding('5xx')
    if (requestId === null || !/^[0-9A-HJKMNP-TV-Z]{26}$/.test(requestId)) return finding('no X-Request-Id')
    if (res.status >= 400 && request.method !== 'HEAD') {
      let envelope: { error?: { code?: unknown; message?: unknown; request_id?: unknown } } | null = null
      try {
        envelope = JSON.parse(text)
      } catch {
        return finding('error body is not JSON')
      }
      const e = envelope?.error
      if (typeof e?.code !== 'string' || typeof e.message !== 'string' || e.request_id !== requestId) return finding('not the error envelope')
    }
    return null
  } catch (err) {
    if (controller.signal.aborted) return null
    return { request, status: 0, problem: `request failed: ${(err as Error).message}`, body: '' }
  } finally {
    clearTimeout(timer)
  }
}

t.test(`${requests} hostile requests over every route (seed ${seed}) get no 5xx, and every answer has the envelope and X-Request-Id`, async (t) => {
  t.ok(operations.length >= 50, `the document lists the routes (${operations.length})`)
  const rng = seededRandom(seed)
  const planned = Array.from({ length: requests }, (_, i) => hostileRequest(rng, operations[i % operations.length]!, creds))
  const findings: Finding[] = []
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < planned.length) {
        const request = planned[next++]!
        const finding = await send(request)
        if (finding !== null) findings.push(finding)
      }
    }),
  )
  const kinds = new Map<string, Finding>()
  for (const f of findings) kinds.set(`${f.problem} ${f.status} ${f.request.method} ${f.request.path.split('?')[0]!.replace(/[^/]{30,}/g, '…')}`, f)
  if (process.env.JOBSVC_FUZZ_REPORT)
    for (const [k, f] of kinds)
      console.error(
        k,
        '\n   ',
        f.request.path.slice(0, 150),
        JSON.stringify(f.request.headers).slice(0, 150),
        (f.request.body ?? '').slice(0, 200),
        '\n   ',
        f.body.slice(0, 200),
      )
  t.same(
    findings
      .slice(0, 10)
      .map((f) => ({ problem: f.problem, status: f.status, method: f.request.method, path: f.request.path.slice(0, 200), body: f.body })),
    [],
    `no findings (${findings.length} in all)`,
  )
})

// The fuzzed project may have revoked its own key or deleted its account: the check uses another.
t.test('after the run the service is ready, its projector is not stuck, and a job still goes through', async (t) => {
  const ready = await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')
  t.equal(ready.status, 200, JSON.stringify(ready.body))
  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'after-fuzz', queue: 'after-fuzz', payload: {} })
  t.equal(created.status, 201)
  const listed = await eventually(
    async () => {
      const list = await h.request('GET', '/jobsvc/v1/jobs?queue=after-fuzz')
      return list.body.data?.length === 1 ? list : null
    },
    15_000,
    'the new job in the list',
  )
  t.equal(listed.body.data[0].id, created.body.id)
  const failures = await h.runtime.sql`SELECT count(*)::int AS n FROM projection_failures`
  t.equal(failures[0]!.n, 0, 'no event was parked by the projector')
})
