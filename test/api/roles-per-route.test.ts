import { readFileSync } from 'node:fs'
import t from 'tap'
import { hasRoleAtLeast, type ProjectRole } from '../../domain/project/index.ts'
import { apiDescriptionPath } from '../../services/roles/api/openapi.ts'
import { isRemovedWrapperPath } from '../../services/roles/api/routes/removed-wrappers.ts'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, repoRoot } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Issue 23, item 6: every /jobsvc/v1 route declares the role a dashboard session needs, instead of
// the hook guessing from the method (every GET needed only `viewer`: a viewer read webhook URLs
// and the whole audit trail, and spent the project's export cooldown). This walks the routes the
// API registered, so a new one cannot be forgotten, with a viewer's, a member's and an admin's
// session, and holds each answer to the README's table.

const h = await startPlatformHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const api = await startApiProcess(t, h.runtime)
const owner = await newVerifiedUser(h)
const sessions: Array<{ role: ProjectRole; user: VerifiedUser }> = []
for (const role of ['viewer', 'member', 'admin'] as const) sessions.push({ role, user: await joinProject(h, owner, owner.projectId, role) })
const userOf = (role: ProjectRole) => sessions.find((s) => s.role === role)!.user

const asSession = (user: VerifiedUser, method: string, path: string, body?: unknown) =>
  httpRequest(api.url, null, method, path, body, { authorization: `Bearer ${user.jwt}`, 'x-jobsvc-project': owner.projectId })

/** `METHOD /path/{param}` → least role, from the "Roles per route" table of docs/api-notes.md. */
function readmeRoles(): Map<string, ProjectRole> {
  const readme = readFileSync(`${repoRoot}docs/api-notes.md`, 'utf8')
  const section = readme.split('\n## Roles per route\n')[1]!.split(/\n#{2,4} /)[0]!
  const rows = [...section.matchAll(/^\| `([A-Z]+ \/jobsvc\/v1\S*)` \| (viewer|member|admin|owner) \|/gm)]
  return new Map(rows.map((m) => [m[1]!, m[2] as ProjectRole]))
}

/** The routes that take a project role, as `METHOD /path/{param}`, with the role they declare. */
function registeredRoles(): Map<string, ProjectRole | undefined> {
  const found = new Map<string, ProjectRole | undefined>()
  for (const route of api.routes) {
    if (!route.url.startsWith('/jobsvc/v1/')) continue
    // Public (the API description, the audit log's signing keys) or answering 410 to everyone (removed compatibility routes).
    if (route.url === apiDescriptionPath || route.url.startsWith('/jobsvc/v1/audit/keys') || isRemovedWrapperPath(route.url)) continue
    const path = route.url.replace(/:([A-Za-z]+)/g, '{$1}').replace(/\/$/, '')
    for (const method of ([] as string[]).concat(route.method)) if (method !== 'HEAD') found.set(`${method} ${path}`, route.role)
  }
  return found
}

/** A path to call: unknown ids (a 404 past the role check is an admission), the project's own id. */
function concrete(path: string): string {
  return path
    .replace('{jobId}', 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV')
    .replace('{id}', 'not-a-known-id')
    .replace('{queue}', 'roles-queue')
    .replace('{projectId}', owner.projectId)
}

t.test('the README table names every registered route, with the role it declares', async (t) => {
  const table = readmeRoles()
  const registered = registeredRoles()
  t.ok(registered.size >= 40, `the project routes are found (${registered.size})`)
  t.same([...registered.keys()].sort(), [...table.keys()].sort(), 'the same routes')
  for (const [route, role] of registered) t.equal(role, table.get(route), `${route} declares the role the README gives`)
})

t.test('every route, with a viewer, a member and an admin session: allowed or 403 forbidden as the table says', async (t) => {
  const table = readmeRoles()
  for (const [route, least] of table) {
    const [method, path] = route.split(' ') as [string, string]
    for (const { role, user } of sessions) {
      const body = method === 'GET' || method === 'DELETE' ? undefined : {}
      const res = await asSession(user, method, concrete(path), body)
      const what = `${role}: ${route} → ${res.status} ${res.body?.error?.code ?? ''}`
      if (hasRoleAtLeast(role, least)) {
        t.ok(res.status !== 401 && res.status !== 403 && res.status < 500, what)
        t.not(res.body?.error?.code, 'project_not_found', what)
      } else {
        isError(t, res, 403, 'forbidden', what)
      }
    }
  }
})

t.test('webhooks, reads included, are for admins: their URLs often hold a credential', async (t) => {
  const created = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/webhooks', {
    url: 'https://8.8.8.8/in?token=s3cret-in-the-url',
    events: '*',
  })
  t.equal(created.status, 201)
  for (const role of ['viewer', 'member'] as const) {
    isError(t, await asSession(userOf(role), 'GET', '/jobsvc/v1/webhooks'), 403, 'forbidden', `a ${role} lists none`)
    isError(t, await asSession(userOf(role), 'GET', `/jobsvc/v1/webhooks/${created.body.id}`), 403, 'forbidden', `a ${role} reads none`)
    isError(t, await asSession(userOf(role), 'GET', `/jobsvc/v1/webhooks/${created.body.id}/deliveries`), 403, 'forbidden')
  }
  const listed = await asSession(userOf('admin'), 'GET', '/jobsvc/v1/webhooks')
  t.equal(listed.status, 200)
  t.equal(listed.body.data[0].url, 'https://8.8.8.8/in?token=s3cret-in-the-url', 'an admin reads it')
})

