import { join } from 'node:path'
import t from 'tap'
import type { BrowserContext, Page } from 'playwright-core'
import { eventually, httpRequest } from '../support/harness.ts'
import { freshEmail, freshIp, joinProject, sessionFrom, startPlatformHarness, totpCode } from '../support/platform.ts'
import { hasChromium, launchChromium, screenshotFolder } from '../support/browser.ts'
import { deadLetteredJob, projectJobsApi, sampleFailure } from '../support/dashboard.ts'

// Issue 18, Done when: the dashboard driven in headless Chromium against the whole service, as a
// new customer would use it. Screenshots are taken on every run; they replace the README's
// docs/screenshots only with JOBSVC_UPDATE_SCREENSHOTS=1, so a test run leaves the tree clean.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)
const screenshots = screenshotFolder(t)

/** A browser profile of its own, in a time zone that is not the server's. */
async function newPage(viewport = { width: 1280, height: 900 }): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return { context, page }
}

/** The e-mailed link, sent to this test's server instead of the configured PUBLIC_URL host. */
const linkIn = (text: string) => {
  const link = /https?:\/\/\S+/.exec(text)?.[0]
  if (!link) throw new Error(`no link in ${text}`)
  const url = new URL(link)
  return `${h.url}${url.pathname}${url.search}`
}

const email = freshEmail('dash')
const password = `pw-${Date.now()}-dashboard`
const { page } = await newPage()
let projectId = ''
let apiKey = ''
let totpSecret = ''
let ownerJwt = ''

t.test('sign up, verify through the e-mailed link, log in with TOTP', async (t) => {
  await page.goto(`${h.url}/dashboard/signup`)
  await page.getByLabel('E-mail').fill(email)
  await page.getByLabel(/^Password/).fill(password)
  await page.getByLabel('I accept the terms of service').check()
  await page.getByRole('button', { name: 'Sign up' }).click()
  await page.getByRole('heading', { name: 'Check your e-mail' }).waitFor()

  const mail = await h.smtp.next(email, /verify/i)
  await page.goto(linkIn(mail.text))
  t.match(page.url(), /\/dashboard\/verify\?token=/, 'the root link redirects to the dashboard page')
  await page.getByRole('heading', { name: 'Your address is verified' }).waitFor()
  apiKey = (await page.locator('[data-secret]').textContent()) ?? ''
  t.match(apiKey, /^sv_live_sk_[0-9a-f]{32}$/, 'the first API key, shown once')

  // Two-factor is switched on over the API here (settings.test.ts sets it up through the page).
  const login = await h.platform('POST', '/platform/v1/auth/login', { email, password })
  ownerJwt = sessionFrom(login)
  projectId = login.body.projects[0].id
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt: ownerJwt })
  totpSecret = setup.body.secret
  t.equal((await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(totpSecret) }, { jwt: ownerJwt })).status, 200)

  await page.goto(`${h.url}/dashboard/login`)
  await page.getByLabel('E-mail').fill(email)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Log in' }).click()
  // The code just used to enable 2FA cannot be replayed: the next step's code is accepted (±1 step).
  await page.getByLabel('Authenticator code').fill(totpCode(totpSecret, new Date(), 1))
  await page.getByRole('button', { name: 'Log in' }).click()
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
  t.match(page.url(), new RegExp(`/dashboard/projects/${projectId}$`))
  // An empty project's overview: which key is current, and a worker and a job to copy.
  await page.locator('.first-steps').waitFor()
  t.equal(await page.locator('p[data-chart=latency]').textContent(), 'No attempt finished in the last hour.', 'an empty chart says so')
  t.ok(apiKey.startsWith((await page.locator('.first-steps [data-key-prefix]').textContent())!.replace('…', '')), 'the current key, by its prefix')
  t.match(await page.locator('[data-snippet=worker]').textContent(), new RegExp(`baseUrl: '${h.url}'`), 'a worker pointed at this service')
  t.match(await page.locator('[data-snippet=job]').textContent(), /\/jobsvc\/v1\/jobs/, 'and a job to create')
})

const api = () => projectJobsApi(h, apiKey, { jobType: 'email.send' })
let deadJob = ''

