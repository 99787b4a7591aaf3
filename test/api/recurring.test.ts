import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { decodeTime } from 'ulid'
import { fireDueSchedules, occurrenceJobId } from '../../services/use-cases/jobs/recurring-service.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { BillingService } from '../../services/use-cases/metering/billing-service.ts'
import { resolvePlans } from '../../domain/plans.ts'
import { ConfigError, loadConfig } from '../../services/infrastructure/config.ts'
import { recurringHandler } from '../../streams/aggregates.ts'
import { eventually, httpRequest, startHarness, type Harness, type HttpResponse } from '../support/harness.ts'

// No scheduler role: the tests fire schedules themselves, with the clock where they want it.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const realNow = h.runtime.now
t.teardown(() => void (h.runtime.now = realNow))

const scheduleKeys = [
  'created_at',
  'cron_expression',
  'id',
  'job_type',
  'last_job_id',
  'last_run_at',
  'max_attempts',
  'next_run_at',
  'payload',
  'queue',
  'timeout_seconds',
  'timezone',
  'updated_at',
]

/** The clock stands still at `at` (services read deps.now() on every call). */
function freezeAt(h: Harness, at: string | number): void {
  const ms = typeof at === 'number' ? at : Date.parse(at)
  h.runtime.now = () => new Date(ms)
}

/** The clock runs at real speed from `at`. */
function runFrom(h: Harness, at: string): void {
  const base = Date.parse(at)
  const start = Date.now()
  h.runtime.now = () => new Date(base + (Date.now() - start))
}

function firing(h: Harness) {
  const jobs = new JobService(h.runtime)
  const billing = new BillingService(h.runtime)
  return () => fireDueSchedules(h.runtime, jobs, billing)
}

const put = (body: Record<string, unknown>, id?: string) => h.request('PUT', `/jobsvc/v1/recurring/${id ?? idOf(String(body.job_type))}`, body)

/** The id a job type's schedule has, worked out here independently of the service. */
function idOf(jobType: string): string {
  const slug = jobType
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean)
    .join('-')
  return `rjob_${slug}`
}

function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status (${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code`)
}

async function scheduleOf(h: Harness, id: string, apiKey = h.apiKey): Promise<any> {
  const res = await httpRequest(h.url, apiKey, 'GET', '/jobsvc/v1/recurring')
  return (res.body.data as any[]).find((s) => s.id === id) ?? null
}

/** Waits until every projection has applied the whole log, so a read model read next is complete. */
async function projected(h: Harness): Promise<void> {
  const last = await h.runtime.store.lastSequence()
  await eventually(
    async () => {
      const [row] = await h.runtime.sql<{ n: number | null }[]>`SELECT min(last_seq)::int AS n FROM projection_checkpoints`
      return (row?.n ?? 0) >= last
    },
    15_000,
    `the projections to reach seq ${last}`,
  )
}

/** Every job of a type, all pages, once the projections caught up. */
async function jobsOf(h: Harness, jobType: string): Promise<any[]> {
  await projected(h)
  const all: any[] = []
  let cursor: string | null = null
  do {
    const res: HttpResponse = await h.request(
      'GET',
      `/jobsvc/v1/jobs?job_type=${encodeURIComponent(jobType)}&limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    )
    if (res.status !== 200) throw new Error(`list answered ${res.status}: ${JSON.stringify(res.body)}`)
    all.push(...res.body.data)
    cursor = res.body.next_cursor
  } while (cursor !== null)
  return all
}

/** The occurrence a job was created for: the time part of its ULID id. */
const occurrenceOf = (jobId: string) => new Date(decodeTime(jobId.replace(/^job_/, ''))).toISOString()

async function activityOf(h: Harness, targetId: string, atLeast: number): Promise<any[]> {
  return eventually(
    async () => {
      const rows = await h.runtime.sql`
      SELECT kind, project_id, target_type, target_id, metadata FROM activity WHERE target_id = ${targetId} ORDER BY seq, id`
      return rows.length >= atLeast && rows.map((r) => ({ ...r, metadata: r.metadata === null ? null : JSON.parse(r.metadata) }))
    },
    10_000,
    `${atLeast} activity rows for ${targetId}`,
  )
}

/** Deletes every schedule left in a project, so later firing passes only see their own. */
async function deleteAll(h: Harness, apiKey = h.apiKey): Promise<void> {
  const res = await httpRequest(h.url, apiKey, 'GET', '/jobsvc/v1/recurring')
  for (const s of res.body.data as any[]) await httpRequest(h.url, apiKey, 'DELETE', `/jobsvc/v1/recurring/${s.id}`)
}

