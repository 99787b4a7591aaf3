import { join } from 'node:path'
import t from 'tap'
import type { Page } from 'playwright-core'
import { joinProject, newVerifiedUser, startPlatformHarness, totpCode, type VerifiedUser } from '../support/platform.ts'
import { hasChromium, launchChromium, screenshotFolder } from '../support/browser.ts'
import { eventually, httpRequest } from '../support/harness.ts'

// Issue 18, the account and project pages after the first increment: 2FA set up through the page,
// notification preferences, a webhook's secret shown once, and a viewer without team or billing
// controls, in headless Chromium against the whole service.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)
const screenshots = screenshotFolder(t)

async function newPage(viewport = { width: 1280, height: 900 }): Promise<Page> {
  const context = await browser.newContext({ viewport, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return page
}

async function logIn(page: Page, user: Pick<VerifiedUser, 'email' | 'password'>, next = '/', totp?: string) {
  await page.goto(`${h.url}/dashboard/login?next=${encodeURIComponent(next)}`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
  if (totp !== undefined) {
    await page.getByLabel('Authenticator code').fill(totp)
    await page.getByRole('button', { name: 'Log in' }).click()
  }
}

const owner = await newVerifiedUser(h)
const page = await newPage()
await logIn(page, owner)
await page.getByRole('heading', { name: 'Overview' }).waitFor()
let recoveryCode = ''

t.test('2FA set up through the page: a QR code, recovery codes shown once, then a log-in with TOTP', async (t) => {
  await page.getByRole('link', { name: owner.email }).click()
  await page.getByRole('heading', { name: 'Account settings' }).waitFor()
  await page.getByRole('button', { name: 'Set up two-factor' }).click()
  await page.locator('svg[data-qr] path').waitFor()
  t.ok(((await page.locator('svg[data-qr] path').getAttribute('d')) ?? '').length > 1000, 'the QR code is drawn')
  const secret = (await page.locator('[data-totp-secret]').textContent()) ?? ''
  t.match(secret, /^[A-Z2-7]+=*$/, 'the secret, for typing in by hand')
  await page.getByRole('region', { name: 'Two-factor authentication' }).screenshot({ path: join(screenshots, 'two-factor.png') })
  await page.getByLabel('Authenticator code').fill(totpCode(secret))
  await page.getByRole('button', { name: 'Turn on two-factor' }).click()
  const codes = page.locator('[data-recovery-codes] code')
  await codes.first().waitFor()
  const recovery = await codes.allTextContents()
  t.equal(recovery.length, 10, 'ten recovery codes')
  recoveryCode = recovery[0]!
  t.match(recovery[0], /^[a-z2-9]{4}-[a-z2-9]{4}$/)
  t.ok((await h.platform('GET', '/platform/v1/auth/me', undefined, { jwt: owner.jwt })).body.totp_enabled, 'the service has 2FA on')

  await page.getByRole('link', { name: 'jobsvc' }).click()
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
  await page.getByRole('link', { name: owner.email }).click()
  await page.getByText('Two-factor authentication is').waitFor()
  t.equal(await page.locator('[data-recovery-codes]').count(), 0, 'shown once: gone after leaving the page')

  await page.getByRole('button', { name: 'Log out' }).click()
  await page.getByRole('heading', { name: 'Log in' }).waitFor()
  // The code that enabled 2FA cannot be replayed: the next step's is accepted (±1 step).
  await logIn(page, owner, '/settings', totpCode(secret, new Date(), 1))
  await page.getByText('Two-factor authentication is on').waitFor()
  t.pass('logged in with TOTP')
})

t.test('notification preferences are saved; security notices cannot be turned off', async (t) => {
  const security = page.getByRole('checkbox', { name: /Security notices/ })
  await security.waitFor()
  t.ok(await security.isChecked())
  t.ok(await security.isDisabled(), 'the security switch is disabled')
  await page.getByRole('checkbox', { name: /Product news/ }).check()
  await page.getByRole('checkbox', { name: /Allowance warnings/ }).uncheck()
  await page.getByRole('button', { name: 'Save the preferences' }).click()
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor()
  const saved = await page.evaluate(async () => (await fetch('/platform/v1/account/notifications')).json())
  t.same(saved, { security_notices: true, allowance_warnings: false, overage_charges: true, alert_emails: true, product_news: true })
  const refused = await page.evaluate(async () => {
    const res = await fetch('/platform/v1/account/notifications', {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ security_notices: false }),
    })
    return { status: res.status, body: await res.json() }
  })
  t.equal(refused.status, 400)
  t.equal(refused.body.error.code, 'security_notices_required', 'the service refuses it too')
})

t.test('a webhook is created with its secret shown once, then rotated', async (t) => {
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/webhooks`)
  await page.getByText('No webhooks yet.').waitFor()
  await page.getByLabel('URL').fill('https://8.8.8.8/hook')
  await page.getByRole('checkbox', { name: 'job.failed' }).check()
  await page.getByRole('button', { name: 'Create the webhook' }).click()
  const secret = page.locator('[data-secret]')
  await secret.waitFor()
  const first = (await secret.textContent()) ?? ''
  t.match(first, /^whsec_/, 'the signing secret')
  await page.locator('table.webhooks tbody tr').waitFor()
  await page.screenshot({ path: join(screenshots, 'webhooks.png'), fullPage: true })
  t.match(await page.locator('table.webhooks tbody tr').textContent(), /job\.failed/)

  await page.getByRole('link', { name: 'https://8.8.8.8/hook' }).click()
  await page.getByRole('heading', { name: 'Deliveries' }).waitFor()
  t.equal(await page.locator('[data-secret]').count(), 0, 'shown once: not on the webhook page')
  await page.getByText('Nothing delivered yet.').waitFor()
  await page.getByRole('button', { name: 'Rotate the secret' }).click()
  await secret.waitFor()
  const rotated = (await secret.textContent()) ?? ''
  t.match(rotated, /^whsec_/)
  t.not(rotated, first, 'a new secret')
})

t.test('the owner invites a member through the team page', async (t) => {
  await page.getByRole('link', { name: 'Team', exact: true }).click()
  await page.getByLabel('E-mail').fill('new-teammate@example.com')
  await page.locator('select[name=role]').selectOption('viewer')
  await page.getByRole('button', { name: 'Send the invitation' }).click()
  await page.getByRole('cell', { name: 'new-teammate@example.com' }).waitFor()
  t.pass('the invitation is listed')
  await page.getByRole('link', { name: 'Billing', exact: true }).click()
  await page.locator('[data-plan]').waitFor()
  t.equal(await page.getByRole('button', { name: 'Save' }).count(), 1, 'the owner can change billing')
})

t.test('a viewer sees no team or billing controls, and the service refuses them anyway', async (t) => {
  const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
  const viewerPage = await newPage({ width: 390, height: 844 })
  await logIn(viewerPage, viewer, `/projects/${owner.projectId}/team`)
  await viewerPage.locator(`tr[data-member="${viewer.email}"]`).waitFor()
  t.equal(await viewerPage.getByRole('button', { name: 'Send the invitation' }).count(), 0, 'no invitation form')
  t.equal(await viewerPage.getByRole('button', { name: /^Remove/ }).count(), 0, 'no Remove buttons')
  t.equal(await viewerPage.locator('table.members select').count(), 0, 'no role pickers')
  await viewerPage.getByRole('link', { name: 'Billing', exact: true }).click()
  await viewerPage.locator('[data-plan]').waitFor()
  t.equal(await viewerPage.getByRole('button', { name: 'Save' }).count(), 0, 'no billing controls')
  await viewerPage.getByRole('link', { name: 'Webhooks', exact: true }).click()
  await viewerPage.getByText("Webhooks are shown to the project's admins and owner only.").waitFor()
  t.equal(await viewerPage.locator('[role=alert]').count(), 0, 'webhooks are not asked for, so nothing is refused')
  // Issue 23, item 6: below admin the activity feed holds the jobs', schedules' and alerts' rows,
  // never the webhook's URL nor the pending invitee the owner made above.
  const job = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'viewer.sees', payload: {} })
  t.equal(job.status, 201)
  await eventually(async () => {
    const feed = await httpRequest(h.url, owner.apiKey, 'GET', `/jobsvc/v1/activity?min_seq=${job.headers.get('x-event-seq')}`)
    return feed.body.data.some((row: { target_id: string }) => row.target_id === job.body.id)
  })
  await viewerPage.getByRole('link', { name: 'Activity', exact: true }).click()
  await viewerPage.getByText('Webhooks, keys, the team and billing are in the trail shown to admins and the owner.').waitFor()
  await viewerPage.getByRole('table').or(viewerPage.locator('p.empty')).first().waitFor()
  t.equal(await viewerPage.locator('tr[data-kind="job_created"]').count(), 0, 'job creations are hidden at first')
  await viewerPage.getByLabel('Show job creations').check()
  await viewerPage.locator('tr[data-kind="job_created"]').first().waitFor()
  t.pass('and shown when asked for')
  t.equal(await viewerPage.locator('tr[data-kind="webhook_created"], tr[data-kind="member_invited"]').count(), 0, 'no webhook or invitation row')
  const feedText = (await viewerPage.locator('main').textContent()) ?? ''
  t.notMatch(feedText, /8\.8\.8\.8|new-teammate@example\.com/, 'neither the URL nor the invitee is on the page')
  t.equal(await viewerPage.locator('[role=alert]').count(), 0, 'the feed is read, not refused')
  const refused = await viewerPage.evaluate(async (project) => {
    const res = await fetch(`/platform/v1/projects/${project}/members`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'someone@example.com', role: 'viewer' }),
    })
    return { status: res.status, body: await res.json() }
  }, owner.projectId)
  t.equal(refused.status, 403)
  t.equal(refused.body.error.code, 'forbidden', "the viewer's session cannot invite")
})

t.test('every project page opens at phone width without an error; a schedule and an alert are made through the pages', async (t) => {
  const phone = await newPage({ width: 390, height: 844 })
  const failures: string[] = []
  phone.on('pageerror', (error) => failures.push(error.message))
  // The TOTP steps are spent by the log-in above: a recovery code, once.
  await logIn(phone, owner, `/projects/${owner.projectId}/recurring`)
  await phone.getByRole('button', { name: 'Use a recovery code instead' }).click()
  await phone.getByLabel('Recovery code').fill(recoveryCode)
  await phone.getByRole('button', { name: 'Log in' }).click()
  await phone.getByText('No recurring schedules.').waitFor()
  await phone.getByLabel('Job type').fill('report.build')
  await phone.getByLabel(/^Cron/).fill('0 6 * * *')
  await phone.getByRole('button', { name: 'Save the schedule' }).click()
  await phone.locator('tr[data-schedule="rjob_report-build"]').waitFor()
  t.pass('the schedule is listed under the id the service derives')

  await phone.getByRole('link', { name: 'Alerts', exact: true }).click()
  await phone.getByText('No alerts.').waitFor()
  await phone.getByLabel('Name').fill('Dead letters')
  await phone.getByLabel('Fires above').fill('3')
  await phone.getByRole('button', { name: 'Create the alert' }).click()
  await phone.getByRole('cell', { name: 'Dead letters', exact: true }).waitFor()
  t.pass('the alert is listed')

  await phone.getByRole('link', { name: 'Activity', exact: true }).click()
  await phone.locator('tr[data-kind="alert_created"]').first().waitFor()
  t.pass('the activity feed shows them')
  for (const [link, heading] of [
    ['Webhooks', 'Webhooks'],
    ['Team', 'Team'],
    ['Billing', 'Billing'],
  ]) {
    await phone.getByRole('link', { name: link, exact: true }).click()
    await phone.getByRole('heading', { name: heading, exact: true }).waitFor()
  }
  await phone.locator('[data-used]').waitFor()
  t.equal(await phone.locator('[role=alert]').count(), 0, 'no refusal shown')
  t.same(failures, [], 'no script error')
})