t.test('jobs created through the API are listed and filtered', async (t) => {
  for (let i = 0; i < 3; i++) await api().create({ queue: 'mail', payload: { to: `user${i}@example.com` } })
  for (let i = 0; i < 2; i++) await api().create({ job_type: 'report.build', queue: 'reports', payload: { month: `2024-0${i + 1}` } })
  deadJob = await deadLetteredJob(api(), 'billing')

  await page.getByRole('link', { name: 'Jobs', exact: true }).click()
  const rows = page.locator('table.jobs tbody tr')
  await eventually(async () => (await rows.count()) === 6, 15_000, 'six jobs listed')
  t.pass('every job is listed')

  await page.getByLabel('Queue').fill('reports')
  await page.getByRole('button', { name: 'Apply' }).click()
  await eventually(async () => (await rows.count()) === 2, 15_000, 'the reports queue')
  t.same(await page.locator('table.jobs tbody td:nth-child(3)').allTextContents(), ['report.build', 'report.build'], 'filtered by queue')
  t.match(page.url(), /queue=reports/, 'the filter is in the address, so it can be shared')

  await page.getByLabel('Queue').fill('')
  await page.getByLabel('State').selectOption('dead_letter')
  await page.getByLabel('Created').selectOption('1h')
  await page.getByRole('button', { name: 'Apply' }).click()
  await eventually(async () => (await rows.count()) === 1, 15_000, 'one dead-lettered job')
  t.equal(await rows.first().getAttribute('data-job'), deadJob, 'filtered by state and time window')

  await page.getByLabel('State').selectOption('')
  await page.getByLabel('Created').selectOption('')
  await page.getByRole('button', { name: 'Apply' }).click()
  await eventually(async () => (await rows.count()) === 6, 15_000, 'all six again')
  const late = await api().create({ queue: 'mail', payload: { to: 'late@example.com' }, tags: { tenant: 'acme' } })
  await page.locator(`table.jobs tr[data-job="${late.id}"]`).waitFor({ timeout: 15_000 })
  t.pass('a job created after the page loaded is listed without a reload')
  await page.locator(`a[href$="/jobs/${late.id}"]`).click()
  await page.locator('[data-field=tags]', { hasText: 'tenant=acme' }).waitFor()
  t.pass('the job page shows its tags')
})

t.test('the Workers page lists a worker and follows it without a reload', async (t) => {
  const worker = (path: string, body: object) => httpRequest(h.url, apiKey, 'POST', `/jobsvc/v1/workers/${path}`, body)
  await worker('register', { worker_id: 'wrk-dash', queues: ['thumbs'], job_types: ['thumb.make'], hostname: 'render-1', sdk_version: 'node/0.1.0' })
  await page.getByRole('link', { name: 'Workers', exact: true }).click()
  const row = page.locator('table.workers tr[data-worker="wrk-dash"]')
  await row.waitFor()
  t.match(await row.textContent(), /render-1/, 'its host')
  t.equal(await row.locator('[data-status]').getAttribute('data-status'), 'active')
  t.equal(await row.locator('td[data-running]').getAttribute('data-running'), '0', 'idle at first')
  const job = await api().create({ job_type: 'thumb.make', queue: 'thumbs', payload: {} })
  await api().claimOne('thumbs', 'wrk-dash')
  await row.locator('td[data-running="1"]').waitFor({ timeout: 20_000 })
  t.equal(await row.locator(`a[href$="/jobs/${job.id}"]`).count(), 1, 'the job it runs, linked, shown without a reload')
  await api().ack({ job_id: job.id, worker_id: 'wrk-dash', status: 'succeeded' })
  await row.locator('td[data-finished]', { hasText: '1 succeeded' }).waitFor({ timeout: 20_000 })
  const navFits = await page.locator('header.top').evaluate((el) => el.scrollWidth <= el.clientWidth)
  t.ok(navFits, 'the navigation fits at 1,280 px')
})

t.test('the overview counts jobs by state (screenshot)', async (t) => {
  await page.getByRole('link', { name: 'Overview', exact: true }).click()
  await page.locator('[data-state=pending].number').waitFor()
  t.equal(await page.locator('.number[data-state=pending]').textContent(), '6')
  t.equal(await page.locator('.number[data-state=dead_letter]').textContent(), '1')
  await page.getByRole('cell', { name: 'mail', exact: true }).waitFor()
  const hour = await httpRequest(h.url, apiKey, 'GET', '/jobsvc/v1/metrics/throughput?percentiles=window')
  for (const key of ['p50_ms', 'p95_ms', 'p99_ms']) {
    t.equal(
      await page.locator(`[data-percentile=${key}]`).getAttribute('data-ms'),
      String(hour.body.window_percentiles[key] ?? ''),
      `the hour's ${key.slice(0, 3)}, of every attempt it finished (not the worst minute's)`,
    )
  }
  // Charts drawn by uPlot: axes with ticks, and a legend that reads the bucket under the cursor.
  const latency = page.locator('[data-chart=latency]')
  await latency.locator('canvas').waitFor()
  t.ok((await latency.locator('.u-axis').count()) >= 2, 'the latency chart has its time and value axes')
  t.same(await latency.locator('.u-legend .u-series .u-label').allTextContents(), ['Time', 'p50', 'p95', 'p99'], 'a legend of its series')
  await latency.scrollIntoViewIfNeeded()
  const box = (await latency.locator('.u-over').boundingBox())!
  for (let x = box.x + box.width - 2; x > box.x; x -= 4) {
    await page.mouse.move(x, box.y + box.height / 2)
    if (((await latency.locator('.u-legend .u-series').nth(1).locator('.u-value').textContent()) ?? '—') !== '—') break
  }
  const legendText = await latency.locator('.u-legend').textContent()
  t.match(legendText, /p50\s*\d/, `hovering a bucket reads its p50 (the tooltip): ${legendText} at ${JSON.stringify(box)}`)
  t.ok((await page.locator('[data-chart=throughput] canvas').count()) === 1, 'the throughput chart is drawn')
  await page.screenshot({ path: join(screenshots, 'overview.png'), fullPage: true })
})