t.test('the recurring routes: list, create, update, unchanged, ids, validation, delete', async (t) => {
  runFrom(h, '2026-06-15T10:10:00Z') // a Monday
  t.teardown(() => deleteAll(h))

  t.strictSame((await h.request('GET', '/jobsvc/v1/recurring')).body, { data: [] }, 'no schedules yet')

  const nightly = { job_type: 'Nightly Report', cron_expression: '0 9 * * *' }
  const created = await put(nightly)
  t.equal(created.status, 201, JSON.stringify(created.body))
  t.same(Object.keys(created.body).sort(), scheduleKeys, 'a schedule has exactly the documented fields')
  t.match(created.body, {
    id: 'rjob_nightly-report',
    job_type: 'Nightly Report',
    cron_expression: '0 9 * * *',
    queue: 'default',
    timezone: 'UTC',
    max_attempts: 3,
    timeout_seconds: 1800,
    next_run_at: '2026-06-16T09:00:00.000Z',
    last_run_at: null,
    last_job_id: null,
  })
  t.strictSame(created.body.payload, {})
  t.equal(created.body.created_at, created.body.updated_at)
  t.ok(Math.abs(Date.parse(created.body.created_at) - Date.parse('2026-06-15T10:10:00Z')) < 60_000, 'created_at is the (moved) service clock')
  const createdSeq = created.headers.get('x-event-seq')
  t.match(createdSeq, /^\d+$/, 'the write names its sequence')

  const listed = await h.request('GET', '/jobsvc/v1/recurring')
  t.equal(listed.status, 200)
  t.strictSame(listed.body, { data: [created.body] }, 'the list shows the schedule as the PUT answered it')
  t.strictSame(listed.body.data[0]?.payload, {}, 'the listed payload is a JSON object, not a string holding JSON')

  await t.test('an unchanged PUT answers 200, appends nothing and writes no activity', async (t) => {
    const same = await put(nightly)
    t.equal(same.status, 200)
    t.strictSame(same.body, created.body, 'the same schedule, updated_at untouched')
    t.equal(same.headers.get('x-event-seq'), createdSeq, 'nothing was appended')
    const spelledOut = await put({
      ...nightly,
      cron_expression: ' 0  9 *  * * ',
      queue: 'default',
      timezone: 'UTC',
      max_attempts: 3,
      timeout_seconds: 1800,
      payload: {},
    })
    t.equal(spelledOut.status, 200, 'defaults spelled out and spacing in the cron expression change nothing')
    t.strictSame(spelledOut.body, created.body)
    t.equal(spelledOut.headers.get('x-event-seq'), createdSeq)
  })

  await t.test('updates answer 200 and move next_run_at as the new fields say', async (t) => {
    const steps: Array<[string, Record<string, unknown>, string]> = [
      ['timezone Asia/Kolkata (UTC+5:30): 09:00 IST is 03:30Z tomorrow', { timezone: 'Asia/Kolkata' }, '2026-06-16T03:30:00.000Z'],
      ['timezone America/New_York (EDT, UTC-4): 09:00 EDT is 13:00Z today', { timezone: 'America/New_York' }, '2026-06-15T13:00:00.000Z'],
      [
        'cron on Saturdays only: Saturday 2026-06-20 09:00 EDT',
        { timezone: 'America/New_York', cron_expression: '0 9 * * 6' },
        '2026-06-20T13:00:00.000Z',
      ],
      ['cron every 20 minutes: 10:20Z', { timezone: 'America/New_York', cron_expression: '*/20 * * * *' }, '2026-06-15T10:20:00.000Z'],
      [
        'queue changed: same next run',
        { timezone: 'America/New_York', cron_expression: '*/20 * * * *', queue: 'reports' },
        '2026-06-15T10:20:00.000Z',
      ],
      [
        'payload, attempts and timeout changed: same next run',
        {
          timezone: 'America/New_York',
          cron_expression: '*/20 * * * *',
          queue: 'reports',
          payload: { report: 'daily', n: 1 },
          max_attempts: 5,
          timeout_seconds: 60,
        },
        '2026-06-15T10:20:00.000Z',
      ],
    ]
    let previous = created.body
    for (const [what, change, next] of steps) {
      const res = await put({ ...nightly, ...change })
      t.equal(res.status, 200, `${what}: 200 (${JSON.stringify(res.body)})`)
      t.equal(res.body.next_run_at, next, `${what}: next_run_at`)
      t.match(res.body, { id: 'rjob_nightly-report', queue: 'default', ...change }, `${what}: the fields`)
      t.equal(res.body.created_at, created.body.created_at, `${what}: created_at kept`)
      t.ok(Date.parse(res.body.updated_at) >= Date.parse(previous.updated_at), `${what}: updated_at moves on`)
      t.ok(Number(res.headers.get('x-event-seq')) > Number(previous.seq ?? createdSeq), `${what}: appended`)
      previous = { ...res.body, seq: res.headers.get('x-event-seq') }
    }
    const [listedNow] = (await h.request('GET', '/jobsvc/v1/recurring')).body.data
    t.match(listedNow, { queue: 'reports', timezone: 'America/New_York', cron_expression: '*/20 * * * *', max_attempts: 5, timeout_seconds: 60 })
    t.strictSame(listedNow.payload, { report: 'daily', n: 1 }, 'the list shows the updated payload as an object')

    // Seven changes, no row for the two unchanged PUTs before them: the rows come in log order,
    // so once the last change's row is there every earlier one is too.
    const rows = await activityOf(h, 'rjob_nightly-report', 1 + steps.length)
    t.equal(rows.length, 1 + steps.length, 'one activity row per change, none for the unchanged PUTs')
    t.ok(rows.every((r) => r.kind === 'recurring_upserted' && r.project_id === h.projectId && r.target_type === 'recurring'))
    t.same(
      rows.map((r) => [r.metadata.cron_expression, r.metadata.timezone]),
      [
        ['0 9 * * *', 'UTC'],
        ['0 9 * * *', 'Asia/Kolkata'],
        ['0 9 * * *', 'America/New_York'],
        ['0 9 * * 6', 'America/New_York'],
        ...Array(3).fill(['*/20 * * * *', 'America/New_York']),
      ],
    )
  })

  await t.test('the id is rjob_ and the slug of the job type; another id is refused', async (t) => {
    const messy = await put({ job_type: '  Billing::Invoice  Sync!! ', cron_expression: '0 0 1 * *' }, 'rjob_billing-invoice-sync')
    t.equal(messy.status, 201, JSON.stringify(messy.body))
    t.equal(messy.body.id, 'rjob_billing-invoice-sync')
    t.equal(idOf('  Billing::Invoice  Sync!! '), 'rjob_billing-invoice-sync')

    isError(t, await put(nightly, 'rjob_other'), 409, 'recurring_job_type_conflict', 'another id for a type that has its schedule')
    isError(t, await put(nightly, 'rjob_Nightly-Report'), 409, 'recurring_job_type_conflict', 'the id in other case')
    isError(t, await put(nightly, 'nightly-report'), 409, 'recurring_job_type_conflict', 'the id without its prefix')
    isError(
      t,
      await put({ job_type: 'Weekly Digest', cron_expression: '0 8 * * 1' }, 'rjob_weekly'),
      400,
      'invalid_request',
      'a wrong id for a type without a schedule',
    )
    isError(
      t,
      await put({ job_type: 'billing.invoice.sync', cron_expression: '0 0 1 * *' }),
      409,
      'recurring_job_type_conflict',
      'a second type with the same slug',
    )
    isError(
      t,
      await put({ job_type: 'nightly-report', cron_expression: '0 9 * * *' }),
      409,
      'recurring_job_type_conflict',
      'a type whose slug is taken by another type',
    )
    const unchanged = await scheduleOf(h, 'rjob_billing-invoice-sync')
    t.equal(unchanged.job_type, '  Billing::Invoice  Sync!! ', 'the refused PUT left the schedule alone')
  })

  await t.test('bad cron expressions, timezones and bodies are refused and write nothing', async (t) => {
    const before = (await h.request('GET', '/jobsvc/v1/recurring')).body
    const body = { job_type: 'Weekly Digest', cron_expression: '0 8 * * 1' }
    for (const cron of [
      '* * * *',
      '* * * * * * *',
      '61 * * * *',
      '* 24 * * *',
      '* * 32 * *',
      '* * * 13 *',
      '60 * * * * *',
      'not a cron',
      '@daily',
      'a b c d e',
    ]) {
      isError(t, await put({ ...body, cron_expression: cron }), 400, 'invalid_cron_expression', JSON.stringify(cron))
    }
    for (const timezone of ['Mars/Base', '+02:00', 'Europe/Nowhere']) {
      isError(t, await put({ ...body, timezone }), 400, 'invalid_timezone', JSON.stringify(timezone))
    }
    isError(t, await put({ cron_expression: '0 8 * * 1' }, 'rjob_weekly-digest'), 400, 'invalid_request', 'job_type missing')
    isError(t, await put({ job_type: 'Weekly Digest' }), 400, 'invalid_request', 'cron_expression missing')
    isError(t, await put({ ...body, max_attempts: 0 }), 400, 'invalid_request', 'max_attempts 0')
    isError(t, await put({ ...body, payload: [1, 2] }), 400, 'invalid_request', 'payload not an object')
    t.strictSame((await h.request('GET', '/jobsvc/v1/recurring')).body, before, 'no refused PUT created or changed a schedule')
    t.equal((await h.request('DELETE', '/jobsvc/v1/recurring/rjob_weekly-digest')).status, 404, 'the refused schedule does not exist')
  })

  await t.test('delete answers 204, then 404; re-creating answers 201 and starts afresh', async (t) => {
    const del = await h.request('DELETE', '/jobsvc/v1/recurring/rjob_billing-invoice-sync')
    t.equal(del.status, 204)
    t.equal(del.body, null, 'no body')
    t.same(
      (await h.request('GET', '/jobsvc/v1/recurring')).body.data.map((s: any) => s.id),
      ['rjob_nightly-report'],
      'gone from the list',
    )
    isError(t, await h.request('DELETE', '/jobsvc/v1/recurring/rjob_billing-invoice-sync'), 404, 'recurring_job_not_found', 'deleted already')
    isError(t, await h.request('DELETE', '/jobsvc/v1/recurring/rjob_never-was'), 404, 'recurring_job_not_found', 'never existed')
    isError(t, await h.request('DELETE', '/jobsvc/v1/recurring/not-an-id'), 404, 'recurring_job_not_found', 'not a schedule id')
    isError(
      t,
      await put({ job_type: '  Billing::Invoice  Sync!! ', cron_expression: '0 0 1 * *' }, 'rjob_other'),
      400,
      'invalid_request',
      'a deleted schedule no longer claims its type, but the id must still be its slug',
    )

    const again = await put({ job_type: 'billing.invoice.sync', cron_expression: '0 0 1 * *', timezone: 'Europe/Berlin' })
    t.equal(again.status, 201, 'the slug is free again, for another type too')
    t.match(again.body, {
      id: 'rjob_billing-invoice-sync',
      job_type: 'billing.invoice.sync',
      next_run_at: '2026-06-30T22:00:00.000Z',
      last_run_at: null,
      last_job_id: null,
    })
    const rows = await activityOf(h, 'rjob_billing-invoice-sync', 3)
    t.same(
      rows.map((r) => r.kind),
      ['recurring_upserted', 'recurring_deleted', 'recurring_upserted'],
    )
    t.ok(rows.every((r) => r.project_id === h.projectId))
  })

  await t.test("another project neither sees nor touches this project's schedules", async (t) => {
    const other = await h.newProject()
    t.teardown(() => deleteAll(h, other.apiKey))
    const asOther = (method: string, path: string, body?: unknown) => httpRequest(h.url, other.apiKey, method, path, body)
    t.strictSame((await asOther('GET', '/jobsvc/v1/recurring')).body, { data: [] })
    isError(t, await asOther('DELETE', '/jobsvc/v1/recurring/rjob_nightly-report'), 404, 'recurring_job_not_found', "another project's schedule")
    const own = await asOther('PUT', '/jobsvc/v1/recurring/rjob_nightly-report', { job_type: 'Nightly Report', cron_expression: '5 4 * * *' })
    t.equal(own.status, 201, 'the same type has its own schedule in another project')
    t.equal((await scheduleOf(h, 'rjob_nightly-report')).cron_expression, '*/20 * * * *', 'ours is untouched')
    const rows = await activityOf(h, 'rjob_nightly-report', 8)
    t.same([...new Set(rows.map((r) => r.project_id))].sort(), [h.projectId, other.projectId].sort(), 'activity rows carry their own project')
  })
})

