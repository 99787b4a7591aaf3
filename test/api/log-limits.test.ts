import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import t from 'tap'
import { ulid } from 'ulid'
import { resolvePlans } from '../../domain/plans.ts'
import { writeProjectRowsNow } from '../../projections/project-directory.ts'
import { LogBudget } from '../../services/infrastructure/log-budget.ts'
import { LogBudgetExceeded } from '../../streams/errors.ts'
import { projectHandler, recurringHandler } from '../../streams/aggregates.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

/**
 * The log's two bounds: each project's log budget (bytes appended per hour, by plan), past which
 * appends that add work or history are refused with 429 `log_budget_exceeded` while those that
 * finish work go on; and the events stream's `max_bytes` (`events_max_bytes`), past which every
 * append is refused with 503.
 */

const payload = { blob: 'x'.repeat(20_000) }

t.test('past its log budget a project gets 429 log_budget_exceeded for new work, and only that project', async (t) => {
  // The harness's project is on business; the other project it makes is on free, with its own budget.
  const h = await startHarness(t, import.meta.filename, { config: { plans: resolvePlans({ business: { log_bytes_per_hour: 150_000 } }) } })
  const api = jobsApi(h, { jobType: 'budget' })
  const running = await api.create({ queue: 'budget' })
  await api.claimOne('budget', 'w1')
  t.equal((await h.request('PUT', '/jobsvc/v1/recurring/rjob_budget-tick', { job_type: 'budget.tick', cron_expression: '* * * * * *' })).status, 201)

  let refused: Awaited<ReturnType<typeof h.request>> | undefined
  for (let i = 0; i < 20 && refused === undefined; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'budget', queue: 'filler', payload })
    if (res.status !== 201) refused = res
  }
  t.ok(refused, 'creates are refused once the hour holds the budget')
  isError(t, refused!, 429, 'log_budget_exceeded')
  const retryAfter = Number(refused!.headers.get('retry-after'))
  t.ok(retryAfter >= 1 && retryAfter <= 3600, `Retry-After ${retryAfter} s: when enough of the hour has left the window`)

  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', { jobs: [{ job_type: 'budget', payload: {} }] })
  t.equal(batch.status, 200)
  t.match(batch.body.results[0], { status: 429, error: { code: 'log_budget_exceeded' } }, 'a batch item too')
  isError(
    t,
    await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: running.id, worker_id: 'w1', progress: 0.5 }),
    429,
    'log_budget_exceeded',
  )
  t.equal((await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: running.id, worker_id: 'w1' })).status, 200, 'liveness is not refused')
  t.strictSame(
    (await api.ack({ job_id: running.id, worker_id: 'w1', status: 'succeeded' })).body,
    { action: 'done' },
    'finishing work is not refused',
  )

  // The scheduler's occurrences are skipped, and it says why.
  const fired = await eventually(
    async () => {
      const history = await recurringHandler.history(h.runtime.store, recurringHandler.ref(h.projectId, 'rjob_budget-tick'))
      return history.flatMap((r) => r.message.events).find((e) => e.type === 'recurring_fired' && e.data.skipped_reason === 'log_budget_exceeded')
    },
    15_000,
    'an occurrence skipped past the budget',
  )
  t.ok(fired, 'recurring_fired records skipped_reason log_budget_exceeded')

  const other = await h.newProject()
  const theirs = await httpRequest(h.url, other.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'budget', payload })
  t.equal(theirs.status, 201, "another project's creates are not refused")
})

t.test('a full event stream refuses appends with 503 service_unavailable and Retry-After, and readiness says so', async (t) => {
  const h = await startHarness(t, import.meta.filename, { suffix: '_full', tunables: { events_max_bytes: 1024 * 1024 } })
  const info = await h.runtime.nats.jsm.streams.info(eventsStreamName(h.config.namespace))
  t.equal(info.config.max_bytes, 1024 * 1024, 'the stream has the configured max_bytes')
  t.equal(info.config.discard, 'new', 'and refuses new messages rather than dropping old ones')
  t.strictSame((await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')).body.checks.log_space, true)

  let full: Awaited<ReturnType<typeof h.request>> | undefined
  const created: string[] = []
  const big = { blob: 'x'.repeat(200_000) }
  for (let i = 0; i < 10 && full === undefined; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'full', queue: 'full', payload: big })
    if (res.status === 201) created.push(res.body.id)
    else full = res
  }
  t.ok(full, 'creates are refused once the stream is full')
  isError(t, full!, 503, 'service_unavailable')
  t.ok(Number(full!.headers.get('retry-after')) >= 1, 'with Retry-After')
  const ready = await httpRequest(h.url, null, 'GET', '/jobsvc/health/ready')
  t.equal(ready.body.checks.log_space, false, 'readiness names the full log')
  t.equal(ready.status, 200, 'reads still work: the process stays ready')
  t.equal((await jobsApi(h, { jobType: 'full' }).getJob(created[0]!)).id, created[0], 'and jobs still read')
})

t.test('a project counted at its creation, before its directory row exists, is budgeted from its first check', async (t) => {
  // A project's first append (its creation) is counted before the creation writes its directory
  // row; a plan read started by that count found no row, and the project went unlimited until
  // the plans were read again a minute later. The read now waits for the first check.
  const { sql, store } = await openIsolatedStore(t, `${import.meta.filename}_new-project`)
  const budget = new LogBudget(sql, resolvePlans({ pro: { log_bytes_per_hour: 10_000 } }), pino({ level: 'silent' }), () => new Date())
  t.teardown(() => budget.stop())
  const id = `prj_${ulid().toLowerCase()}`
  const ref = projectHandler.ref(id)
  await projectHandler.decide({ store, newUlid: ulid }, ref, {
    type: 'create_project',
    data: {
      project_id: id,
      name: 'New',
      plan: 'pro',
      owner_email: null,
      key: { prefix: `jobsvc_test_${ulid().slice(-12).toLowerCase()}`, key_hash: 'a'.repeat(64) },
    },
    meta: { now: new Date().toISOString() },
  })
  budget.stored(id, 20_000)
  await sleep(200)
  await writeProjectRowsNow(sql, [(await store.history(ref)).at(-1)!])
  await t.rejects(Promise.resolve(budget.admit(id, ['job_created'])), LogBudgetExceeded, 'its first job is refused past the budget')
})
