import t from 'tap'
import { hasChromium, launchChromium, newBrowserPage } from '../support/browser.ts'
import { projectJobsApi } from '../support/dashboard.ts'
import { eventually, httpRequest } from '../support/harness.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Issue 28, item 1 in the dashboard: the job page of a running job offers a member "Cancel the
// running job" (the cancel with include_running), then says the cancel is asked for until the
// worker stops; the worker's heartbeat hears it and its ack ends the job cancelled on the page.
// A viewer sees no button. Headless Chromium against the whole service.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)
const owner = await newVerifiedUser(h)
const api = projectJobsApi(h, owner.apiKey, { jobType: 'render.video' })
const call = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)

async function logIn(user: Pick<VerifiedUser, 'email' | 'password'>) {
  const page = await newBrowserPage(t, browser)
  await page.goto(`${h.url}/dashboard/login`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
  return page
}

/** A logged-in page on the job, once it shows the job in `state`. */
async function openJob(user: Pick<VerifiedUser, 'email' | 'password'>, jobId: string, state = 'processing') {
  const page = await logIn(user)
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${jobId}`)
  await page.locator(`#job-state [data-state=${state}]`).waitFor()
  return page
}

t.test('a member cancels a running job; the worker hears it and the page follows it to cancelled', async (t) => {
  const job = await api.create({ queue: 'renders', max_attempts: 3 })
  await api.claimOne('renders', 'wrk_render')
  const page = await openJob(owner, job.id)
  t.equal(await page.getByRole('button', { name: 'Cancel', exact: true }).count(), 0, "the spec's cancel is not offered for a running job")
  await page.getByRole('button', { name: 'Cancel the running job' }).click()
  await page.locator('[data-field=cancel-requested]').waitFor()
  t.equal(await page.getByRole('button', { name: 'Cancel the running job' }).count(), 0, 'asked once, the button gives way to what happens')
  const heartbeat = await call('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'wrk_render' })
  t.strictSame(heartbeat.body, { status: 'cancel' }, "the worker's heartbeat answers cancel")
  const acked = await api.ack({
    job_id: job.id,
    worker_id: 'wrk_render',
    status: 'failed',
    error: { type: 'Cancelled', message: 'stopped', stack_trace: '' },
  })
  t.equal(acked.status, 200)
  await page.locator('#job-state [data-state=cancelled]').waitFor()
  t.equal(await page.locator('[data-field=cancel-requested]').count(), 0, 'the notice goes with the end')
})

t.test('a viewer sees the running job and no cancel', async (t) => {
  const job = await api.create({ queue: 'renders-viewed' })
  await api.claimOne('renders-viewed', 'wrk_viewed')
  const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
  const page = await openJob(viewer, job.id)
  t.equal(await page.getByRole('button', { name: /Cancel/ }).count(), 0)
})

t.test("a member changes a waiting job's priority on its page; a running job's is shown only", async (t) => {
  const job = await api.create({ queue: 'renders-later', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  const page = await openJob(owner, job.id, 'scheduled')
  const field = page.getByLabel('Priority in seconds')
  t.equal(await field.inputValue(), '0', 'a job without a priority shows 0')
  await field.fill('120')
  await page.getByRole('button', { name: 'Set priority' }).click()
  // The page reads the job again; only then is its field back in step with the service.
  await page.locator('[data-field=priority][data-priority="120"]').waitFor()
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(resolve)))
  t.equal((await call('GET', `/jobsvc/v1/jobs/${job.id}`)).body.priority, 120, 'the service holds it')
  await field.fill('601')
  await page.getByRole('button', { name: 'Set priority' }).click()
  t.equal(await field.evaluate((el: HTMLInputElement) => el.validity.valid), false, 'the browser refuses past 600 before asking')
  t.equal((await call('GET', `/jobsvc/v1/jobs/${job.id}`)).body.priority, 120)

  const running = await api.create({ queue: 'renders-prio', priority: -30 })
  await api.claimOne('renders-prio', 'wrk_prio')
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${running.id}`)
  await page.locator('#job-state [data-state=processing]').waitFor()
  t.equal(await page.locator('[data-field=priority]').textContent(), '-30 s')
  t.equal(await page.getByLabel('Priority in seconds').count(), 0, 'no change once it runs')
})

t.test('a job that expired says so on its page, with its ttl', async (t) => {
  const job = await api.create({ queue: 'renders-stale', ttl_seconds: 1 })
  await eventually(async () => (await call('GET', `/jobsvc/v1/jobs/${job.id}`)).body.state === 'cancelled', 20_000, 'the expiry sweep')
  const page = await openJob(owner, job.id, 'cancelled')
  t.match(await page.locator('[data-field=cancel-reason]').textContent(), /expired: not claimed within 1\.0 s/)
  t.match(await page.locator('[data-field=expires]').textContent(), /ttl 1\.0 s/)
})
