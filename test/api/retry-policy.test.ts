import t, { type Test } from 'tap'
import { eventually, httpRequest, type HttpResponse } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'
import { joinProject, newVerifiedUser, startPlatformHarness } from '../support/platform.ts'

// The retry policy routes over HTTP against the whole service (docs/api-notes.md, "Retry policy"): read and
// set per project and per queue, refusals, and the acks, the reaper and job creation following it.
const h = await startPlatformHarness(t, import.meta.filename, { tunables: { reaper_grace_ms: 300, reaper_interval_ms: 100 } })

const owner = await newVerifiedUser(h, { plan: 'business' })
const admin = await joinProject(h, owner, owner.projectId, 'admin')
const member = await joinProject(h, owner, owner.projectId, 'member')
const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
const stranger = await newVerifiedUser(h)

const api = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)
const dashboard = (user: { jwt: string }, method: string, path: string, body?: unknown) =>
  h.platform(method, `/platform/v1/projects/${owner.projectId}${path}`, body, { jwt: user.jwt })

const servicePolicy = { base_delay_seconds: 15, factor: 2, max_delay_seconds: 86_400, jitter_seconds: 3, max_attempts: 3 }
const steady = { base_delay_seconds: 5, factor: 1, max_delay_seconds: 5, jitter_seconds: 0, max_attempts: 6 }
const steep = { base_delay_seconds: 4, factor: 3, max_delay_seconds: 30, jitter_seconds: 2, max_attempts: 4 }

function isOk(t: Test, res: HttpResponse, status: number, what: string): void {
  t.equal(res.status, status, `${what}: ${status} (got ${res.status} ${JSON.stringify(res.body)})`)
}

t.test("defaults read back: the spec's policy for the project and any queue", async (t) => {
  const project = await api('GET', '/jobsvc/v1/retry-policy')
  isOk(t, project, 200, 'project')
  t.match(project.body, { ...servicePolicy, source: 'service', queues: [] })
  const queue = await api('GET', '/jobsvc/v1/queues/emails/retry-policy')
  t.strictSame(queue.body, { queue: 'emails', ...servicePolicy, source: 'service' })
})

t.test('set and read per project and per queue, with an API key', async (t) => {
  const set = await api('PUT', '/jobsvc/v1/retry-policy', steady)
  isOk(t, set, 200, 'PUT project')
  t.match(set.body, { ...steady, source: 'project', queues: [] })
  t.match(set.headers.get('x-event-seq'), /^\d+$/)
  t.match((await api('GET', '/jobsvc/v1/retry-policy')).body, { ...steady, source: 'project' }, 'read back')
  t.strictSame(
    (await api('GET', '/jobsvc/v1/queues/emails/retry-policy')).body,
    { queue: 'emails', ...steady, source: 'project' },
    'a queue follows it',
  )

  const override = await api('PUT', '/jobsvc/v1/queues/emails/retry-policy', steep)
  isOk(t, override, 200, 'PUT queue')
  t.strictSame(override.body, { queue: 'emails', ...steep, source: 'queue' })
  t.strictSame((await api('GET', '/jobsvc/v1/queues/emails/retry-policy')).body, { queue: 'emails', ...steep, source: 'queue' })
  t.strictSame(
    (await api('GET', '/jobsvc/v1/queues/other/retry-policy')).body,
    { queue: 'other', ...steady, source: 'project' },
    'other queues keep the project default',
  )
  t.match(
    (await api('GET', '/jobsvc/v1/retry-policy')).body,
    { ...steady, queues: [{ queue: 'emails', ...steep }] },
    'the project lists its overrides',
  )
  const encoded = await api('PUT', `/jobsvc/v1/queues/${encodeURIComponent('a queue/with ü')}/retry-policy`, steep)
  t.equal(encoded.body.queue, 'a queue/with ü', 'a queue name is a path segment, percent-encoded')

  isOk(t, await api('DELETE', '/jobsvc/v1/queues/emails/retry-policy'), 204, 'DELETE queue')
  t.equal((await api('GET', '/jobsvc/v1/queues/emails/retry-policy')).body.source, 'project', 'the queue follows the project again')
  isOk(t, await api('DELETE', '/jobsvc/v1/queues/emails/retry-policy'), 204, 'DELETE again: nothing to remove')
  isOk(t, await api('DELETE', `/jobsvc/v1/queues/${encodeURIComponent('a queue/with ü')}/retry-policy`), 204, 'DELETE the other')
  isOk(t, await api('DELETE', '/jobsvc/v1/retry-policy'), 204, 'DELETE project')
  t.match((await api('GET', '/jobsvc/v1/retry-policy')).body, { ...servicePolicy, source: 'service', queues: [] }, "the spec's again")
})

