import t from 'tap'
import type { Page } from 'playwright-core'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'
import { hasChromium, launchChromium, newBrowserPage } from '../support/browser.ts'
import { eventually, httpRequest } from '../support/harness.ts'

// Issue 28, item 3: the overview's Queues table shows each queue's pause, and an admin pauses and
// resumes from it; a viewer sees the state and no button. Headless Chromium against the whole service.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

// The polls' safety-net re-check is far beyond the waits below: a poll that answers soon after a resume was woken by it.
const h = await startPlatformHarness(t, import.meta.filename, { tunables: { poll_tick_ms: 20_000 } })
const browser = await launchChromium(t)

const newPage = () => newBrowserPage(t, browser)

async function logIn(page: Page, user: Pick<VerifiedUser, 'email' | 'password'>) {
  await page.goto(`${h.url}/dashboard/login`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}`)
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
}

const owner = await newVerifiedUser(h)
const api = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)
const queueState = async () => (await api('GET', '/jobsvc/v1/queues')).body.data.find((q: { queue: string }) => q.queue === 'mails')

t.test('an admin pauses and resumes a queue from the overview', async (t) => {
  const created = await api('POST', '/jobsvc/v1/jobs', { job_type: 'send', payload: {}, queue: 'mails' })
  t.equal(created.status, 201)
  await eventually(async () => (await api('GET', `/jobsvc/v1/metrics/queues?min_seq=${created.headers.get('x-event-seq')}`)).body.data.length > 0)
  const page = await newPage()
  await logIn(page, owner)
  const row = page.locator('tr[data-queue="mails"]')
  await row.locator('[data-queue-state=running]').waitFor()
  await page.getByRole('button', { name: 'Pause the queue mails' }).click()
  await row.locator('[data-queue-state=paused]').waitFor()
  t.match(await queueState(), { paused: true, reason: null }, 'the service holds the pause')
  t.match(await row.locator('[data-queue-state]').textContent(), /paused/)
  await page.getByRole('button', { name: 'Resume the queue mails' }).click()
  await row.locator('[data-queue-state=running]').waitFor()
  t.match(await queueState(), { paused: false })
})

t.test('a viewer sees a pause with its reason, and no button', async (t) => {
  t.equal((await api('POST', '/jobsvc/v1/queues/mails/pause', { reason: 'provider outage' })).status, 200)
  const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
  const page = await newPage()
  await logIn(page, viewer)
  const cell = page.locator('tr[data-queue="mails"] [data-queue-state=paused]')
  await cell.waitFor()
  t.match(await cell.textContent(), /provider outage/)
  t.equal(await page.getByRole('button', { name: /the queue mails/ }).count(), 0, 'no Pause or Resume for a viewer')
})

t.test("a dashboard session's poll parked on a paused queue is woken by the resume at once", async (t) => {
  t.equal((await api('POST', '/jobsvc/v1/queues/session-q/pause', {})).status, 200)
  const created = await api('POST', '/jobsvc/v1/jobs', { job_type: 'send', payload: {}, queue: 'session-q' })
  const asSession = { authorization: `Bearer ${owner.jwt}`, 'x-jobsvc-project': owner.projectId }
  const parked = httpRequest(
    h.url,
    null,
    'POST',
    '/jobsvc/v1/workers/poll',
    { worker_id: 'session-w', queues: ['session-q'], wait_seconds: 15 },
    asSession,
  )
  const early = await Promise.race([parked, new Promise((r) => setTimeout(() => r('parked'), 1_000))])
  t.equal(early, 'parked', 'nothing while paused')
  const resumedAt = Date.now()
  t.equal((await api('POST', '/jobsvc/v1/queues/session-q/resume')).status, 200)
  const answer = await parked
  t.ok(Date.now() - resumedAt < 3_000, `woken at once (${Date.now() - resumedAt} ms; the re-check is 20 s)`)
  t.same(
    answer.body.jobs.map((j: { id: string }) => j.id),
    [created.body.id],
  )
})

t.test("an admin sets and removes a queue's default ttl from the overview; a viewer sees it", async (t) => {
  const created = await api('POST', '/jobsvc/v1/jobs', { job_type: 'send', payload: {}, queue: 'codes' })
  t.equal(created.status, 201)
  await eventually(async () => (await api('GET', `/jobsvc/v1/metrics/queues?min_seq=${created.headers.get('x-event-seq')}`)).body.data.length > 0)
  const page = await newPage()
  await logIn(page, owner)
  const field = page.getByLabel('Default ttl in seconds of the queue codes')
  t.equal(await field.inputValue(), '', 'none at first')
  await field.fill('300')
  await page.locator('tr[data-queue="codes"]').getByRole('button', { name: 'Save' }).click()
  await page.locator('tr[data-queue="codes"] [data-queue-ttl="300"]').waitFor()
  const held = (await api('GET', '/jobsvc/v1/queues')).body.data.find((q: { queue: string }) => q.queue === 'codes')
  t.equal(held.default_ttl_seconds, 300, 'the service holds it')

  const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
  const seen = await newPage()
  await logIn(seen, viewer)
  const cell = seen.locator('tr[data-queue="codes"] [data-queue-ttl="300"]')
  await cell.waitFor()
  t.equal(await cell.textContent(), '5 min')
  t.equal(await seen.getByLabel(/Default ttl/).count(), 0, 'no field for a viewer')

  await field.fill('')
  await page.locator('tr[data-queue="codes"]').getByRole('button', { name: 'Save' }).click()
  await page.locator('tr[data-queue="codes"] [data-queue-ttl=""]').waitFor()
  t.equal((await api('GET', '/jobsvc/v1/queues')).body.data.find((q: { queue: string }) => q.queue === 'codes').default_ttl_seconds, null, 'removed')
})