t.test('worker registration upserts schedules the same way and logs bad ones without failing', async (t) => {
  runFrom(h, '2026-06-15T10:10:00Z')
  t.teardown(() => deleteAll(h))
  const register = (recurring_schedules: unknown[]) =>
    h.request('POST', '/jobsvc/v1/workers/register', {
      worker_id: 'wrk_cron',
      queues: ['default', 'maint'],
      job_types: ['Cleanup Temp'],
      recurring_schedules,
    })

  t.equal((await put({ job_type: 'Nightly Report', cron_expression: '0 9 * * *' })).status, 201)
  const cleanup = {
    job_type: 'Cleanup Temp',
    cron_expression: '15 * * * *',
    timezone: 'Europe/Berlin',
    queue: 'maint',
    max_attempts: 2,
    timeout_seconds: 120,
  }
  const first = await register([
    { job_type: 'bad cron', cron_expression: '99 * * * *' },
    cleanup,
    { job_type: 'bad zone', cron_expression: '* * * * *', timezone: 'Nowhere/City' },
    'not an object',
    { cron_expression: '* * * * *' },
    { job_type: 'nightly.report', cron_expression: '* * * * *' },
    { job_type: 'Hourly Sync', cron_expression: '0 */2 * * *' },
  ])
  t.equal(first.status, 200, JSON.stringify(first.body))
  t.strictSame(first.body, { status: 'registered' }, 'bad schedules are not an error of the registration')

  const list = (await h.request('GET', '/jobsvc/v1/recurring')).body.data as any[]
  t.same(
    list.map((s) => s.id),
    ['rjob_cleanup-temp', 'rjob_hourly-sync', 'rjob_nightly-report'],
    'the good ones are saved, after the bad ones too',
  )
  const saved = list[0]
  t.match(saved, { ...cleanup, id: 'rjob_cleanup-temp', next_run_at: '2026-06-15T10:15:00.000Z', last_run_at: null })
  t.match(list[1], {
    job_type: 'Hourly Sync',
    queue: 'default',
    timezone: 'UTC',
    max_attempts: 3,
    timeout_seconds: 1800,
    next_run_at: '2026-06-15T12:00:00.000Z',
  })
  t.match(
    list[2],
    { job_type: 'Nightly Report', cron_expression: '0 9 * * *' },
    'a registered type whose slug is taken does not overwrite the schedule',
  )

  const repeat = await register([cleanup])
  t.strictSame(repeat.body, { status: 'registered' })
  const viaPut = await put(cleanup)
  t.equal(viaPut.status, 200, 'the PUT of what the worker registered is unchanged')
  // The list's payload is checked in the routes test; here only the schedule's identity matters.
  t.strictSame(viaPut.body, { ...saved, payload: {} })

  const moved = await register([{ ...cleanup, cron_expression: '45 * * * *' }])
  t.equal(moved.status, 200)
  const after = await scheduleOf(h, 'rjob_cleanup-temp')
  t.equal(after.next_run_at, '2026-06-15T10:45:00.000Z', 'a registered change moves next_run_at')
  t.equal(after.created_at, saved.created_at)

  const rows = await activityOf(h, 'rjob_cleanup-temp', 2)
  t.same(
    rows.map((r) => [r.kind, r.metadata.cron_expression]),
    [
      ['recurring_upserted', '15 * * * *'],
      ['recurring_upserted', '45 * * * *'],
    ],
    'no activity for the repeated registration',
  )
  t.equal(rows[0].project_id, h.projectId)
})