t.test('bad values: 400 invalid_request naming the field', async (t) => {
  const bad: Array<[string, Record<string, unknown>]> = [
    ['base_delay_seconds', { ...steady, base_delay_seconds: 0 }],
    ['base_delay_seconds', { ...steady, base_delay_seconds: 1.5 }],
    ['factor', { ...steady, factor: 0.5 }],
    ['factor', { ...steady, factor: 11 }],
    ['max_delay_seconds', { ...steady, max_delay_seconds: 7 * 86_400 + 1 }],
    ['max_delay_seconds', { ...steady, base_delay_seconds: 60, max_delay_seconds: 30 }],
    ['jitter_seconds', { ...steady, jitter_seconds: -1 }],
    ['jitter_seconds', { ...steady, jitter_seconds: 3601 }],
    ['max_attempts', { ...steady, max_attempts: 0 }],
    ['max_attempts', { ...steady, max_attempts: 101 }],
    ['factor', { ...steady, factor: '2' }],
    ['jitter_seconds', { base_delay_seconds: 5, factor: 1, max_delay_seconds: 5, max_attempts: 6 }],
  ]
  for (const [field, body] of bad) {
    for (const path of ['/jobsvc/v1/retry-policy', '/jobsvc/v1/queues/emails/retry-policy']) {
      const res = await api('PUT', path, body)
      isError(t, res, 400, 'invalid_request', `${path} ${JSON.stringify(body)}`)
      t.match(res.body.error.message, field)
    }
  }
  isError(
    t,
    await api('PUT', `/jobsvc/v1/queues/${'q'.repeat(101)}/retry-policy`, steady),
    400,
    'invalid_request',
    'a queue name over 100 characters',
  )
  t.match((await api('GET', '/jobsvc/v1/retry-policy')).body, { source: 'service' }, 'nothing was set')
})

t.test('from the dashboard: members read, admins and the owner change, others are refused', async (t) => {
  isOk(t, await dashboard(member, 'GET', '/retry-policy'), 200, 'member reads')
  isOk(t, await dashboard(viewer, 'GET', '/queues/emails/retry-policy'), 200, 'viewer reads a queue')
  isError(t, await dashboard(member, 'PUT', '/retry-policy', steady), 403, 'forbidden', 'member sets')
  isError(t, await dashboard(viewer, 'PUT', '/queues/emails/retry-policy', steady), 403, 'forbidden', 'viewer sets a queue')
  isError(t, await dashboard(member, 'DELETE', '/queues/emails/retry-policy'), 403, 'forbidden', 'member removes')
  isError(t, await dashboard(stranger, 'GET', '/retry-policy'), 404, 'project_not_found', 'not a member')
  isError(t, await dashboard(stranger, 'PUT', '/retry-policy', steady), 404, 'project_not_found', 'not a member sets')
  isError(t, await h.platform('GET', `/platform/v1/projects/${owner.projectId}/retry-policy`), 401, 'unauthorized', 'no session')
  isError(t, await dashboard(admin, 'PUT', '/retry-policy', { ...steady, factor: 0 }), 400, 'invalid_request', 'admin, bad value')

  const byAdmin = await dashboard(admin, 'PUT', '/queues/reports/retry-policy', steady)
  isOk(t, byAdmin, 200, 'admin sets a queue')
  t.strictSame(byAdmin.body, { queue: 'reports', ...steady, source: 'queue' })
  isOk(t, await dashboard(owner, 'DELETE', '/queues/reports/retry-policy'), 204, 'owner removes it')
  t.equal((await api('GET', '/jobsvc/v1/queues/reports/retry-policy')).body.source, 'service', 'the API key sees the change')
})

