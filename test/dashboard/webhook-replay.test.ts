import http from 'node:http'
import t from 'tap'
import type { Page } from 'playwright-core'
import { webhookEventTypes } from '../../domain/webhook.ts'
import { hasChromium, launchChromium } from '../support/browser.ts'
import { projectJobsApi } from '../support/dashboard.ts'
import { eventually, httpRequest } from '../support/harness.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Issue 25, item 4: a webhook's page in headless Chromium against the whole service (the
// dispatcher included, which fans out, delivers and runs replays), with a receiver on loopback.
// Jobs made before the subscription reach it only by a replay: counted first, then started and
// followed to the end; one of its deliveries is then redelivered; the list's filters; Stop.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

interface Received {
  path: string
  headers: http.IncomingHttpHeaders
  body: string
}

/** A receiver that answers 200, or holds its answers from `hold()` until `release()`. */
async function startReceiver() {
  const received: Received[] = []
  let held: (() => void)[] | null = null
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      received.push({ path: req.url ?? '', headers: req.headers, body })
      const answer = () => void res.writeHead(200).end('ok')
      if (held) held.push(answer)
      else answer()
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const release = () => {
    const waiting = held ?? []
    held = null
    for (const answer of waiting) answer()
  }
  t.teardown(() => {
    release()
    server.closeAllConnections()
    return new Promise<void>((r) => server.close(() => r()))
  })
  const port = (server.address() as { port: number }).port
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    at: (path: string) => received.filter((r) => r.path === path),
    hold: () => void (held = []),
    release,
  }
}

const receiver = await startReceiver()
const h = await startPlatformHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler', 'dispatcher'],
  config: { webhookAllowHosts: [`127.0.0.1:${receiver.port}`] },
  tunables: { webhook_retry_delays_ms: [100, 200, 300, 400], webhook_timeout_ms: 10_000 },
})
const browser = await launchChromium(t)