t.test("a project's plan bounds its schedules: how many, and how close together a 6-field one fires", async (t) => {
  runFrom(h, '2026-06-15T10:10:00Z')
  // The harness's project is on business (1,000 schedules, 1 s apart); a new one on free (10, 60 s).
  const free = await h.newProject()
  t.teardown(() => deleteAll(h, free.apiKey))
  t.teardown(() => deleteAll(h))
  const putAs = (apiKey: string, jobType: string, cron: string) =>
    httpRequest(h.url, apiKey, 'PUT', `/jobsvc/v1/recurring/${idOf(jobType)}`, { job_type: jobType, cron_expression: cron })
  const listOf = async (apiKey: string) => ((await httpRequest(h.url, apiKey, 'GET', '/jobsvc/v1/recurring')).body.data as any[]).map((s) => s.id)

  await t.test('a 6-field expression closer than the plan allows is 400 cron_interval_too_short, and saves nothing', async (t) => {
    for (const cron of ['* * * * * *', '*/30 * * * * *', '0,59 * * * * *', '10,20 0 * * * *']) {
      const res = await putAs(free.apiKey, 'fast', cron)
      isError(t, res, 400, 'cron_interval_too_short', `${cron} on free`)
      t.match(res.body.error.message, /at least 60 s apart/, "the message names the plan's bound")
    }
    t.same(await listOf(free.apiKey), [], 'nothing saved')
    t.equal((await putAs(free.apiKey, 'once a minute', '30 * * * * *')).status, 201, 'one second a minute is 60 s apart: allowed on free')
    t.equal((await putAs(free.apiKey, 'every minute', '* * * * *')).status, 201, 'a 5-field expression always passes')
    t.equal((await putAs(h.apiKey, 'every second', '* * * * * *')).status, 201, 'every second is allowed on business')
    isError(t, await putAs(free.apiKey, 'once a minute', '*/2 * * * * *'), 400, 'cron_interval_too_short', 'an update is bounded too')
  })

  await t.test("past the plan's number of schedules a new one is 409 recurring_limit_reached, decided one create at a time", async (t) => {
    // Two saved above; eight places left of free's ten, raced for by twenty creates.
    const raced = await Promise.all(Array.from({ length: 20 }, (_, i) => putAs(free.apiKey, `race ${i}`, '0 * * * *')))
    t.same(raced.map((r) => r.status).sort(), [...Array(8).fill(201), ...Array(12).fill(409)], 'eight created, twelve refused')
    for (const res of raced.filter((r) => r.status === 409)) isError(t, res, 409, 'recurring_limit_reached', 'the code of a refused create')
    t.match(raced.find((r) => r.status === 409)!.body.error.message, /at most 10 recurring schedules/)
    t.equal((await listOf(free.apiKey)).length, 10, 'the project has its ten')
    t.equal((await putAs(free.apiKey, 'every minute', '*/2 * * * *')).status, 200, 'a schedule it has may still change')
    const registered = await httpRequest(h.url, free.apiKey, 'POST', '/jobsvc/v1/workers/register', {
      worker_id: 'wrk_cap',
      queues: ['default'],
      job_types: ['one more', 'too fast'],
      recurring_schedules: [
        { job_type: 'one more', cron_expression: '0 * * * *' },
        { job_type: 'too fast', cron_expression: '* * * * * *' },
      ],
    })
    t.strictSame(registered.body, { status: 'registered' }, 'a registration past the bounds still answers registered')
    t.notOk(
      (await listOf(free.apiKey)).some((id) => id === 'rjob_one-more' || id === 'rjob_too-fast'),
      'and saves neither',
    )
    t.equal((await httpRequest(h.url, free.apiKey, 'DELETE', '/jobsvc/v1/recurring/rjob_every-minute')).status, 204)
    t.equal((await putAs(free.apiKey, 'one more', '0 * * * *')).status, 201, 'a deleted schedule frees its place')
  })
})

