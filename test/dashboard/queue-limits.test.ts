import t from 'tap'
import { hasChromium, launchChromium, newBrowserPage } from '../support/browser.ts'
import { eventually, httpRequest } from '../support/harness.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Issue 29 in the dashboard: a queue's page shows its flow limits, which an admin sets through a
// form (the whole object PUT) and removes, and what they hold back now (running, waiting, the
// keys), read again while open; a viewer sees the same and no control. A job's page tells its
// waits for the limits, a rate-limited release and a cancel by a full key in words. Headless
// Chromium against the whole service.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)
const owner = await newVerifiedUser(h)
const api = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)

async function ok(res: Promise<{ status: number; body: any }>, status = 200): Promise<any> {
  const r = await res
  if (r.status !== status) throw new Error(`answered ${r.status}: ${JSON.stringify(r.body).slice(0, 500)}`)
  return r.body
}

const create = async (queue: string, key: string) =>
  (await ok(api('POST', '/jobsvc/v1/jobs', { job_type: 'sync.account', queue, payload: {}, concurrency_key: key }), 201)).id as string

const poll = async (queue: string, workerId: string, capacity = 1) =>
  (await ok(api('POST', '/jobsvc/v1/workers/poll', { worker_id: workerId, queues: [queue], capacity, wait_seconds: 0 }))).jobs as Array<{
    id: string
  }>

const historyTypes = async (jobId: string) =>
  ((await ok(api('GET', `/jobsvc/v1/jobs/${jobId}/history`))).data as Array<{ type: string }>).map((e) => e.type)

async function logIn(user: Pick<VerifiedUser, 'email' | 'password'>) {
  const page = await newBrowserPage(t, browser)
  await page.goto(`${h.url}/dashboard/login`)
  await page.getByLabel('E-mail').fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Log in' }).click()
  await page.getByRole('heading', { name: 'Overview' }).waitFor()
  return page
}

async function openQueue(user: Pick<VerifiedUser, 'email' | 'password'>, queue: string) {
  const page = await logIn(user)
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/queues/${queue}`)
  await page.locator('[data-limits]').waitFor()
  return page
}

t.test('an admin sets limits through the form, reads them back, and sees a key running and its other jobs waiting', async (t) => {
  const page = await logIn(owner)
  // The queue has no job yet, so no row of the overview: the page is opened by name.
  await page.getByLabel('Queue name').fill('exports')
  await page.getByRole('button', { name: 'Open its limits' }).click()
  await page.getByRole('heading', { name: 'Queue exports' }).waitFor()
  await page.locator('[data-limits=none]').waitFor()

  await page.getByLabel('At most, in the queue').fill('5')
  await page.getByLabel('At most, per key').fill('1')
  await page.getByLabel("A job's key is").selectOption('concurrency_key')
  await page.getByLabel('Starts per period').fill('100')
  await page.getByLabel('Period (seconds)').fill('60')
  await page.getByLabel('Burst').fill('20')
  await page.getByRole('button', { name: 'Save limits' }).click()
  // Shown from the state the page read again after the PUT.
  await page.locator('[data-limits=set] [data-limit=per-key]', { hasText: '1 running per concurrency key' }).waitFor()
  const shown = async (name: string) => page.locator(`[data-limit=${name}]`).textContent()
  t.equal(await shown('queue'), '5')
  t.equal(await shown('strategy'), 'it waits (queue)')
  t.equal(await shown('rate'), '100 per 60 s')
  t.equal(await shown('burst'), '20')
  t.equal(await shown('rate-by'), 'the whole queue')
  t.match(
    await ok(api('GET', '/jobsvc/v1/queues/exports/limits')),
    {
      concurrency: { limit: 5, per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'queue' },
      rate: { limit: 100, period_seconds: 60, burst: 20, by: null },
    },
    'the service holds the whole object',
  )
  t.equal(await page.getByLabel('Burst').inputValue(), '20', "the form starts again from the service's limits")

  const jobs = [await create('exports', 'cust-1'), await create('exports', 'cust-1'), await create('exports', 'cust-1')]
  const claimed = await eventually(async () => {
    const got = await poll('exports', 'wrk-exports', 3)
    return got.length > 0 ? got : null
  })
  t.equal(claimed.length, 1, "one of the key's jobs runs at once")
  t.ok(jobs.includes(claimed[0]!.id))
  // The page reads the state again by itself; the slot shows once the projector has the gate.
  await page.locator('tr[data-key="cust-1"][data-running="1"][data-waiting="2"]').waitFor()
  await page.locator('[data-limits-state=running]', { hasText: /^1$/ }).waitFor()
  t.equal(await page.locator('[data-limits-state=waiting]').textContent(), '2')
  t.equal(await page.locator('[data-limits-state=keys-at-limit]').textContent(), '1')
  const tokens = Number(await page.locator('[data-limits-state=tokens]').textContent())
  t.ok(tokens >= 0 && tokens <= 20, `the queue's tokens are shown (${tokens})`)
})

