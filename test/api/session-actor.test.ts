import t, { type Test } from 'tap'
import { eventually, httpRequest, type HttpResponse } from '../support/harness.ts'
import { deadLetteredJob, projectJobsApi } from '../support/dashboard.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Changes made with a dashboard session (a member's JWT and X-Jobsvc-Project) under /jobsvc/v1 are
// recorded in the activity feed as that member's, by user id and e-mail; the same changes made
// with the project's API key name no member.
const h = await startPlatformHarness(t, import.meta.filename, { roles: ['api', 'projector', 'scheduler'] })
const owner = await newVerifiedUser(h)
const admin = await joinProject(h, owner, owner.projectId, 'admin')
const member = await joinProject(h, owner, owner.projectId, 'member')
const api = projectJobsApi(h, owner.apiKey, { jobType: 'actor.test' })

const asSession = (user: VerifiedUser) => ({ authorization: `Bearer ${user.jwt}`, 'x-jobsvc-project': owner.projectId })
const bySession = (user: VerifiedUser, method: string, path: string, body?: unknown) => httpRequest(h.url, null, method, path, body, asSession(user))
const byKey = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)

function ok(t: Test, res: HttpResponse, status: number, what: string): HttpResponse {
  t.equal(res.status, status, `${what}: ${res.status} ${res.status === status ? '' : JSON.stringify(res.body)}`)
  return res
}

interface FeedRow {
  id: string
  kind: string
  target_id: string | null
  metadata: string | null
}