t.test('JOBSVC_CONFIG sets the recurring bounds per plan, within range', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'jobsvc-recurring-config-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'config.json')
  const env = { JOBSVC_SECRET: 'test-secret-test-secret-test-secret', JOBSVC_CONFIG: file }
  await writeFile(file, JSON.stringify({ plans: { free: { max_recurring_schedules: 3, min_cron_interval_seconds: 1 } } }))
  const config = loadConfig(env)
  t.match(config.plans.free, { max_recurring_schedules: 3, min_cron_interval_seconds: 1 })
  t.match(config.plans.business, { max_recurring_schedules: 1_000, min_cron_interval_seconds: 1 }, 'other plans keep their defaults')
  for (const bad of [0, 61, 1.5]) {
    await writeFile(file, JSON.stringify({ plans: { pro: { min_cron_interval_seconds: bad } } }))
    t.throws(() => loadConfig(env), ConfigError, `min_cron_interval_seconds ${bad} is refused`)
  }
})

t.test('fired jobs: deterministic ids, the schedule payload, tags; updates keep the last run', async (t) => {
  t.teardown(() => deleteAll(h))
  const fire = firing(h)
  freezeAt(h, '2026-07-01T08:02:00Z')
  const made = await put({
    job_type: 'fire.payload',
    cron_expression: '*/5 * * * *',
    queue: 'cron',
    max_attempts: 4,
    timeout_seconds: 30,
    payload: { v: 1 },
  })
  t.equal(made.status, 201)
  t.equal(made.body.next_run_at, '2026-07-01T08:05:00.000Z')

  freezeAt(h, '2026-07-01T08:04:59.999Z')
  t.equal(await fire(), 0, 'nothing before the occurrence')
  freezeAt(h, '2026-07-01T08:05:00Z')
  t.equal(await fire(), 1, 'due at the occurrence itself')
  t.equal(await fire(), 0, 'and once')
  const [job] = await jobsOf(h, 'fire.payload')
  t.equal(job.id, occurrenceJobId(h.projectId, 'rjob_fire-payload', new Date('2026-07-01T08:05:00Z')), 'the id is derived from the occurrence')
  t.equal(occurrenceOf(job.id), '2026-07-01T08:05:00.000Z')
  t.match(job, {
    job_type: 'fire.payload',
    queue: 'cron',
    max_attempts: 4,
    timeout_seconds: 30,
    payload: { v: 1 },
    state: 'pending',
    parent_job_id: null,
  })
  t.strictSame(job.tags, { recurring_id: 'rjob_fire-payload' })

  freezeAt(h, '2026-07-01T08:07:00Z')
  const updated = await put({
    job_type: 'fire.payload',
    cron_expression: '*/5 * * * *',
    queue: 'cron',
    max_attempts: 4,
    timeout_seconds: 30,
    payload: { v: 2 },
  })
  t.equal(updated.status, 200)
  t.match(
    updated.body,
    { last_job_id: job.id, last_run_at: '2026-07-01T08:05:00.000Z', next_run_at: '2026-07-01T08:10:00.000Z', payload: { v: 2 } },
    'an update keeps the last run',
  )
  freezeAt(h, '2026-07-01T08:10:01Z')
  t.equal(await fire(), 1)
  const jobs = await jobsOf(h, 'fire.payload')
  t.same(
    jobs.map((j) => [occurrenceOf(j.id), j.payload]),
    [
      ['2026-07-01T08:10:00.000Z', { v: 2 }],
      ['2026-07-01T08:05:00.000Z', { v: 1 }],
    ],
    'the next job carries the new payload',
  )
  t.equal(jobs[0].created_at, '2026-07-01T08:10:01.000Z', 'created when the pass ran')
})