t.test('a dead-lettered job: its error and history, then Retry, watched live to succeeded', async (t) => {
  await page.goto(`${h.url}/dashboard/projects/${projectId}/jobs?state=dead_letter`)
  await page.locator(`a[href$="/jobs/${deadJob}"]`).click()
  await page.locator('.job-error', { hasText: sampleFailure.message }).waitFor()
  t.match(await page.locator('pre.stack').textContent(), /at charge \(worker\/billing\.ts:42:11\)/, 'the stack trace')
  t.equal(await page.locator('[data-field=timeout]').textContent(), '1800 s', 'its timeout')
  t.equal(await page.locator('[data-field=worker]').textContent(), 'worker-dashboard-test', 'the worker of its last attempt')
  t.match(
    await page.locator('.timeline .attempt-error').first().textContent(),
    new RegExp(`attempt 1: ${sampleFailure.type}: ${sampleFailure.message}`),
    "each attempt's error, in the history",
  )
  const history = await page.locator('.timeline .event-type').allTextContents()
  t.same(history.slice(0, 2), ['created', 'claimed'], 'the history, oldest first')
  t.ok(
    history.some((type) => /dead/.test(type)),
    `the dead-lettering is in the history: ${history.join(', ')}`,
  )
  await page.screenshot({ path: join(screenshots, 'job.png'), fullPage: true })

  await page.getByRole('button', { name: 'Retry' }).click()
  await page.locator('#job-state [data-state=pending]').waitFor()
  const claimed = await api().claimOne('billing', 'worker-dashboard-test')
  await page.locator('#job-state [data-state=processing]').waitFor()
  t.pass('the claim is seen live')
  await api().ack({ job_id: claimed.id, worker_id: 'worker-dashboard-test', status: 'succeeded', duration_ms: 80, result: { receipt: 'rcpt_7' } })
  await page.locator('#job-state [data-state=succeeded]').waitFor()
  t.pass('the success is seen live, without reloading the page')
  await page.locator('pre.result', { hasText: 'rcpt_7' }).waitFor()
  t.pass("the worker's result is shown once the job has ended")
  t.equal(await page.getByRole('button', { name: 'Retry' }).count(), 0)
})

t.test('a viewer sees no Retry, and the service refuses the call anyway', async (t) => {
  const stillDead = await deadLetteredJob(api(), 'billing-viewer')
  const viewer = await joinProject(h, { jwt: ownerJwt } as Parameters<typeof joinProject>[1], projectId, 'viewer')
  const { page: viewerPage } = await newPage({ width: 390, height: 844 })
  await viewerPage.goto(`${h.url}/dashboard/login?next=${encodeURIComponent(`/projects/${projectId}/jobs/${stillDead}`)}`)
  await viewerPage.getByLabel('E-mail').fill(viewer.email)
  await viewerPage.getByLabel('Password').fill(viewer.password)
  await viewerPage.getByRole('button', { name: 'Log in' }).click()
  await viewerPage.locator('.job-error', { hasText: sampleFailure.message }).waitFor()
  t.equal(await viewerPage.getByRole('button', { name: 'Retry' }).count(), 0, 'no Retry button for a viewer')
  const refused = await viewerPage.evaluate(
    async ([project, job]) => {
      const res = await fetch(`/jobsvc/v1/jobs/${job}/retry`, { method: 'POST', headers: { 'x-jobsvc-project': project! } })
      return { status: res.status, body: await res.json() }
    },
    [projectId, stillDead],
  )
  t.equal(refused.status, 403)
  t.equal(refused.body.error.code, 'forbidden', "the viewer's session cannot retry")
})

t.test('rotate the API key and see the new one once', async (t) => {
  await page.goto(`${h.url}/dashboard/projects/${projectId}/api-key`)
  await page.getByRole('button', { name: 'Rotate the key' }).click()
  const secret = page.locator('[data-secret]')
  await secret.waitFor()
  const rotated = (await secret.textContent()) ?? ''
  t.match(rotated, /^sv_live_sk_[0-9a-f]{32}$/)
  t.not(rotated, apiKey)
  t.equal((await httpRequest(h.url, rotated, 'GET', '/jobsvc/v1/jobs', undefined, { 'x-forwarded-for': freshIp() })).status, 200, 'the new key works')
  await page.getByRole('link', { name: 'Overview', exact: true }).click()
  await page.getByRole('link', { name: 'API key', exact: true }).click()
  await page.getByRole('heading', { name: 'API key' }).waitFor()
  t.equal(await page.locator('[data-secret]').count(), 0, 'shown once: gone after leaving the page')
  t.match(await page.locator('[data-key-prefix]').textContent(), rotated.slice(0, 24))
})