async function feed(): Promise<FeedRow[]> {
  const res = await bySession(owner, 'GET', '/jobsvc/v1/activity?limit=100')
  if (res.status !== 200) throw new Error(`activity: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body.data
}

/** The actor the feed names for the row of `kind` about `targetId` (waiting for the projector). */
async function actorOf(kind: string, targetId: string | null): Promise<unknown> {
  const row = await eventually(
    async () => (await feed()).find((r) => r.kind === kind && (targetId === null || r.target_id === targetId)),
    15_000,
    `${kind} ${targetId}`,
  )
  return JSON.parse(row.metadata ?? '{}').actor ?? null
}

/** The audit trail's actor column of the same row. */
async function actorUserIdOf(kind: string, targetId: string | null): Promise<string | null> {
  const [row] = await h.runtime.sql<{ user_id: string | null }[]>`
    SELECT user_id FROM activity WHERE project_id = ${owner.projectId} AND kind = ${kind}
      AND (${targetId}::text IS NULL OR target_id = ${targetId}) ORDER BY seq DESC LIMIT 1`
  return row?.user_id ?? null
}

const named = (user: VerifiedUser) => ({ user_id: user.userId, email: user.email })

t.test('a member’s job changes through the session name the member', async (t) => {
  const created = ok(
    t,
    await bySession(member, 'POST', '/jobsvc/v1/jobs', { job_type: 'actor.test', queue: 'by-session', payload: {} }),
    201,
    'create',
  )
  t.same(await actorOf('job_created', created.body.id), named(member), 'job_created')
  t.equal(await actorUserIdOf('job_created', created.body.id), member.userId, 'the audit trail’s actor column')
  const batch = ok(
    t,
    await bySession(member, 'POST', '/jobsvc/v1/jobs/batch', { jobs: [{ job_type: 'actor.test', queue: 'by-session', payload: {} }] }),
    200,
    'batch',
  )
  t.same(await actorOf('job_created', batch.body.results[0].body.id), named(member), 'a batch item’s job_created')

  ok(t, await bySession(member, 'POST', `/jobsvc/v1/jobs/${created.body.id}/cancel`), 200, 'cancel')
  t.same(await actorOf('job_cancelled', created.body.id), named(member), 'job_cancelled')

  const failed = await deadLetteredJob(api, 'actor-retry', 'actor.test')
  ok(t, await bySession(member, 'POST', `/jobsvc/v1/jobs/${failed}/retry`), 200, 'retry')
  t.same(await actorOf('job_retried', failed), named(member), 'job_retried')

  ok(
    t,
    await bySession(member, 'GET', `/jobsvc/v1/jobs/export?from=${new Date(Date.now() - 3_600_000).toISOString()}&until=${new Date().toISOString()}`),
    200,
    'export',
  )
  t.same(await actorOf('jobs_exported', null), named(member), 'jobs_exported')
})

t.test('schedules and alerts changed through the session name the member', async (t) => {
  const schedule = { job_type: 'actor-nightly', cron_expression: '0 3 * * *' }
  ok(t, await bySession(member, 'PUT', '/jobsvc/v1/recurring/rjob_actor-nightly', schedule), 201, 'schedule')
  t.same(await actorOf('recurring_upserted', 'rjob_actor-nightly'), named(member), 'recurring_upserted')
  ok(t, await bySession(member, 'DELETE', '/jobsvc/v1/recurring/rjob_actor-nightly'), 204, 'schedule deleted')
  t.same(await actorOf('recurring_deleted', 'rjob_actor-nightly'), named(member), 'recurring_deleted')

  const alert = { name: 'backlog', kind: 'queue_depth', queue: 'by-session', threshold: 100, email: [member.email] }
  const created = ok(t, await bySession(member, 'POST', '/jobsvc/v1/alerts', alert), 201, 'alert')
  t.same(await actorOf('alert_created', created.body.id), named(member), 'alert_created')
  ok(t, await bySession(member, 'PUT', `/jobsvc/v1/alerts/${created.body.id}`, { ...alert, threshold: 200 }), 200, 'alert updated')
  t.same(await actorOf('alert_updated', created.body.id), named(member), 'alert_updated')
  ok(t, await bySession(member, 'DELETE', `/jobsvc/v1/alerts/${created.body.id}`), 204, 'alert deleted')
  t.same(await actorOf('alert_deleted', created.body.id), named(member), 'alert_deleted')
})

t.test('webhooks and the retry policy changed by an admin’s session name the admin', async (t) => {
  const hook = ok(t, await bySession(admin, 'POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/jobs', events: ['job.failed'] }), 201, 'webhook')
  t.same(await actorOf('webhook_created', hook.body.id), named(admin), 'webhook_created')
  ok(t, await bySession(admin, 'PATCH', `/jobsvc/v1/webhooks/${hook.body.id}`, { is_active: false }), 200, 'webhook updated')
  t.same(await actorOf('webhook_updated', hook.body.id), named(admin), 'webhook_updated')
  ok(t, await bySession(admin, 'POST', `/jobsvc/v1/webhooks/${hook.body.id}/rotate-secret`), 200, 'secret rotated')
  t.same(await actorOf('webhook_secret_rotated', hook.body.id), named(admin), 'webhook_secret_rotated')
  ok(t, await bySession(admin, 'DELETE', `/jobsvc/v1/webhooks/${hook.body.id}`), 204, 'webhook deleted')
  t.same(await actorOf('webhook_deleted', hook.body.id), named(admin), 'webhook_deleted')

  const policy = { base_delay_seconds: 5, factor: 2, max_delay_seconds: 60, jitter_seconds: 1, max_attempts: 4 }
  ok(t, await bySession(admin, 'PUT', '/jobsvc/v1/queues/by-admin/retry-policy', policy), 200, 'retry policy')
  t.same(await actorOf('retry_policy_updated', null), named(admin), 'retry_policy_updated')
  t.equal(await actorUserIdOf('retry_policy_updated', null), admin.userId, 'the audit trail’s actor column, no longer the project’s')
})

t.test('the same changes through an API key name no member', async (t) => {
  const created = ok(t, await byKey('POST', '/jobsvc/v1/jobs', { job_type: 'actor.test', queue: 'by-key', payload: {} }), 201, 'create')
  ok(t, await byKey('POST', `/jobsvc/v1/jobs/${created.body.id}/cancel`), 200, 'cancel')
  t.equal(await actorOf('job_cancelled', created.body.id), null, 'job_cancelled')
  t.equal(await actorUserIdOf('job_cancelled', created.body.id), null)
  ok(t, await byKey('PUT', '/jobsvc/v1/recurring/rjob_actor-by-key', { job_type: 'actor-by-key', cron_expression: '0 4 * * *' }), 201, 'schedule')
  t.equal(await actorOf('recurring_upserted', 'rjob_actor-by-key'), null, 'recurring_upserted')
})