t.test('catch-up: after three hours down only the latest occurrence fires, once', async (t) => {
  t.teardown(() => deleteAll(h))
  const fire = firing(h)
  freezeAt(h, '2026-07-02T08:02:00Z')
  t.equal((await put({ job_type: 'catch.up', cron_expression: '*/5 * * * *' })).status, 201)
  freezeAt(h, '2026-07-02T08:05:01Z')
  t.equal(await fire(), 1)

  freezeAt(h, '2026-07-02T11:03:00Z')
  const passes = await Promise.all([fire(), fire()])
  t.equal(passes[0] + passes[1], 1, 'two passes at once after the downtime fire one job in total')
  t.equal(await fire(), 0, 'the next pass fires nothing')
  const schedule = await scheduleOf(h, 'rjob_catch-up')
  t.equal(schedule.next_run_at, '2026-07-02T11:05:00.000Z', 'next_run_at moved on past now')
  t.equal(schedule.last_run_at, '2026-07-02T11:03:00.000Z')
  const jobs = await jobsOf(h, 'catch.up')
  t.same(
    jobs.map((j) => occurrenceOf(j.id)),
    ['2026-07-02T11:00:00.000Z', '2026-07-02T08:05:00.000Z'],
    'the 35 missed occurrences before 11:00 never fire',
  )
  t.equal(schedule.last_job_id, jobs[0].id)

  freezeAt(h, '2026-07-02T11:05:00Z')
  t.equal(await fire(), 1, 'back on schedule')
  t.equal((await jobsOf(h, 'catch.up')).length, 3)
})

t.test('an occurrence before the schedule existed never fires, nor one while it was deleted', async (t) => {
  t.teardown(() => deleteAll(h))
  const fire = firing(h)
  freezeAt(h, '2026-07-03T10:00:00.500Z')
  const made = await put({ job_type: 'fresh.hourly', cron_expression: '0 * * * *' })
  t.equal(made.body.next_run_at, '2026-07-03T11:00:00.000Z', '10:00, half a second ago, is not next')
  t.equal(await fire(), 0)
  freezeAt(h, '2026-07-03T10:59:59Z')
  t.equal(await fire(), 0)
  freezeAt(h, '2026-07-03T11:00:01Z')
  t.equal(await fire(), 1)

  freezeAt(h, '2026-07-03T11:10:00Z')
  t.equal((await h.request('DELETE', '/jobsvc/v1/recurring/rjob_fresh-hourly')).status, 204)
  freezeAt(h, '2026-07-03T13:10:00Z')
  t.equal(await fire(), 0, 'a deleted schedule does not fire')
  const again = await put({ job_type: 'fresh.hourly', cron_expression: '0 * * * *' })
  t.equal(again.status, 201)
  t.match(again.body, { next_run_at: '2026-07-03T14:00:00.000Z', last_run_at: null, last_job_id: null, created_at: '2026-07-03T13:10:00.000Z' })
  t.equal(await fire(), 0, '12:00 and 13:00 passed while the schedule was deleted')
  freezeAt(h, '2026-07-03T14:00:01Z')
  t.equal(await fire(), 1)
  t.same(
    (await jobsOf(h, 'fresh.hourly')).map((j) => occurrenceOf(j.id)),
    ['2026-07-03T14:00:00.000Z', '2026-07-03T11:00:00.000Z'],
  )
})

/*
 * Expected instants worked out by hand from the 2026 transitions, not from a cron library:
 * Europe/Berlin springs forward on 29 March at 02:00 CET (01:00Z) to 03:00 CEST and falls back on
 * 25 October at 03:00 CEST (01:00Z) to 02:00 CET; America/New_York springs forward on 8 March at
 * 02:00 EST (07:00Z) to 03:00 EDT and falls back on 1 November at 02:00 EDT (06:00Z) to 01:00 EST.
 */
