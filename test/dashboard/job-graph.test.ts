import t from 'tap'
import type { Page } from 'playwright-core'
import { hasChromium, launchChromium } from '../support/browser.ts'
import { projectJobsApi } from '../support/dashboard.ts'
import { newVerifiedUser, startPlatformHarness } from '../support/platform.ts'

// Issue 30 on the dashboard: a job's page draws its parents, itself and its children with their
// states (GET /jobs/{id}/dependencies) and words its parents' settlements in the history, for a
// diamond A → (B, C) → D created through the API, in headless Chromium against the whole service.
if (!hasChromium()) throw new Error('chromium is missing: apt-get install -y chromium (.ci/run does it)')

const h = await startPlatformHarness(t, import.meta.filename)
const browser = await launchChromium(t)
const owner = await newVerifiedUser(h)
const api = projectJobsApi(h, owner.apiKey, { jobType: 'graph.step' })

async function newPage(): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return page
}

/** Claims the job on its own queue and acks it. */
async function finish(job: { id: string; queue: string }): Promise<void> {
  const claimed = await api.claimOne(job.queue, 'wrk_graph')
  if (claimed.id !== job.id) throw new Error(`claimed ${claimed.id}, not ${job.id}`)
  const ack = await api.ack({ job_id: job.id, worker_id: 'wrk_graph', status: 'succeeded', result: { from: job.id } })
  if (ack.status !== 200) throw new Error(`ack answered ${ack.status}: ${JSON.stringify(ack.body)}`)
}

const page = await newPage()
const failures: string[] = []
page.on('pageerror', (error) => failures.push(error.message))
await page.goto(`${h.url}/dashboard/login`)
await page.getByLabel('E-mail').fill(owner.email)
await page.getByLabel('Password').fill(owner.password)
await page.getByRole('button', { name: 'Log in' }).click()
await page.getByRole('heading', { name: 'Overview' }).waitFor()

/** The boxes of one layer of the graph: [job id, state] in the order drawn. */
const layer = async (kind: 'parent' | 'job' | 'child') =>
  page
    .locator(`.job-graph .graph-node[data-kind=${kind}]`)
    .evaluateAll((nodes) => nodes.map((n) => [n.getAttribute('data-job-id'), n.getAttribute('data-state')]))