t.test('the activity feed below admin holds no webhook URL and no invitee', async (t) => {
  const invitee = `pending-${Date.now()}@example.com`
  const invited = await h.platform('POST', `/platform/v1/projects/${owner.projectId}/members`, { email: invitee, role: 'viewer' }, { jwt: owner.jwt })
  t.equal(invited.status, 201)
  const hookUrl = 'https://8.8.8.8/activity?token=another-s3cret'
  t.equal((await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/webhooks', { url: hookUrl, events: '*' })).status, 201)
  const job = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'roles.check', payload: {} })
  t.equal(job.status, 201)

  const feedOf = async (role: ProjectRole) => {
    const rows: any[] = []
    let cursor: string | null = null
    do {
      const query: string = `limit=100&min_seq=${job.headers.get('x-event-seq')}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`
      const page = await asSession(userOf(role), 'GET', `/jobsvc/v1/activity?${query}`)
      t.equal(page.status, 200, `${role} reads the feed`)
      rows.push(...page.body.data)
      cursor = page.body.next_cursor
    } while (cursor !== null)
    return rows
  }
  const whole = await eventually(async () => {
    const rows = await feedOf('admin')
    return rows.some((r) => r.kind === 'member_invited' && JSON.stringify(r).includes(invitee)) ? rows : null
  })
  t.ok(
    whole.some((r) => r.kind === 'webhook_created' && JSON.stringify(r).includes(hookUrl)),
    'an admin reads the whole trail, webhook URLs included',
  )
  t.ok(whole.some((r) => r.kind === 'job_created'))
  for (const role of ['viewer', 'member'] as const) {
    const rows = await feedOf(role)
    const text = JSON.stringify(rows)
    t.ok(
      rows.some((r) => r.kind === 'job_created' && r.target_id === job.body.id),
      `a ${role} reads the jobs' rows`,
    )
    t.notOk(text.includes(hookUrl) || text.includes('s3cret'), `a ${role} reads no webhook URL`)
    t.notOk(text.includes(invitee), `a ${role} reads no invitee`)
    t.same(
      [...new Set(rows.map((r) => r.target_type))].filter((type) => !['job', 'recurring', 'alert'].includes(type)),
      [],
      'only jobs, schedules, alerts',
    )
  }
})

t.test("a viewer's export is refused before it spends the project's cooldown", async (t) => {
  const window = `from=${encodeURIComponent(new Date(Date.now() - 3_600_000).toISOString())}&until=${encodeURIComponent(new Date().toISOString())}`
  isError(t, await asSession(userOf('viewer'), 'GET', `/jobsvc/v1/jobs/export?${window}`), 403, 'forbidden')
  const exported = await asSession(userOf('member'), 'GET', `/jobsvc/v1/jobs/export?${window}`)
  t.equal(exported.status, 200, "the member's export runs: the viewer took no cooldown")
  isError(t, await asSession(userOf('member'), 'GET', `/jobsvc/v1/jobs/export?${window}`), 429, 'rate_limit_exceeded', 'the cooldown applies')
})