const dstCases = [
  {
    name: 'Europe/Berlin 02:30 daily across the spring-forward',
    job_type: 'dst.berlin.spring',
    cron: '30 2 * * *',
    timezone: 'Europe/Berlin',
    from: '2026-03-28T01:00:00Z',
    to: '2026-03-30T01:00:00Z',
    expected: [
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:30:00.000Z', // 02:30 does not exist: once, at 03:30 CEST
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ],
    nextAfter: '2026-03-31T00:30:00.000Z',
  },
  {
    name: 'America/New_York 02:30 daily across the spring-forward',
    job_type: 'dst.newyork.spring',
    cron: '30 2 * * *',
    timezone: 'America/New_York',
    from: '2026-03-07T07:00:00Z',
    to: '2026-03-09T07:00:00Z',
    expected: [
      '2026-03-07T07:30:00.000Z', // 02:30 EST
      '2026-03-08T07:30:00.000Z', // 02:30 does not exist: once, at 03:30 EDT
      '2026-03-09T06:30:00.000Z', // 02:30 EDT
    ],
    nextAfter: '2026-03-10T06:30:00.000Z',
  },
  {
    name: 'Europe/Berlin 02:30 daily across the fall-back',
    job_type: 'dst.berlin.fall',
    cron: '30 2 * * *',
    timezone: 'Europe/Berlin',
    from: '2026-10-24T00:00:00Z',
    to: '2026-10-26T02:00:00Z',
    expected: [
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // the first 02:30 (CEST); 02:30 CET (01:30Z) does not fire again
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ],
    nextAfter: '2026-10-27T01:30:00.000Z',
  },
  {
    name: 'America/New_York hourly across the spring-forward',
    job_type: 'dst.newyork.hourly',
    cron: '0 * * * *',
    timezone: 'America/New_York',
    from: '2026-03-08T03:30:00Z',
    to: '2026-03-08T09:30:00Z',
    expected: [
      '2026-03-08T04:00:00.000Z', // 23:00 EST on the 7th
      '2026-03-08T05:00:00.000Z', // 00:00 EST
      '2026-03-08T06:00:00.000Z', // 01:00 EST
      '2026-03-08T07:00:00.000Z', // 03:00 EDT (02:00 does not exist)
      '2026-03-08T08:00:00.000Z', // 04:00 EDT
      '2026-03-08T09:00:00.000Z', // 05:00 EDT
    ],
    nextAfter: '2026-03-08T10:00:00.000Z',
  },
  {
    name: 'America/New_York 01:30 daily across the fall-back',
    job_type: 'dst.newyork.fall',
    cron: '30 1 * * *',
    timezone: 'America/New_York',
    from: '2026-10-31T05:00:00Z',
    to: '2026-11-02T07:00:00Z',
    expected: [
      '2026-10-31T05:30:00.000Z', // 01:30 EDT
      '2026-11-01T05:30:00.000Z', // the first 01:30 (EDT); 01:30 EST (06:30Z) does not fire again
      '2026-11-02T06:30:00.000Z', // 01:30 EST
    ],
    nextAfter: '2026-11-03T06:30:00.000Z',
  },
]

const stepMs = 60_000

t.test('daylight-saving changes: each local occurrence fires exactly once, minute by minute', async (t) => {
  const fire = firing(h)
  t.strictSame((await h.request('GET', '/jobsvc/v1/recurring')).body.data, [], 'no other schedule can fire during the walk')
  for (const c of dstCases) {
    await t.test(c.name, async (t) => {
      freezeAt(h, c.from)
      const made = await put({ job_type: c.job_type, cron_expression: c.cron, timezone: c.timezone })
      t.equal(made.status, 201)
      t.equal(made.body.next_run_at, c.expected[0], 'the first occurrence')
      let fired = 0
      for (let at = Date.parse(c.from) + 1000; at <= Date.parse(c.to); at += stepMs) {
        freezeAt(h, at)
        fired += await fire()
      }
      t.equal(fired, c.expected.length, 'as many firings as occurrences')
      const jobs = (await jobsOf(h, c.job_type)).reverse()
      t.same(
        jobs.map((j) => occurrenceOf(j.id)),
        c.expected,
        'exactly the expected occurrences',
      )
      for (const j of jobs) {
        const late = Date.parse(j.created_at) - decodeTime(j.id.replace(/^job_/, ''))
        t.ok(late > 0 && late <= stepMs, `${occurrenceOf(j.id)} fired at the first pass after it (${late} ms)`)
        t.strictSame(j.tags, { recurring_id: idOf(c.job_type) })
      }
      const schedule = await scheduleOf(h, idOf(c.job_type))
      t.equal(schedule.next_run_at, c.nextAfter, 'next_run_at after the window')
      t.equal(schedule.last_job_id, jobs.at(-1)?.id)
      t.equal((await h.request('DELETE', `/jobsvc/v1/recurring/${idOf(c.job_type)}`)).status, 204)
    })
  }
})

