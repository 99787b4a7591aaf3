import t from 'tap'
import type { Page } from 'playwright-core'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'
import { hasChromium, launchChromium, newBrowserPage } from '../support/browser.ts'
import { projectJobsApi, deadLetteredJob } from '../support/dashboard.ts'
import { eventually, httpRequest } from '../support/harness.ts'

// Issue 28, item 6: the jobs list's "Retry all matching" and "Cancel all matching" for its filter:
// the count first (a dry run), then the operation's progress to its end; a member sees neither.
// Headless Chromium against the whole service, the dispatcher running the operation.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename, { roles: ['api', 'projector', 'scheduler', 'dispatcher'] })
const browser = await launchChromium(t)

async function logIn(page: Page, user: Pick<VerifiedUser, 'email' | 'password'>, path: string) {
  await page.goto(`${h.url}/dashboard/login`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}${path}`)
  await page.getByRole('heading', { name: 'Jobs' }).waitFor()
}

const owner = await newVerifiedUser(h)
const api = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)
const jobs = projectJobsApi(h, owner.apiKey, { jobType: 'charge.card' })

t.test('an admin retries every dead-lettered job of a queue: the count first, then the progress', async (t) => {
  const ids = [await deadLetteredJob(jobs, 'billing'), await deadLetteredJob(jobs, 'billing'), await deadLetteredJob(jobs, 'billing')]
  await deadLetteredJob(jobs, 'other')
  await eventually(async () => (await api('GET', '/jobsvc/v1/jobs?queue=billing&state=dead_letter')).body.data.length === 3)
  const page = await newBrowserPage(t, browser)
  await logIn(page, owner, '/jobs?queue=billing&state=dead_letter')
  await page.getByRole('button', { name: 'Retry all matching' }).click()
  const counted = page.locator('.confirm-bulk [data-matched]')
  await counted.waitFor()
  t.equal(await counted.getAttribute('data-matched'), '3', 'the count of the filter, before anything changes')
  for (const id of ids) t.equal((await api('GET', `/jobsvc/v1/jobs/${id}`)).body.state, 'dead_letter', 'nothing changed yet')
  await page.getByRole('button', { name: 'Retry 3 jobs' }).click()
  await page.locator('.operation [data-status=succeeded]').waitFor()
  t.equal(await page.locator('.operation [data-count=succeeded]').textContent(), '3')
  t.match(await page.locator('.operation [role=status]').textContent(), /3 jobs changed, 0 skipped/)
  for (const id of ids) t.not((await api('GET', `/jobsvc/v1/jobs/${id}`)).body.state, 'dead_letter', 'retried')
  const others = (await api('GET', '/jobsvc/v1/jobs?queue=other')).body.data
  t.equal(others[0].state, 'dead_letter', 'a job outside the filter is untouched')
})

t.test('cancel all matching counts pending jobs; a state the action cannot take counts none', async (t) => {
  for (let i = 0; i < 2; i++) await jobs.create({ queue: 'later', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  await eventually(async () => (await api('GET', '/jobsvc/v1/jobs?queue=later')).body.data.length === 2)
  const page = await newBrowserPage(t, browser)
  await logIn(page, owner, '/jobs?queue=later')
  await page.getByRole('button', { name: 'Cancel all matching' }).click()
  await page.locator('.confirm-bulk [data-matched="2"]').waitFor()
  await page.getByRole('button', { name: 'Cancel 2 jobs' }).click()
  await page.locator('.operation [data-status=succeeded]').waitFor()
  const states = (await api('GET', '/jobsvc/v1/jobs?queue=later')).body.data.map((j: { state: string }) => j.state)
  t.strictSame(states, ['cancelled', 'cancelled'])
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs?queue=later&state=cancelled`)
  await page.getByRole('button', { name: 'Cancel all matching' }).click()
  await page.locator('.confirm-bulk [data-matched="0"]').waitFor()
  t.equal(await page.getByRole('button', { name: /^Cancel \d+ job/ }).count(), 0, 'nothing to confirm')
})

t.test('a member sees no bulk action', async (t) => {
  const member = await joinProject(h, owner, owner.projectId, 'member')
  const page = await newBrowserPage(t, browser)
  await logIn(page, member, '/jobs')
  t.equal(await page.getByRole('button', { name: /all matching/ }).count(), 0)
})