t.test('an ack of a failed attempt retries as the queue policy says; jobs get its max_attempts', async (t) => {
  isOk(t, await api('PUT', '/jobsvc/v1/queues/rp-backoff/retry-policy', steep), 200, 'policy set')
  const created = await api('POST', '/jobsvc/v1/jobs', { job_type: 'rp.backoff', payload: {}, queue: 'rp-backoff' })
  isOk(t, created, 201, 'created without max_attempts')
  t.equal(created.body.max_attempts, steep.max_attempts, "the queue policy's max_attempts")
  const explicit = await api('POST', '/jobsvc/v1/jobs', { job_type: 'rp.backoff', payload: {}, queue: 'rp-other', max_attempts: 9 })
  t.equal(explicit.body.max_attempts, 9, 'a job that says keeps its own')
  const elsewhere = await api('POST', '/jobsvc/v1/jobs', { job_type: 'rp.backoff', payload: {}, queue: 'rp-other' })
  t.equal(elsewhere.body.max_attempts, servicePolicy.max_attempts, "another queue gets the spec's")
  isOk(t, await api('POST', `/jobsvc/v1/jobs/${elsewhere.body.id}/cancel`), 200, 'cleared away')
  isOk(t, await api('POST', `/jobsvc/v1/jobs/${explicit.body.id}/cancel`), 200, 'cleared away')

  // The service clock runs ahead past each retry's run_at, so that the next attempt is claimable.
  const realClock = h.runtime.now
  let aheadMs = 0
  h.runtime.now = () => new Date(Date.now() + aheadMs)
  t.teardown(() => void (h.runtime.now = realClock))
  const serviceNow = () => Date.now() + aheadMs

  const expected = [
    { attempt: 1, delayMs: 4_000 },
    { attempt: 2, delayMs: 12_000 },
    { attempt: 3, delayMs: 30_000 },
  ]
  for (const { attempt, delayMs } of expected) {
    const poll = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_rp', queues: ['rp-backoff'], wait_seconds: 5 })
    t.equal(poll.body.jobs?.[0]?.attempt, attempt, `attempt ${attempt} claimed`)
    const before = serviceNow()
    const ack = await api('POST', '/jobsvc/v1/workers/ack', { job_id: created.body.id, worker_id: 'wrk_rp', status: 'failed' })
    const after = serviceNow()
    t.equal(ack.body.action, 'retry')
    const retryAt = Date.parse(ack.body.retry_at)
    t.ok(
      retryAt >= before + delayMs && retryAt < after + delayMs + steep.jitter_seconds * 1000,
      `attempt ${attempt}: retried after ${retryAt - before}–${retryAt - after} ms, within ${delayMs} ms + [0, 2 s)`,
    )
    aheadMs += retryAt - serviceNow() + 50
  }
  const poll = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_rp', queues: ['rp-backoff'], wait_seconds: 5 })
  t.equal(poll.body.jobs?.[0]?.attempt, 4)
  const last = await api('POST', '/jobsvc/v1/workers/ack', { job_id: created.body.id, worker_id: 'wrk_rp', status: 'failed' })
  t.strictSame(last.body, { action: 'done' }, "dead-lettered on the policy's 4th attempt")
  h.runtime.now = realClock
})

t.test('the reaper retries a silent attempt as the policy of its project says', async (t) => {
  isOk(t, await api('PUT', '/jobsvc/v1/retry-policy', { ...steady, base_delay_seconds: 60, max_delay_seconds: 60 }), 200, 'project policy set')
  const created = await api('POST', '/jobsvc/v1/jobs', { job_type: 'rp.reap', payload: {}, queue: 'rp-reap', timeout_seconds: 1 })
  t.equal(created.body.max_attempts, steady.max_attempts)
  const poll = await api('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_lost', queues: ['rp-reap'], wait_seconds: 5 })
  t.equal(poll.body.jobs?.[0]?.id, created.body.id)
  const failed = await eventually(
    async () => {
      const history = await api('GET', `/jobsvc/v1/jobs/${created.body.id}/history`)
      return history.body.data.find((e: { type: string }) => e.type === 'job_attempt_failed')
    },
    10_000,
    'the reaper to retry the attempt',
  )
  t.match(failed.data, { reaped: true, error: { type: 'HeartbeatTimeout' } })
  t.equal(Date.parse(failed.data.retry_at) - Date.parse(failed.data.failed_at), 60_000, '60 s, no jitter')
  isOk(t, await api('DELETE', '/jobsvc/v1/retry-policy'), 204, 'removed')
})

t.test('each change is a retry_policy_updated row in the feed and the audit export', async (t) => {
  const feed = await api('GET', '/jobsvc/v1/activity?limit=100')
  isOk(t, feed, 200, 'feed')
  const rows = feed.body.data.filter((r: { kind: string }) => r.kind === 'retry_policy_updated')
  t.ok(rows.length >= 10, `${rows.length} rows, one per change`)
  const set = rows.find((r: { summary: string }) => r.summary.startsWith('Retry policy of queue rp-backoff set'))
  t.match(set, { target_type: 'project', target_id: owner.projectId })
  t.match(JSON.parse(set.metadata), { queue: 'rp-backoff', policy: steep, previous: null })
  t.ok(
    rows.some((r: { summary: string }) => r.summary === "Retry policy of queue emails removed; the project's applies"),
    'a removal',
  )

  const from = new Date(Date.now() - 3_600_000).toISOString()
  const until = new Date(Date.now() + 60_000).toISOString()
  const exported = await h.platform(
    'GET',
    `/jobsvc/v1/projects/${owner.projectId}/audit-log/export?from=${from}&until=${until}&format=jsonl`,
    undefined,
    {
      jwt: owner.jwt,
    },
  )
  isOk(t, exported, 200, 'export')
  const lines = String(exported.body)
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((r) => r.kind === 'retry_policy_updated')
  t.equal(lines.length, rows.length, 'the export holds the same rows')
  t.match(
    lines.find((r) => r.summary === 'Retry policy of queue reports set: 5 s × 1^(attempt−1), at most 5 s, plus 0–0 s; 6 attempts'),
    { actor_user_id: admin.userId, metadata: { queue: 'reports', policy: steady } },
    "a dashboard change names the user; the API key's do not",
  )
  t.equal(lines.find((r) => r.metadata.queue === 'rp-backoff')?.actor_user_id, null)
})