async function newPage(viewport = { width: 1280, height: 900 }): Promise<Page> {
  const context = await browser.newContext({ viewport, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  return page
}

async function logIn(page: Page, user: Pick<VerifiedUser, 'email' | 'password'>, next = '/') {
  await page.goto(`${h.url}/dashboard/login?next=${encodeURIComponent(next)}`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
}

/** `at` as a datetime-local value in the browser's time zone (Europe/Paris), to the second. */
const parisInput = (at: Date) => at.toLocaleString('sv-SE', { timeZone: 'Europe/Paris' }).replace(' ', 'T')
const jobIdOf = (r: Received) => JSON.parse(r.body).data.job_id as string

const owner = await newVerifiedUser(h)
const api = projectJobsApi(h, owner.apiKey, { jobType: 'replay.watch' })
const asOwner = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)
const page = await newPage()
const failures: string[] = []
page.on('pageerror', (error) => failures.push(error.message))
await logIn(page, owner)
await page.getByRole('heading', { name: 'Overview' }).waitFor()

const deliveryRows = () => page.locator('table.deliveries tbody tr')
const operation = () => page.locator('.replay .operation')
const countOf = (scope: ReturnType<Page['locator']>, name: string) => scope.locator(`[data-count=${name}]`).textContent()

let webhookId = ''
const jobIds: string[] = []
let operationId = ''

t.test('jobs made before a subscription: a missing replay is counted, started and followed to the end', async (t) => {
  // A subscription made first: once it has received every job's job.created, fan-out has passed
  // those events, so the subscription made after them gets them only by a replay.
  const canary = await asOwner('POST', '/jobsvc/v1/webhooks', { url: `${receiver.base}/canary`, events: ['job.created'] })
  t.equal(canary.status, 201, 'the canary subscription')
  for (let i = 0; i < 3; i++) jobIds.push((await api.create({ queue: 'before', payload: { i } })).id)
  await eventually(async () => jobIds.every((id) => receiver.at('/canary').some((r) => jobIdOf(r) === id)), 20_000, 'the canary got every job')

  await page.getByRole('link', { name: 'Webhooks', exact: true }).click()
  await page.getByLabel('URL').fill(`${receiver.base}/replayed`)
  await page.getByLabel('job.created').check()
  await page.getByRole('button', { name: 'Create the webhook' }).click()
  await page.getByRole('link', { name: `${receiver.base}/replayed` }).click()
  await page.getByRole('heading', { name: 'Replay events' }).waitFor()
  webhookId = (await page.locator('#webhook-title code').textContent()) ?? ''
  t.match(webhookId, /^whk_/)
  await page.getByText('Nothing delivered yet.').waitFor()
  t.equal(receiver.at('/replayed').length, 0, 'the jobs came before the subscription: nothing went out live')
  t.same(
    await page.getByLabel('Event type').locator('option:not([value=""])').allTextContents(),
    [...webhookEventTypes],
    "the type filter lists the service's webhook event types",
  )

  await page.getByLabel('Events from').fill(parisInput(new Date(Date.now() - 10 * 60_000)))
  await page.getByLabel(/^Missing/).check()
  await page.getByRole('button', { name: 'Count' }).click()
  const matched = page.locator('[data-matched]')
  await matched.waitFor()
  t.equal(await matched.getAttribute('data-matched'), '3', 'the dry run counts the three earlier jobs')
  t.match(await page.locator('.confirm-replay [role=status]').textContent(), `3 events would be sent to ${receiver.base}/replayed`)
  t.equal(await operation().count(), 0, 'nothing started by counting')
  t.equal(receiver.at('/replayed').length, 0, 'nor sent')

  await page.getByRole('button', { name: 'Start the replay' }).click()
  await operation().locator('[data-status=succeeded]').waitFor()
  operationId = (await operation().getAttribute('data-operation')) ?? ''
  t.match(operationId, /^op_/)
  t.same(
    [
      await countOf(operation(), 'matched'),
      await countOf(operation(), 'processed'),
      await countOf(operation(), 'succeeded'),
      await countOf(operation(), 'failed'),
    ],
    ['3', '3', '3', '0'],
    'matched, processed, succeeded, failed',
  )
  t.match(await operation().locator('[role=status]').textContent(), 'Done: of 3, 3 delivered and 0 failed.')
  t.equal(await operation().getByRole('button', { name: 'Stop' }).count(), 0, 'no Stop once it ended')

  const hits = receiver.at('/replayed')
  t.same(hits.map(jobIdOf).sort(), [...jobIds].sort(), 'the receiver got every earlier job.created, once')
  t.ok(
    hits.every((hit) => hit.headers['x-jobsvc-operation'] === operationId),
    'each names the replay',
  )

  await eventually(async () => (await page.locator('table.deliveries tr[data-status=delivered]').count()) === 3, 20_000, 'three delivered rows')
  const eventIds = await page.locator('table.deliveries [data-event-id]').allTextContents()
  t.same(eventIds.sort(), hits.map((hit) => String(hit.headers['x-service-event-id'])).sort(), 'the event id column names the events sent')
  t.same(
    (await deliveryRows().locator('.origin').allTextContents()).map((text) => text.trim()),
    [1, 2, 3].map(() => `Replay ${operationId}`),
    'each row is the replay’s',
  )

  await page.getByRole('link', { name: '← Webhooks' }).click()
  const listed = page.locator(`table.operations tr[data-operation="${operationId}"]`)
  await listed.locator('[data-status=succeeded]').waitFor()
  t.equal(await countOf(listed, 'succeeded'), '3', 'the Operations list shows it')
  await page.getByRole('link', { name: `${receiver.base}/replayed` }).click()
  await page.getByRole('heading', { name: 'Replay events' }).waitFor()
})

t.test('Redeliver: a new delivery of the same event, marked as a redelivery of the original', async (t) => {
  await eventually(async () => (await deliveryRows().count()) === 3, 20_000, 'the three deliveries')
  const original = deliveryRows().last()
  const originalId = (await original.getAttribute('data-delivery')) ?? ''
  const eventId = (await original.locator('[data-event-id]').textContent()) ?? ''
  await page.getByRole('button', { name: `Redeliver ${originalId}` }).click()

  const fresh = page.locator('table.deliveries tr.fresh')
  await fresh.waitFor()
  t.equal(await deliveryRows().first().getAttribute('data-delivery'), await fresh.getAttribute('data-delivery'), 'the newest, at the top')
  const freshId = (await fresh.getAttribute('data-delivery')) ?? ''
  t.not(freshId, originalId, 'a new delivery')
  t.equal(await fresh.locator('[data-event-id]').textContent(), eventId, 'of the same event')
  t.equal((await fresh.locator('.origin').textContent())?.trim(), `Redelivery of ${originalId}`, 'marked as a redelivery of the original')
  t.match(await page.locator('p.redelivered').textContent(), `Redelivery ${freshId} of ${originalId} queued`)
  await page.locator(`table.deliveries tr[data-delivery="${freshId}"][data-status=delivered]`).waitFor()
  t.pass('seen delivered without a reload')
  t.equal(await deliveryRows().count(), 4)

  const again = await eventually(async () => receiver.at('/replayed').find((r) => r.headers['x-jobsvc-redelivery'] === originalId))
  t.equal(again.headers['x-service-event-id'], eventId, 'the receiver got the same event again')
})

t.test('the filters: status, event type and creation time, kept in the address', async (t) => {
  const setFilters = async (filters: { status?: string; type?: string; from?: string; before?: string }) => {
    await page.getByLabel('Status').selectOption(filters.status ?? '')
    await page.getByLabel('Event type').selectOption(filters.type ?? '')
    await page.getByLabel('Created from').fill(filters.from ?? '')
    await page.getByLabel('Created before').fill(filters.before ?? '')
    await page.getByRole('button', { name: 'Apply' }).click()
  }
  await setFilters({ status: 'failed' })
  await page.getByText('No delivery matches these filters.').waitFor()
  t.match(page.url(), /[?&]status=failed(&|$)/, 'the filter is in the address')
  await setFilters({ status: 'delivered', type: 'job.created' })
  await eventually(async () => (await deliveryRows().count()) === 4, 20_000, 'four delivered job.created')
  await setFilters({ type: 'job.succeeded' })
  await page.getByText('No delivery matches these filters.').waitFor()
  await setFilters({ from: parisInput(new Date(Date.now() + 60 * 60_000)) })
  await page.getByText('No delivery matches these filters.').waitFor()
  await setFilters({ before: parisInput(new Date(Date.now() + 60 * 60_000)) })
  await eventually(async () => (await deliveryRows().count()) === 4, 20_000, 'all four before an hour from now')
  const until = new URL(page.url()).searchParams.get('until') ?? ''
  t.match(until, /Z$/, 'times go in the address as RFC 3339')
  await page.getByRole('button', { name: 'Clear' }).click()
  await eventually(async () => !new URL(page.url()).search, 5_000, 'no filter left in the address')
  t.equal(await deliveryRows().count(), 4)
})

t.test('Stop: a running replay ends cancelled', async (t) => {
  receiver.hold()
  await page.getByLabel(/^All/).check()
  await page.getByRole('button', { name: 'Count' }).click()
  await page.locator('[data-matched="3"]').waitFor()
  await page.getByRole('button', { name: 'Start the replay' }).click()
  await operation().locator('[data-status=running]').waitFor()
  const stopped = (await operation().getAttribute('data-operation')) ?? ''
  t.not(stopped, operationId, 'a second operation')
  await operation().getByRole('button', { name: 'Stop' }).click()
  await operation().locator('[data-status=cancelled]').waitFor()
  t.match(await operation().locator('[role=status]').textContent(), /^Stopped after \d of 3/)
  t.equal((await asOwner('GET', `/jobsvc/v1/operations/${stopped}`)).body.status, 'cancelled', 'the service has it cancelled')
  receiver.release()
  t.same(failures, [], 'no script error')
})

t.test("a member's session is shown no webhook page, and the service refuses a replay anyway", async (t) => {
  const member = await joinProject(h, owner, owner.projectId, 'member')
  const memberPage = await newPage({ width: 390, height: 844 })
  await logIn(memberPage, member, `/projects/${owner.projectId}/webhooks/${webhookId}`)
  await memberPage.getByText("Webhooks are shown to the project's admins and owner only.").waitFor()
  t.equal(await memberPage.getByRole('button', { name: 'Count' }).count(), 0, 'no replay form')
  const refused = await memberPage.evaluate(
    async ([project, id]) => {
      const res = await fetch(`/jobsvc/v1/webhooks/${id}/replay`, {
        method: 'POST',
        headers: { 'x-jobsvc-project': project!, 'content-type': 'application/json' },
        body: JSON.stringify({ since: new Date(0).toISOString(), mode: 'all', dry_run: true }),
      })
      return { status: res.status, body: await res.json() }
    },
    [owner.projectId, webhookId],
  )
  t.equal(refused.status, 403)
  t.equal(refused.body.error.code, 'forbidden')
})
