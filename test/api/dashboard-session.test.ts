import t from 'tap'
import { eventually, httpRequest } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'
import { joinProject, newVerifiedUser, startPlatformHarness } from '../support/platform.ts'
import { deadLetteredJob, projectJobsApi } from '../support/dashboard.ts'

// Issue 18: the dashboard's pages and files, served by the API role, and how the dashboard reaches
// a project's /jobsvc/v1 data: with the member's session and the project named in
// X-Jobsvc-Project, the member's role enforced by the service, never an API key in the browser.
const h = await startPlatformHarness(t, import.meta.filename)
const owner = await newVerifiedUser(h)
const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
const member = await joinProject(h, owner, owner.projectId, 'member')
const api = projectJobsApi(h, owner.apiKey, { jobType: 'charge.card' })

const asMember = (user: { jwt: string }, projectId = owner.projectId) => ({ authorization: `Bearer ${user.jwt}`, 'x-jobsvc-project': projectId })
const session = (user: { jwt: string }, method: string, path: string, body?: unknown, projectId?: string) =>
  httpRequest(h.url, null, method, path, body, asMember(user, projectId))

t.test('the dashboard page, its files and its security headers', async (t) => {
  const page = await fetch(`${h.url}/dashboard`)
  const html = await page.text()
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type'), /^text\/html/)
  t.equal(page.headers.get('cache-control'), 'no-cache')
  t.equal(page.headers.get('referrer-policy'), 'no-referrer', 'tokens in account links never leave in a Referer')
  const csp = page.headers.get('content-security-policy') ?? ''
  t.match(csp, /default-src 'self'/)
  t.match(csp, /script-src 'self' 'sha256-[A-Za-z0-9+/=]+'(;|$)/, 'scripts only from the service, plus the inline import map by its hash')
  t.notMatch(html, /https?:\/\//, 'no asset from another origin: the page works offline')

  const deepLink = await fetch(`${h.url}/dashboard/projects/${owner.projectId}/jobs?state=failed`)
  t.equal(deepLink.status, 200, 'a page of the app answers index.html')
  t.equal(await deepLink.text(), html)

  const vendored = /"preact":"([^"]+)"/.exec(html)?.[1]
  t.ok(vendored, 'the import map names preact')
  const preact = await fetch(h.url + vendored!)
  t.equal(preact.status, 200)
  t.match(preact.headers.get('content-type'), /^text\/javascript/)
  t.equal(preact.headers.get('cache-control'), 'public, max-age=31536000, immutable', 'named by content hash, cached for a year')
  await preact.arrayBuffer()

  const app = await fetch(`${h.url}/dashboard/assets/app.js`)
  const etag = app.headers.get('etag')
  await app.arrayBuffer()
  t.equal(app.status, 200)
  t.equal(app.headers.get('cache-control'), 'no-cache', 'revalidated, so a deploy is seen at once')
  const again = await fetch(`${h.url}/dashboard/assets/app.js`, { headers: { 'if-none-match': etag! } })
  t.equal(again.status, 304)

  const missing = await httpRequest(h.url, null, 'GET', '/dashboard/assets/no-such-file.js')
  isError(t, missing, 404, 'route_not_found')
})

t.test('the e-mailed links land on dashboard pages', async (t) => {
  for (const path of ['/verify', '/reset-password', '/accept-invite']) {
    const res = await fetch(`${h.url}${path}?token=abc_123`, { redirect: 'manual' })
    t.equal(res.status, 302, path)
    t.equal(res.headers.get('location'), `/dashboard${path}?token=abc_123`, path)
  }
})

t.test('a session reaches project data with the project header, by Bearer or cookie', async (t) => {
  const job = await api.create({ queue: 'reads' })
  const listed = await eventually(async () => {
    const res = await session(viewer, 'GET', `/jobsvc/v1/jobs?queue=reads`)
    return res.status === 200 && res.body.data.length === 1 ? res : null
  })
  t.equal(listed.body.data[0].id, job.id)
  const byCookie = await httpRequest(h.url, null, 'GET', `/jobsvc/v1/jobs/${job.id}`, undefined, {
    cookie: `sv_jwt=${viewer.jwt}`,
    'x-jobsvc-project': owner.projectId,
  })
  t.equal(byCookie.status, 200)
  t.equal(byCookie.body.id, job.id)

  isError(
    t,
    await httpRequest(h.url, null, 'GET', '/jobsvc/v1/jobs', undefined, { authorization: `Bearer ${viewer.jwt}` }),
    401,
    'unauthorized',
    'a session without the header',
  )
  isError(
    t,
    await httpRequest(h.url, null, 'GET', '/jobsvc/v1/jobs', undefined, { 'x-jobsvc-project': owner.projectId }),
    401,
    'unauthorized',
    'the header without a session',
  )
  const stranger = await newVerifiedUser(h)
  isError(t, await session(stranger, 'GET', '/jobsvc/v1/jobs'), 404, 'project_not_found', 'not a member')
  isError(t, await session(owner, 'GET', '/jobsvc/v1/jobs', undefined, stranger.projectId), 404, 'project_not_found', "another user's project")
})

t.test('the member role decides, enforced by the service', async (t) => {
  const failedJob = await deadLetteredJob(api, 'roles')
  const viewerRetry = await session(viewer, 'POST', `/jobsvc/v1/jobs/${failedJob}/retry`)
  isError(t, viewerRetry, 403, 'forbidden', "a viewer's retry")
  t.match(viewerRetry.body.error.request_id, /^[0-9A-Z]{26}$/)
  isError(t, await session(viewer, 'POST', `/jobsvc/v1/jobs/${failedJob}/cancel`), 403, 'forbidden', "a viewer's cancel")
  isError(t, await session(viewer, 'POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {} }), 403, 'forbidden', "a viewer's create")
  isError(
    t,
    await session(member, 'POST', '/jobsvc/v1/webhooks', { url: 'https://example.com/hook', events: ['*'] }),
    403,
    'forbidden',
    "a member's webhook: admin manages webhooks",
  )
  const retried = await session(member, 'POST', `/jobsvc/v1/jobs/${failedJob}/retry`)
  t.equal(retried.status, 200, "a member's retry")
  t.equal(retried.body.state, 'pending')
  const pending = await api.create({ queue: 'roles-cancel' })
  t.equal((await session(member, 'POST', `/jobsvc/v1/jobs/${pending.id}/cancel`)).status, 200, "a member's cancel")
})
