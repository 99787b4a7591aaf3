import t from 'tap'
import type { Page } from 'playwright-core'
import { hasChromium, launchChromium } from '../support/browser.ts'
import { projectJobsApi, sampleFailure } from '../support/dashboard.ts'
import { httpRequest } from '../support/harness.ts'
import { newVerifiedUser, startPlatformHarness } from '../support/platform.ts'

// Issue 27, item 3: the job page's time slider over the job's history shows the job as of the
// selected event (GET /jobs/{id}?as_of=<the event's cursor>), in headless Chromium against the
// whole service, for a job driven through create, claim, failed ack, retry, claim, success.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)
const owner = await newVerifiedUser(h)
const api = projectJobsApi(h, owner.apiKey, { jobType: 'slider.job' })
const call = (method: string, path: string) => httpRequest(h.url, owner.apiKey, method, path)

async function newPage(): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return page
}

const page = await newPage()
const failures: string[] = []
page.on('pageerror', (error) => failures.push(error.message))
await page.goto(`${h.url}/dashboard/login`)
await page.getByLabel('E-mail').fill(owner.email)
await page.getByLabel('Password').fill(owner.password)
await page.getByRole('button', { name: 'Log in' }).click()
await page.getByRole('heading', { name: 'Overview' }).waitFor()

t.test('the slider shows the job as of each event of its history, then back to now', async (t) => {
  const queue = 'slider'
  const job = await api.create({ queue, payload: { invoice: 'inv_42' }, max_attempts: 1 })
  await api.claimOne(queue, 'wrk_slider')
  await api.ack({ job_id: job.id, worker_id: 'wrk_slider', status: 'failed', error: sampleFailure })
  t.equal((await call('POST', `/jobsvc/v1/jobs/${job.id}/retry`)).status, 200, 'retried')
  await api.claimOne(queue, 'wrk_slider')
  await api.ack({ job_id: job.id, worker_id: 'wrk_slider', status: 'succeeded', result: { paid: true } })
  const events = (await call('GET', `/jobsvc/v1/jobs/${job.id}/history`)).body.data as Array<{ type: string; cursor: string; sequence: number }>
  t.same(
    events.map((e) => e.type),
    ['job_created', 'job_claimed', 'job_dead_lettered', 'job_retried', 'job_claimed', 'job_succeeded'],
  )
  const expected = await Promise.all(
    events.map(async (e) => (await call('GET', `/jobsvc/v1/jobs/${job.id}?as_of=${encodeURIComponent(e.cursor)}`)).body),
  )

  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${job.id}`)
  await page.locator('#job-state [data-state=succeeded]').waitFor()
  await page.locator('.as-of-point[data-as-of=now]').waitFor()
  const slider = page.getByRole('slider', { name: 'As of' })
  t.equal(await slider.getAttribute('max'), String(events.length), 'one stop per event, then now')
  t.equal(await slider.inputValue(), String(events.length), 'the page opens at now')

  await slider.focus()
  await page.keyboard.press('Home')
  for (let i = 0; i < events.length; i++) {
    if (i > 0) await page.keyboard.press('ArrowRight')
    const then = expected[i]
    const what = `as of ${events[i]!.type} (${i + 1} of ${events.length})`
    await page.locator(`.as-of-point[data-as-of="${events[i]!.cursor}"]`).waitFor()
    await page.locator('[data-field=as-of-sequence]', { hasText: `log sequence ${then.as_of.sequence} of ${then.as_of.latest_sequence}` }).waitFor()
    t.equal(await page.locator('#job-state [data-state]').getAttribute('data-state'), then.state, `${what}: the state then`)
    t.equal(await page.locator('[data-field=attempt]').textContent(), `${then.attempt} of ${then.max_attempts}`, `${what}: the attempt then`)
    t.equal(await page.locator('[data-field=worker]').textContent(), then.worker_id ?? '—', `${what}: the worker then`)
    t.equal(await page.locator('.job-error').count(), then.error === null ? 0 : 1, `${what}: the error then`)
    t.equal(await page.locator('pre.result').count(), then.result === null ? 0 : 1, `${what}: the result then`)
    t.equal(await page.locator('.timeline li[aria-current=step]').getAttribute('data-event'), events[i]!.type, `${what}: marked in the history`)
    t.equal(await page.getByRole('button', { name: /^(Retry|Cancel)$/ }).count(), 0, `${what}: no action on a past state`)
  }

  await page.keyboard.press('ArrowRight')
  await page.locator('.as-of-point[data-as-of=now]').waitFor()
  t.equal(await page.locator('#job-state [data-state]').getAttribute('data-state'), 'succeeded', 'the last stop is the job now')

  await page.keyboard.press('Home')
  await page.locator(`.as-of-point[data-as-of="${events[0]!.cursor}"]`).waitFor()
  await page.locator('#job-state [data-state=pending]').waitFor()
  await page.getByRole('button', { name: 'Back to now' }).click()
  await page.locator('.as-of-point[data-as-of=now]').waitFor()
  await page.locator('#job-state [data-state=succeeded]').waitFor()
  t.equal(await slider.inputValue(), String(events.length), 'Back to now moves the slider to its end')
  t.strictSame(failures, [], 'no script error on the page')
})