t.test("the fan-in's page draws its parents and the history says how each settled", async (t) => {
  const a = await api.create({ queue: 'dg-a' })
  const b = await api.create({ queue: 'dg-b', parent_job_id: a.id })
  const c = await api.create({ queue: 'dg-c', parent_job_id: a.id })
  const d = await api.create({ queue: 'dg-d', depends_on: [b.id, c.id] })
  t.equal(d.state, 'scheduled', 'D waits for both branches')

  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${d.id}`)
  await page.getByRole('heading', { name: 'Workflow' }).waitFor()
  t.same(
    await layer('parent'),
    [
      [b.id, 'scheduled'],
      [c.id, 'scheduled'],
    ],
    'both parents, waiting for A',
  )
  t.same(await layer('job'), [[d.id, 'scheduled']], 'the job itself in the middle')
  t.equal(await page.locator('.job-graph [data-layer=children]').count(), 0, 'no children layer for a job without any')
  t.equal(await page.locator('.job-graph .graph-node.waiting[data-kind=parent]').count(), 2, 'each parent drawn as still waited for')
  t.equal(await page.locator('[data-field=parent-rule]').textContent(), "waiting for 2 of 2; on a parent's failure: cancel")

  await finish(a)
  await finish(b)
  await finish(c)
  await page.reload()
  await page.locator('.timeline li[data-event=job_activated]').waitFor()
  t.same(
    await layer('parent'),
    [
      [b.id, 'succeeded'],
      [c.id, 'succeeded'],
    ],
    'both parents succeeded',
  )
  t.same(await layer('job'), [[d.id, 'pending']], 'and the job is pending')
  t.equal(await page.locator('[data-field=parent-rule]').textContent(), "every parent settled; on a parent's failure: cancel")
  const parentLink = page.getByRole('link', { name: `Parent ${b.id}: succeeded` })
  t.equal(await parentLink.getAttribute('href'), `/dashboard/projects/${owner.projectId}/jobs/${b.id}`, "a parent's box links to its page")

  const notes = await page
    .locator('.timeline li')
    .evaluateAll((items) => items.map((li) => [li.getAttribute('data-event'), li.querySelector('.event-note')?.textContent ?? null]))
  t.same(
    notes,
    [
      ['job_created', null],
      ['job_parent_settled', `Parent ${b.id} succeeded — waiting for 1 of 2 parents`],
      ['job_parent_settled', `Parent ${c.id} succeeded — all parents settled`],
      ['job_activated', 'Activated: every parent settled'],
    ],
    'each settlement counts the parents left, and the activation says why',
  )

  await parentLink.click()
  await page.locator(`h1 code`, { hasText: b.id }).waitFor()
  await page.getByRole('heading', { name: 'Workflow' }).waitFor()
  t.same(await layer('parent'), [[a.id, 'succeeded']], "a continuation's page draws its one parent")
  t.same(await layer('child'), [[d.id, 'pending']], 'and the fan-in as its child')
  t.equal(
    await page.locator('.timeline li[data-event=job_activated] .event-note').textContent(),
    `Activated: parent ${a.id} succeeded`,
    "a continuation's activation names its parent",
  )

  await page.getByRole('link', { name: `Parent ${a.id}: succeeded` }).click()
  await page.locator(`h1 code`, { hasText: a.id }).waitFor()
  await page.getByRole('heading', { name: 'Workflow' }).waitFor()
  t.equal(await page.locator('.job-graph [data-layer=parents]').count(), 0, 'the root has no parents layer')
  t.same(
    await layer('child'),
    [
      [b.id, 'succeeded'],
      [c.id, 'succeeded'],
    ],
    'and both branches as its children, in creation order',
  )
  t.strictSame(failures, [], 'no script error on the page')
})

t.test('a parent dead-lettered under ignore is said dropped, and the count goes on without it', async (t) => {
  const failing = await api.create({ queue: 'dg-ignore-f', max_attempts: 1 })
  const passing = await api.create({ queue: 'dg-ignore-p' })
  const fanIn = await api.create({ queue: 'dg-ignore', depends_on: [failing.id, passing.id], on_parent_failure: 'ignore' })
  const claimed = await api.claimOne(failing.queue, 'wrk_graph')
  t.equal(claimed.id, failing.id)
  t.equal((await api.ack({ job_id: failing.id, worker_id: 'wrk_graph', status: 'failed', error: { type: 'E', message: 'no' } })).status, 200)
  await finish(passing)

  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${fanIn.id}`)
  await page.locator('.timeline li[data-event=job_activated]').waitFor()
  t.same(
    await page.locator('.timeline li[data-event=job_parent_settled] .event-note').allTextContents(),
    [`Parent ${failing.id} dead-lettered — dropped (ignore) — waiting for 1 of 1 parent`, `Parent ${passing.id} succeeded — all parents settled`],
    'the dropped parent leaves the count',
  )
  t.same(await layer('parent'), [[passing.id, 'succeeded']], 'only the parent it kept is drawn')
  t.strictSame(failures, [], 'no script error on the page')
})

t.test('a job outside any workflow shows no graph', async (t) => {
  const plain = await api.create({ queue: 'dg-plain' })
  await page.goto(`${h.url}/dashboard/projects/${owner.projectId}/jobs/${plain.id}`)
  await page.locator('#job-state [data-state=pending]').waitFor()
  await page.locator('.timeline li[data-event=job_created]').waitFor()
  t.equal(await page.locator('.job-graph').count(), 0)
})