t.test('fired jobs take allowance units; a used-up allowance skips the occurrence', async (t) => {
  const q = await startHarness(t, import.meta.filename, {
    roles: ['api', 'projector'],
    suffix: '_quota',
    config: { plans: resolvePlans({ business: { monthly_jobs: 4 } }) },
  })
  t.teardown(() => void (q.runtime.now = realNow))
  const fire = firing(q)
  const create = (n: number) => q.request('POST', '/jobsvc/v1/jobs', { job_type: 'manual', payload: { n } })
  const putQ = (jobType: string) => q.request('PUT', `/jobsvc/v1/recurring/${idOf(jobType)}`, { job_type: jobType, cron_expression: '*/5 * * * *' })

  freezeAt(q, '2026-06-10T10:00:30Z')
  const first = await create(1)
  t.equal(first.status, 201)
  t.equal(first.headers.get('x-quota-limit'), '4')
  t.equal(first.headers.get('x-quota-used'), '0')
  t.equal(first.headers.get('x-quota-reset'), String(Date.parse('2026-07-01T00:00:00Z') / 1000))
  t.equal((await putQ('quota.tick')).status, 201)

  freezeAt(q, '2026-06-10T10:05:01Z')
  t.equal(await fire(), 1)
  const second = await create(2)
  t.equal(second.status, 201)
  t.equal(second.headers.get('x-quota-used'), '2', 'the fired job took a unit')

  freezeAt(q, '2026-06-10T10:10:01Z')
  t.equal(await fire(), 1, 'the last unit goes to the schedule')
  const warnings = await eventually(
    async () => {
      const rows = await q.runtime.sql`SELECT kind FROM activity WHERE project_id = ${q.projectId} AND kind LIKE 'allowance_warning_%' ORDER BY kind`
      return rows.length >= 2 && rows
    },
    10_000,
    'the allowance warnings',
  )
  t.same(
    warnings.map((r) => r.kind),
    ['allowance_warning_100', 'allowance_warning_80'],
    'a fired job that reaches the allowance warns like any creation',
  )
  const refused = await create(3)
  t.equal(refused.status, 429)
  t.equal(refused.body.error.code, 'monthly_allowance_exceeded')
  t.equal(refused.headers.get('x-quota-used'), '4')

  freezeAt(q, '2026-06-10T10:15:01Z')
  t.equal(await fire(), 0, 'used up: the occurrence creates no job, and the pass goes on')
  const skipped = occurrenceJobId(q.projectId, 'rjob_quota-tick', new Date('2026-06-10T10:15:00Z'))
  t.equal((await q.request('GET', `/jobsvc/v1/jobs/${skipped}`)).status, 404, "the occurrence's job does not exist")
  const afterSkip = await scheduleOf(q, 'rjob_quota-tick')
  t.match(
    afterSkip,
    { next_run_at: '2026-06-10T10:20:00.000Z', last_run_at: '2026-06-10T10:10:01.000Z' },
    'the skip moves next_run_at on and is not a run',
  )
  t.equal(occurrenceOf(afterSkip.last_job_id), '2026-06-10T10:10:00.000Z', 'the last job is still the 10:10 one')
  freezeAt(q, '2026-06-10T10:15:02Z')
  t.equal(await fire(), 0, 'the skipped occurrence is not tried again')

  t.equal((await putQ('quota.other')).status, 201)
  freezeAt(q, '2026-06-10T10:20:01Z')
  t.equal(await fire(), 0, 'two schedules due with nothing left: both skip, nothing throws')
  t.same(
    ((await q.request('GET', '/jobsvc/v1/recurring')).body.data as any[]).map((s) => [s.id, s.next_run_at]),
    [
      ['rjob_quota-other', '2026-06-10T10:25:00.000Z'],
      ['rjob_quota-tick', '2026-06-10T10:25:00.000Z'],
    ],
  )
  const [usage] = await q.runtime.sql`SELECT used::int AS used FROM project_usage WHERE project_id = ${q.projectId} AND period_start = '2026-06-01'`
  t.equal(usage?.used, 4, 'skipped occurrences took no unit')

  freezeAt(q, '2026-07-01T00:00:01Z')
  t.equal(await fire(), 2, 'a new period: both schedules fire their latest occurrence')
  const july = await create(4)
  t.equal(july.status, 201)
  t.equal(july.headers.get('x-quota-used'), '2', 'and count in the new period')
  t.same(
    (await jobsOf(q, 'quota.tick')).map((j) => occurrenceOf(j.id)),
    ['2026-07-01T00:00:00.000Z', '2026-06-10T10:10:00.000Z', '2026-06-10T10:05:00.000Z'],
  )
  t.same(
    (await jobsOf(q, 'quota.other')).map((j) => occurrenceOf(j.id)),
    ['2026-07-01T00:00:00.000Z'],
  )
})

t.test('a project whose billing state is not active skips its occurrences, like any creation', async (t) => {
  const other = await h.newProject()
  t.teardown(() => deleteAll(h, other.apiKey))
  const fire = firing(h)
  freezeAt(h, '2026-08-03T09:00:30Z')
  const made = await httpRequest(h.url, other.apiKey, 'PUT', '/jobsvc/v1/recurring/rjob_billing-tick', {
    job_type: 'billing.tick',
    cron_expression: '*/5 * * * *',
  })
  t.equal(made.status, 201)
  await new BillingService(h.runtime).setBillingState(other.projectId, 'past_due', null)

  freezeAt(h, '2026-08-03T09:05:01Z')
  t.equal(await fire(), 0, 'the occurrence creates no job')
  const occurrence = occurrenceJobId(other.projectId, 'rjob_billing-tick', new Date('2026-08-03T09:05:00Z'))
  t.equal((await httpRequest(h.url, other.apiKey, 'GET', `/jobsvc/v1/jobs/${occurrence}`)).status, 404)
  const history = await recurringHandler.history(h.runtime.store, recurringHandler.ref(other.projectId, 'rjob_billing-tick'))
  const fired = history.flatMap((r) => r.message.events).find((e) => e.type === 'recurring_fired')
  t.match(fired?.data, { job_id: null, skipped_reason: 'billing_state_blocked' }, 'recorded as skipped, with the reason')
  t.equal((await scheduleOf(h, 'rjob_billing-tick', other.apiKey)).next_run_at, '2026-08-03T09:10:00.000Z', 'and not tried again')
  const [usage] = await h.runtime.sql`SELECT used::int AS used FROM project_usage WHERE project_id = ${other.projectId}`
  t.equal(usage?.used ?? 0, 0, 'no allowance unit was taken')
})