t.test('a viewer sees the limits and the state, and no control', async (t) => {
  const viewer = await joinProject(h, owner, owner.projectId, 'viewer')
  const page = await logIn(viewer)
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}`)
  // The queue has jobs now: its row on the owner's overview leads to its page.
  await page.getByRole('link', { name: 'Limits of the queue exports' }).click()
  await page.getByRole('heading', { name: 'Queue exports' }).waitFor()
  await page.locator('[data-limits=set] [data-limit=per-key]', { hasText: '1 running per concurrency key' }).waitFor()
  await page.locator('tr[data-key="cust-1"]').waitFor()
  t.equal(await page.getByRole('button', { name: /limits/ }).count(), 0, 'no Save or Remove')
  t.equal(await page.getByLabel(/At most/).count(), 0, 'no field')
  t.match(await page.locator('#content').textContent(), /Changing the limits needs the role admin/)
})

t.test('an admin removes the limits', async (t) => {
  const page = await openQueue(owner, 'exports')
  await page.locator('[data-limits=set]').waitFor()
  await page.getByRole('button', { name: 'Remove limits' }).click()
  await page.locator('[data-limits=none]').waitFor()
  t.same(await ok(api('GET', '/jobsvc/v1/queues/exports/limits')), { queue: 'exports', concurrency: null, rate: null, updated_at: null })
  t.equal(await page.getByLabel('At most, per key').inputValue(), '', 'the form is empty again')
  t.equal(await page.getByRole('button', { name: 'Remove limits' }).count(), 0, 'nothing left to remove')
})

t.test("a job's page tells its wait for its key, the wait's length and a rate-limited release", async (t) => {
  await ok(api('PUT', '/jobsvc/v1/queues/imports/limits', { concurrency: { per_key: { limit: 1, by: 'concurrency_key' } } }))
  const first = await create('imports', 'acct-7')
  const second = await create('imports', 'acct-7')
  const got = await eventually(async () => {
    const jobs = await poll('imports', 'wrk-imports')
    return jobs.length > 0 ? jobs : null
  })
  t.equal(got[0]!.id, first)
  // A poll that tries the second job while its key is full records its wait.
  await eventually(async () => {
    await poll('imports', 'wrk-imports')
    return (await historyTypes(second)).includes('job_limit_waiting')
  })
  await ok(api('POST', '/jobsvc/v1/workers/ack', { job_id: first, worker_id: 'wrk-imports', status: 'succeeded' }))
  await eventually(async () => (await poll('imports', 'wrk-imports')).some((j) => j.id === second))
  const released = await ok(
    api('POST', '/jobsvc/v1/workers/ack', { job_id: second, worker_id: 'wrk-imports', status: 'rate_limited', retry_after_ms: 3_600_000 }),
  )
  t.equal(released.action, 'retry')

  const page = await logIn(owner)
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${second}`)
  await page.locator('#job-state [data-state=pending]').waitFor()
  t.equal(await page.locator('[data-field=concurrency-key]').textContent(), 'acct-7', 'its key')
  const note = (type: string) => page.locator(`.timeline li[data-event=${type}] .event-note`).textContent()
  t.match(await note('job_limit_waiting'), /^Waiting for key acct-7: concurrency limit, since /)
  t.equal(await page.locator('.timeline li[data-event=job_limit_waiting] .event-type').textContent(), 'waiting for its limits')
  t.match(await note('job_claimed'), /^Waited [\d.]+ (ms|s|min) for its limits$/)
  t.match(await note('job_released'), /^Rate limited by the worker; due again at /)
})

t.test('a job cancelled because its key was full says so', async (t) => {
  await ok(
    api('PUT', '/jobsvc/v1/queues/uploads/limits', { concurrency: { per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'cancel_newest' } }),
  )
  const first = await create('uploads', 'user-3')
  const second = await create('uploads', 'user-3')
  await eventually(async () => (await poll('uploads', 'wrk-uploads')).some((j) => j.id === first))
  await eventually(async () => {
    await poll('uploads', 'wrk-uploads')
    return (await ok(api('GET', `/jobsvc/v1/jobs/${second}`))).state === 'cancelled'
  })
  const page = await logIn(owner)
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${second}`)
  await page.locator('#job-state [data-state=cancelled]').waitFor()
  t.match(await page.locator('[data-field=cancel-reason]').textContent(), /its key was at its concurrency limit/)
  t.match(await page.locator('.timeline li[data-event=job_cancelled] .event-note').textContent(), /its key was at its concurrency limit/)
})
