import t from 'tap'
import type { Page } from 'playwright-core'
import { feedAggregates, feedAggregatesBelowAdmin, feedEventTypes } from '../../domain/event-feed.ts'
import { hasChromium, launchChromium } from '../support/browser.ts'
import { projectJobsApi } from '../support/dashboard.ts'
import { eventually, httpRequest } from '../support/harness.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Issue 25, item 4: the dashboard's Events page tails the project's feed (GET /jobsvc/v1/events)
// live, in headless Chromium against the whole service: a job created through the API appears
// without a reload, a type filter hides the other types, Pause and Resume lose nothing, and a
// viewer's tail holds only what the service lets a viewer read.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)

async function newPage(viewport = { width: 1280, height: 900 }): Promise<Page> {
  const context = await browser.newContext({ viewport, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return page
}

async function logIn(page: Page, user: Pick<VerifiedUser, 'email' | 'password'>, next = '/') {
  await page.goto(`${h.url}/dashboard/login?next=${encodeURIComponent(next)}`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
}

/** The tail's rows, newest first. */
const rows = (page: Page) => page.locator('table.events tbody tr[data-type]')
const row = (page: Page, type: string, aggregateId: string) =>
  page.locator(`table.events tr[data-type="${type}"][data-aggregate-id="${aggregateId}"]`)
const shown = (page: Page, attribute: 'type' | 'aggregate') =>
  rows(page).evaluateAll((trs, name) => trs.map((tr) => tr.getAttribute(`data-${name}`) ?? ''), attribute)
const typePicker = (page: Page) =>
  page.locator('select[name=add_type] option:not([value=""])').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value))

const owner = await newVerifiedUser(h)
const api = projectJobsApi(h, owner.apiKey, { jobType: 'feed.watch' })
const page = await newPage()
const failures: string[] = []
page.on('pageerror', (error) => failures.push(error.message))
await logIn(page, owner)
await page.getByRole('heading', { name: 'Overview' }).waitFor()

t.test('a job created through the API appears live at the top, and its row opens to its data and state', async (t) => {
  await page.getByRole('link', { name: 'Events', exact: true }).click()
  await page.getByRole('heading', { name: 'Events' }).waitFor()
  await page.locator('[data-status=live]').waitFor()
  const job = await api.create({ queue: 'feed', payload: { to: 'ada@example.com' } })
  await row(page, 'job_created', job.id).waitFor()
  t.pass('job_created is shown without a reload')
  await api.claimOne('feed', 'worker-events-test')
  await row(page, 'job_claimed', job.id).waitFor()
  t.equal(await rows(page).first().getAttribute('data-type'), 'job_claimed', 'newest at the top')
  t.ok((await shown(page, 'aggregate')).includes('project'), "the owner's tail holds the project's own events (the sign-up's)")

  await row(page, 'job_created', job.id)
    .getByRole('button', { name: /^Details of job_created/ })
    .click()
  const detail = page.locator('tr.event-detail')
  const data = JSON.parse((await detail.locator('pre[data-json=data]').textContent()) ?? '')
  t.match(data, { job_id: job.id, queue: 'feed', payload: { to: 'ada@example.com' } }, "the event's data, payload included")
  const state = JSON.parse((await detail.locator('pre[data-json=state]').textContent()) ?? '')
  t.match(state, { id: job.id, state: 'pending' }, 'the state after job_created')
  await row(page, 'job_created', job.id)
    .getByRole('button', { name: /^Details of job_created/ })
    .click()
  t.equal(await detail.count(), 0, 'Hide folds it again')
  t.same((await typePicker(page)).sort(), feedAggregates.flatMap((a) => feedEventTypes[a]).sort(), "the type picker lists the feed's catalogue")
})

t.test('a type filter hides the other types; the picker adds to the comma list', async (t) => {
  await page.getByLabel('Event types').fill('job_created')
  await page.getByRole('button', { name: 'Apply' }).click()
  t.match(page.url(), /[?&]types=job_created(&|$)/, 'the filter is in the address, so it can be shared')
  const second = await api.create({ queue: 'feed' })
  await api.claimOne('feed', 'worker-events-test')
  const third = await api.create({ queue: 'feed' })
  await row(page, 'job_created', third.id).waitFor()
  // The log orders the second job's claim before the third's creation: kept, it would be on the page by now.
  await row(page, 'job_created', second.id).waitFor()
  t.same([...new Set(await shown(page, 'type'))], ['job_created'], 'only job_created rows')
  t.equal(await row(page, 'job_claimed', second.id).count(), 0, 'the claim is filtered out')

  await page.getByLabel('Add a type').selectOption('job_claimed')
  t.equal(await page.getByLabel('Event types').inputValue(), 'job_created,job_claimed')
  await page.getByRole('button', { name: 'Apply' }).click()
  await row(page, 'job_claimed', second.id).waitFor()
  t.same([...new Set(await shown(page, 'type'))].sort(), ['job_claimed', 'job_created'], 'both types, read again from the start')
})

t.test('Pause stops the tail; Resume reads on from where it stopped', async (t) => {
  await page.locator('[data-status=live]').waitFor()
  await page.getByRole('button', { name: 'Pause' }).click()
  await page.locator('[data-status=paused]').waitFor()
  const during = await api.create({ queue: 'feed' })
  await eventually(async () => {
    const feed = await httpRequest(h.url, owner.apiKey, 'GET', `/jobsvc/v1/events?job_id=${during.id}`)
    return feed.body.data.length > 0
  })
  t.equal(await row(page, 'job_created', during.id).count(), 0, 'not shown while paused, though the log holds it')
  await page.getByRole('button', { name: 'Resume' }).click()
  await row(page, 'job_created', during.id).waitFor()
  t.pass('shown after Resume')
  t.equal(await row(page, 'job_created', during.id).count(), 1, 'once')
})

t.test("a viewer's tail holds only the events of jobs, progress, schedules and alerts", async (t) => {
  const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
  const phone = await newPage({ width: 390, height: 844 })
  phone.on('pageerror', (error) => failures.push(error.message))
  await logIn(phone, viewer, `/projects/${owner.projectId}/events?start=1h`)
  await phone.locator('[data-status=live]').waitFor()
  const job = await api.create({ queue: 'feed' })
  await row(phone, 'job_created', job.id).waitFor()
  const aggregates = new Set(await shown(phone, 'aggregate'))
  t.ok(
    [...aggregates].every((a) => (feedAggregatesBelowAdmin as readonly string[]).includes(a)),
    `no project, webhook or delivery event although the invitation is in the hour: ${[...aggregates].join(', ')}`,
  )
  t.same((await typePicker(phone)).sort(), feedAggregatesBelowAdmin.flatMap((a) => feedEventTypes[a]).sort(), 'the picker offers only those types')
  t.equal(await phone.locator('[role=alert]').count(), 0, 'nothing refused')
  t.same(failures, [], 'no script error')
})
