import t from 'tap'
import { dedupKeyHandler } from '../../streams/aggregates.ts'
import { dedupKeyRef } from '../../services/use-cases/jobs/dedup.ts'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness, withClockShifted, type HttpResponse } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

// Deduplication on create (issue 29, item 5; README, "Deduplication"), against the real NATS and
// Postgres, with two API processes: the key is an aggregate on the log, so creates racing through
// either process agree on one job.
// The scheduler promotes debounced jobs when their quiet period ends.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector', 'scheduler'], tunables: { scheduler_interval_ms: 100 } })
const second = await startApiProcess(t, h.runtime)
const urls = [h.url, second.url]
const on = (process: number, method: string, path: string, body?: unknown) => httpRequest(urls[process]!, h.apiKey, method, path, body)

const create = (body: Record<string, unknown>, process = 0) => on(process, 'POST', '/jobsvc/v1/jobs', { job_type: 'dd', payload: {}, ...body })

/** The jobs of `queue` in the read model, once it holds every write up to `seq`. */
async function jobsIn(queue: string, seq: number): Promise<Array<{ id: string; payload: unknown }>> {
  const res = await on(0, 'GET', `/jobsvc/v1/jobs?queue=${queue}&limit=100&min_seq=${seq}`)
  if (res.status !== 200) throw new Error(`list answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body.data
}

const seqOf = (res: HttpResponse) => Number(res.headers.get('x-event-seq'))

async function claimAll(queue: string, workerId: string): Promise<string[]> {
  const res = await on(0, 'POST', '/jobsvc/v1/workers/poll', { worker_id: workerId, queues: [queue], capacity: 10, wait_seconds: 1 })
  if (res.status !== 200) throw new Error(`poll answered ${res.status}: ${JSON.stringify(res.body)}`)
  return (res.body.jobs as Array<{ id: string }>).map((j) => j.id)
}

async function ack(jobId: string, workerId: string): Promise<void> {
  const res = await on(0, 'POST', '/jobsvc/v1/workers/ack', { job_id: jobId, worker_id: workerId, status: 'succeeded', duration_ms: 1 })
  if (res.status !== 200) throw new Error(`ack answered ${res.status}: ${JSON.stringify(res.body)}`)
}

t.test('20 concurrent duplicate creates through two processes make exactly one job', async (t) => {
  for (const rule of ['pending', 'active', { window_seconds: 600 }] as const) {
    const queue = `dd-race-${typeof rule === 'string' ? rule : 'window'}`
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => create({ queue, payload: { i }, dedup: { key: 'race', while: rule } }, i % 2)),
    )
    const created = answers.filter((r) => r.status === 201)
    const duplicates = answers.filter((r) => r.status === 200)
    t.equal(created.length, 1, `${JSON.stringify(rule)}: one create answers 201`)
    t.equal(duplicates.length, 19, `${JSON.stringify(rule)}: the other 19 answer 200`)
    const id = created[0]!.body.id
    t.same(new Set(duplicates.map((r) => r.body.id)), new Set([id]), 'every duplicate answers the created job')
    t.ok(
      duplicates.every((r) => r.body.deduplicated === true && r.headers.get('location') === `/jobsvc/v1/jobs/${id}`),
      'each duplicate says so and points at the job',
    )
    const listed = await jobsIn(queue, Math.max(...answers.map(seqOf)))
    t.same(
      listed.map((j) => j.id),
      [id],
      'the queue holds exactly one job',
    )
  }
})

t.test('a duplicate answers 200 with the existing job’s detail; a job without dedup answers as before', async (t) => {
  const first = await create({ queue: 'dd-shape', payload: { v: 1 }, dedup: { key: 'k' } })
  t.equal(first.status, 201)
  t.same(Object.keys(first.body).sort(), ['attempt', 'created_at', 'id', 'job_type', 'max_attempts', 'queue', 'run_at', 'state'])
  const dup = await create({ queue: 'dd-shape', payload: { v: 2 }, dedup: { key: 'k' } }, 1)
  t.equal(dup.status, 200)
  const detail = await on(0, 'GET', `/jobsvc/v1/jobs/${first.body.id}`)
  t.same(dup.body, { ...detail.body, deduplicated: true }, 'the job as a read shows it, plus `deduplicated`')
  t.same(dup.body.payload, { v: 1 }, 'skip keeps the first payload')

  const plain = await create({ queue: 'dd-shape', payload: { v: 3 } })
  t.equal(plain.status, 201)
  t.same(Object.keys(plain.body).sort(), ['attempt', 'created_at', 'id', 'job_type', 'max_attempts', 'queue', 'run_at', 'state'])
  const plainDetail = await on(0, 'GET', `/jobsvc/v1/jobs/${plain.body.id}`)
  t.notOk('deduplicated' in plainDetail.body || 'dedup' in plainDetail.body, 'the detail of a job without dedup is unchanged')
  t.same(Object.keys(plainDetail.body).sort(), Object.keys(detail.body).sort(), 'and a job with dedup shows no extra field either')
  const again = await create({ queue: 'dd-shape', payload: { v: 3 } })
  t.equal(again.status, 201, 'without dedup the same body creates another job')
})

t.test('while "pending": a running holder lets a new job in', async (t) => {
  const rule = { key: 'p', while: 'pending' }
  const a = await create({ queue: 'dd-pending', dedup: rule })
  t.equal(a.status, 201)
  const scheduled = await create({ queue: 'dd-pending-s', run_at: new Date(Date.now() + 3_600_000).toISOString(), dedup: rule })
  t.equal(scheduled.body.state, 'scheduled')
  t.equal((await create({ queue: 'dd-pending-s', dedup: rule })).status, 200, 'a scheduled job holds a pending key')
  t.equal((await create({ queue: 'dd-pending', dedup: rule }, 1)).status, 200)
  t.same(await claimAll('dd-pending', 'w-pending'), [a.body.id])
  const b = await create({ queue: 'dd-pending', dedup: rule }, 1)
  t.equal(b.status, 201, 'the holder runs: a new job is created')
  t.not(b.body.id, a.body.id)
  const c = await create({ queue: 'dd-pending', dedup: rule })
  t.equal(c.status, 200)
  t.equal(c.body.id, b.body.id, 'the new job holds the key now')
})

t.test('while "active": a running holder answers; an ended one lets a new job in', async (t) => {
  const rule = { key: 'a' }
  const a = await create({ queue: 'dd-active', dedup: rule })
  t.equal(a.status, 201)
  t.same(await claimAll('dd-active', 'w-active'), [a.body.id])
  const dup = await create({ queue: 'dd-active', dedup: rule }, 1)
  t.equal(dup.status, 200, '"active" is the default: a running job holds the key')
  t.match(dup.body, { id: a.body.id, state: 'processing', deduplicated: true })
  await ack(a.body.id, 'w-active')
  const b = await create({ queue: 'dd-active', dedup: rule })
  t.equal(b.status, 201, 'the holder ended: a new job is created')
})

t.test('while {window_seconds}: any job created within the window holds the key, whatever its state', async (t) => {
  const rule = { key: 'w', while: { window_seconds: 60 } }
  const a = await create({ queue: 'dd-window', dedup: rule })
  t.equal(a.status, 201)
  t.same(await claimAll('dd-window', 'w-window'), [a.body.id])
  await ack(a.body.id, 'w-window')
  const dup = await create({ queue: 'dd-window', dedup: rule }, 1)
  t.equal(dup.status, 200)
  t.match(dup.body, { id: a.body.id, state: 'succeeded' })
  const later = await withClockShifted(h.runtime, 61_000, () => create({ queue: 'dd-window', dedup: rule }))
  t.equal(later.status, 201, 'past the window a new job is created')
})

t.test('scope: a queue key holds in its queue, a project key across queues', async (t) => {
  const q1 = await create({ queue: 'dd-scope-1', dedup: { key: 'shared', scope: 'queue' } })
  const q2 = await create({ queue: 'dd-scope-2', dedup: { key: 'shared' } })
  t.equal(q1.status, 201)
  t.equal(q2.status, 201, 'the default scope is the queue: another queue has its own key')
  const p1 = await create({ queue: 'dd-scope-1', dedup: { key: 'shared', scope: 'project' } })
  t.equal(p1.status, 201, 'a project key is not the queue key of the same text')
  const p2 = await create({ queue: 'dd-scope-2', dedup: { key: 'shared', scope: 'project' } }, 1)
  t.equal(p2.status, 200)
  t.equal(p2.body.id, p1.body.id, 'a project key holds across queues')
  t.equal(p2.body.queue, 'dd-scope-1')

  const other = await h.newProject()
  const elsewhere = await httpRequest(h.url, other.apiKey, 'POST', '/jobsvc/v1/jobs', {
    job_type: 'dd',
    payload: {},
    queue: 'dd-scope-1',
    dedup: { key: 'shared', scope: 'project' },
  })
  t.equal(elsewhere.status, 201, "another project's key is its own")
})

t.test('batch: each item deduplicates; items sharing a key create once, the first in order', async (t) => {
  const item = (n: number, key: string) => ({ job_type: 'dd', payload: { n }, queue: 'dd-batch', dedup: { key } })
  const res = await on(1, 'POST', '/jobsvc/v1/jobs/batch', { jobs: [item(0, 'x'), item(1, 'x'), item(2, 'y'), item(3, 'x')] })
  t.equal(res.status, 200)
  const [a, b, c, d] = res.body.results
  t.equal(a.status, 201)
  t.match(b, { status: 200, body: { id: a.body.id, deduplicated: true, payload: { n: 0 } } })
  t.equal(c.status, 201)
  t.match(d, { status: 200, body: { id: a.body.id } })
  t.equal(res.body.created, 2)
  t.equal(res.body.failed, 0, 'a duplicate is not a failure')

  const single = await create({ queue: 'dd-batch', dedup: { key: 'y' } })
  t.equal(single.status, 200, 'a single create meets the batch item’s job')
  t.equal(single.body.id, c.body.id)

  const batches = await Promise.all(Array.from({ length: 20 }, (_, i) => on(i % 2, 'POST', '/jobsvc/v1/jobs/batch', { jobs: [item(i, 'raced')] })))
  const items = batches.map((r) => r.body.results[0])
  t.equal(items.filter((r) => r.status === 201).length, 1, '20 concurrent batches with one key: one job')
  t.equal(new Set(items.map((r) => r.body.id)).size, 1)
})

t.test('a key naming a job that never appeared (a crash between the two appends) is free', async (t) => {
  const queue = 'dd-crash'
  const dedup = { key: 'orphan', scope: 'queue' as const }
  const ref = dedupKeyRef(h.projectId, dedup, queue)
  const ghost = `job_${h.runtime.newUlid()}`
  await dedupKeyHandler.decide(h.runtime, ref, {
    type: 'take_dedup_key',
    data: { job_id: ghost, key: dedup.key, scope: 'queue', queue, free_holder: null },
    meta: { now: new Date(Date.now() - 60_000).toISOString() },
  })
  const res = await create({ queue, dedup })
  t.equal(res.status, 201, 'the create takes the abandoned key')
  t.not(res.body.id, ghost)
  t.equal((await create({ queue, dedup }, 1)).body.id, res.body.id, 'and holds it from then on')

  // Taken just now: the holder's create may still be in flight, so a create waits for it until
  // the key counts as abandoned, then takes it.
  const fresh = { key: 'orphan-fresh', scope: 'queue' as const }
  await dedupKeyHandler.decide(h.runtime, dedupKeyRef(h.projectId, fresh, queue), {
    type: 'take_dedup_key',
    data: { job_id: `job_${h.runtime.newUlid()}`, key: fresh.key, scope: 'queue', queue, free_holder: null },
    meta: { now: new Date().toISOString() },
  })
  const late = await create({ queue, dedup: fresh })
  t.equal(late.status, 201, 'a fresh key naming no job is taken once it counts as abandoned')
})

t.test('a create that fails gives its key back at once', async (t) => {
  const missingParent = 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV'
  const failed = await create({ queue: 'dd-fail', parent_job_id: missingParent, dedup: { key: 'f' } })
  isError(t, failed, 422, 'parent_not_found')
  const ok = await create({ queue: 'dd-fail', dedup: { key: 'f' } })
  t.equal(ok.status, 201)
})

t.test('replace_payload: 20 concurrent duplicates through two processes make one job, with the last payload', async (t) => {
  const queue = 'dd-replace-race'
  const answers = await Promise.all(
    Array.from({ length: 20 }, (_, i) => create({ queue, payload: { i }, dedup: { key: 'rr', on_duplicate: 'replace_payload' } }, i % 2)),
  )
  t.equal(answers.filter((r) => r.status === 201).length, 1, 'one create answers 201')
  t.equal(answers.filter((r) => r.status === 200).length, 19)
  const id = answers.find((r) => r.status === 201)!.body.id
  t.ok(
    answers.every((r) => r.body.id === id),
    'every answer names the one job',
  )
  const history = await on(1, 'GET', `/jobsvc/v1/jobs/${id}/history?limit=100`)
  const replacements = (history.body.data as Array<{ type: string; data: { payload: unknown } }>).filter((e) => e.type === 'job_payload_replaced')
  t.ok(replacements.length >= 1, 'the history records the replacements')
  const detail = await on(1, 'GET', `/jobsvc/v1/jobs/${id}`)
  t.same(detail.body.payload, replacements.at(-1)!.data.payload, 'the job holds the last replacement')
  t.same(
    (await jobsIn(queue, Math.max(...answers.map(seqOf)))).map((j) => [j.id, j.payload]),
    [[id, detail.body.payload]],
    'so does the list',
  )
  const polled = await on(1, 'POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-rr', queues: [queue], capacity: 5, wait_seconds: 1 })
  t.same(
    polled.body.jobs.map((j: { id: string; payload: unknown }) => [j.id, j.payload]),
    [[id, detail.body.payload]],
    'and the claim hands the worker the last one',
  )
})

t.test('replace_payload: a waiting job takes the payload everywhere it is read; a running one is answered as it is', async (t) => {
  const queue = 'dd-replace'
  const rule = { key: 'r', on_duplicate: 'replace_payload' }
  const first = await create({ queue, payload: { v: 1 }, dedup: rule })
  t.equal(first.status, 201)
  const id = first.body.id
  const dup = await create({ queue, payload: { v: 2 }, dedup: rule }, 1)
  t.equal(dup.status, 200)
  t.match(dup.body, { id, state: 'pending', payload: { v: 2 }, deduplicated: true }, 'the answer shows the new payload')
  t.notOk('payload_seq' in dup.body, 'the detail gains no field')
  t.same((await on(0, 'GET', `/jobsvc/v1/jobs/${id}`)).body.payload, { v: 2 }, 'a read through the other process too')
  const history = await on(0, 'GET', `/jobsvc/v1/jobs/${id}/history?limit=100`)
  const events = history.body.data as Array<{ type: string; cursor: string; data: { payload?: unknown } }>
  t.same(
    events.map((e) => e.type),
    ['job_created', 'job_payload_replaced'],
  )
  t.same(events[1]!.data.payload, { v: 2 })
  const asOf = await on(0, 'GET', `/jobsvc/v1/jobs/${id}?as_of=${encodeURIComponent(events[0]!.cursor)}`)
  t.same(asOf.body.payload, { v: 1 }, 'as of its creation it had the first payload')
  const asOfNow = await on(0, 'GET', `/jobsvc/v1/jobs/${id}?as_of=${encodeURIComponent(events[1]!.cursor)}`)
  t.same(asOfNow.body.payload, { v: 2 })
  t.same(
    (await jobsIn(queue, seqOf(dup))).map((j) => j.payload),
    [{ v: 2 }],
    'the list (read model) shows it',
  )

  const polled = await on(0, 'POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-r', queues: [queue], capacity: 5, wait_seconds: 1 })
  t.match(polled.body.jobs, [{ id, payload: { v: 2 } }], 'the worker gets the new payload')
  const running = await create({ queue, payload: { v: 3 }, dedup: rule })
  t.equal(running.status, 200, 'under "active" a running job answers')
  t.match(running.body, { id, state: 'processing', payload: { v: 2 } }, 'and keeps the payload its attempt runs with')
  const pendingRule = await create({ queue, payload: { v: 4 }, dedup: { ...rule, while: 'pending' } })
  t.equal(pendingRule.status, 201, 'under "pending" a running job lets a new one in')
})

t.test('keep_latest_queued: one waits behind the running one, with the latest payload', async (t) => {
  const queue = 'dd-keep'
  const rule = { key: 'kl', on_duplicate: 'keep_latest_queued' }
  const a = await create({ queue, payload: { v: 0 }, dedup: rule })
  t.equal(a.status, 201)
  const waiting = await create({ queue, payload: { v: 1 }, dedup: rule }, 1)
  t.match(waiting, { status: 200, body: { id: a.body.id, payload: { v: 1 }, deduplicated: true } }, 'a waiting job takes the payload')
  t.same(await claimAll(queue, 'w-keep'), [a.body.id])

  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => create({ queue, payload: { v: 10 + i }, dedup: rule }, i % 2)))
  const created = answers.filter((r) => r.status === 201)
  t.equal(created.length, 1, 'behind the running job, 20 concurrent creates make exactly one waiting job')
  const b = created[0]!.body.id
  t.not(b, a.body.id)
  t.ok(
    answers.filter((r) => r.status === 200).every((r) => r.body.id === b && r.body.deduplicated === true),
    'the other 19 answer the waiting one',
  )
  const detail = await on(1, 'GET', `/jobsvc/v1/jobs/${b}`)
  const history = await on(1, 'GET', `/jobsvc/v1/jobs/${b}/history?limit=100`)
  const last = (history.body.data as Array<{ type: string; data: { payload: unknown } }>).filter((e) => e.type === 'job_payload_replaced').at(-1)
  t.same(detail.body.payload, last!.data.payload, 'it holds the latest payload')
  const listed = await jobsIn(queue, Math.max(...answers.map(seqOf)))
  t.same(listed.map((j) => j.id).sort(), [a.body.id, b].sort(), 'one running and one waiting, nothing more')

  await ack(a.body.id, 'w-keep')
  const polled = await on(0, 'POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-keep-2', queues: [queue], capacity: 5, wait_seconds: 1 })
  t.match(polled.body.jobs, [{ id: b, payload: detail.body.payload }], 'the waiting job runs with the latest payload')
})

t.test('debounce: creates within the quiet period make one job that runs once, with the last payload', async (t) => {
  const queue = 'dd-debounce'
  const debounce = { key: 'd', seconds: 1, max_wait_seconds: 60 }
  const sent = Date.now()
  const first = await create({ queue, payload: { v: 1 }, debounce })
  t.match(first, { status: 201, body: { state: 'scheduled' } })
  t.ok(Date.parse(first.body.run_at) >= sent + 1000, 'due a quiet period after the create')
  const second = await create({ queue, payload: { v: 2 }, debounce }, 1)
  t.match(second, { status: 200, body: { id: first.body.id, payload: { v: 2 }, state: 'scheduled', deduplicated: true } })
  t.ok(Date.parse(second.body.run_at) >= Date.parse(first.body.run_at), 'the due time moved on')
  const third = await create({ queue, payload: { v: 3 }, debounce })
  t.equal(third.body.id, first.body.id)

  const ran = await eventually(
    async () => {
      const polled = await on(1, 'POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-db', queues: [queue], capacity: 5, wait_seconds: 2 })
      return polled.body.jobs.length > 0 ? polled.body.jobs : null
    },
    30_000,
    'the debounced job to become due',
  )
  t.match(ran, [{ id: first.body.id, payload: { v: 3 } }], 'it runs once, with the last payload')
  t.same(
    (await jobsIn(queue, seqOf(third))).map((j) => j.id),
    [first.body.id],
    'one job',
  )
  const next = await create({ queue, payload: { v: 4 }, debounce })
  t.equal(next.status, 201, 'once it runs, the next create starts a new quiet period')
})

t.test('debounce: each create moves the due time, never past max_wait_seconds after the first', async (t) => {
  const queue = 'dd-debounce-wait'
  const debounce = { key: 'w', seconds: 100, max_wait_seconds: 150 }
  const first = await create({ queue, payload: { v: 1 }, debounce })
  t.equal(first.status, 201)
  const createdAt = Date.parse(first.body.created_at)
  const soon = await withClockShifted(h.runtime, 10_000, () => create({ queue, payload: { v: 2 }, debounce }))
  t.equal(soon.status, 200)
  t.ok(Date.parse(soon.body.run_at) >= createdAt + 110_000, 'a quiet period from the create')
  t.ok(Date.parse(soon.body.run_at) < createdAt + 150_000)
  const late = await withClockShifted(h.runtime, 80_000, () => create({ queue, payload: { v: 3 }, debounce }))
  t.equal(late.body.run_at, new Date(createdAt + 150_000).toISOString(), 'capped at the first create plus max_wait_seconds')
  t.same(late.body.payload, { v: 3 })

  const raced = await Promise.all(
    Array.from({ length: 20 }, (_, i) => create({ queue, payload: { i }, debounce: { ...debounce, key: 'raced' } }, i % 2)),
  )
  t.equal(raced.filter((r) => r.status === 201).length, 1, '20 concurrent debounced creates make one job')
  t.equal(new Set(raced.map((r) => r.body.id)).size, 1)
})

t.test('bad dedup options answer 400 invalid_request; modes not offered yet are refused, not ignored', async (t) => {
  const bad: Array<[string, unknown]> = [
    ['not an object', 'k'],
    ['no key', {}],
    ['an empty key', { key: '' }],
    ['a key longer than a tag value', { key: 'k'.repeat(501) }],
    ['an unknown scope', { key: 'k', scope: 'tenant' }],
    ['an unknown rule', { key: 'k', while: 'running' }],
    ['a zero window', { key: 'k', while: { window_seconds: 0 } }],
    ['a window beyond 30 days', { key: 'k', while: { window_seconds: 2_592_001 } }],
    ['a fractional window', { key: 'k', while: { window_seconds: 1.5 } }],
    ['an unknown field', { key: 'k', keep: true }],
    ['an unknown mode', { key: 'k', on_duplicate: 'merge' }],
    ['keep_latest_queued with a rule other than active', { key: 'k', on_duplicate: 'keep_latest_queued', while: 'pending' }],
  ]
  for (const [what, dedup] of bad) isError(t, await create({ queue: 'dd-bad', dedup }), 400, 'invalid_request', what)
  const badDebounce: Array<[string, Record<string, unknown>]> = [
    ['debounce without a key', { debounce: { seconds: 5, max_wait_seconds: 60 } }],
    ['a zero quiet period', { debounce: { key: 'k', seconds: 0, max_wait_seconds: 60 } }],
    ['a longest wait shorter than the quiet period', { debounce: { key: 'k', seconds: 60, max_wait_seconds: 5 } }],
    ['debounce with dedup', { debounce: { key: 'k', seconds: 5, max_wait_seconds: 60 }, dedup: { key: 'k' } }],
    ['debounce with run_at', { debounce: { key: 'k', seconds: 5, max_wait_seconds: 60 }, run_at: new Date().toISOString() }],
  ]
  for (const [what, body] of badDebounce) isError(t, await create({ queue: 'dd-bad', ...body }), 400, 'invalid_request', what)
  const plain = await create({ queue: 'dd-bad', dedup: null, debounce: null })
  t.equal(plain.status, 201, 'null options are absent ones')

  const res = await on(0, 'POST', '/jobsvc/v1/jobs/batch', { jobs: [{ job_type: 'dd', payload: {}, dedup: { key: '' } }] })
  t.match(res.body.results[0], { status: 400, error: { code: 'invalid_request' } })
  t.match(res.body.results[0].error.message, /^body\.jobs\[0\]\.dedup\.key/)
  t.same(
    (await jobsIn('dd-bad', seqOf(plain))).map((j) => j.id),
    [plain.body.id],
    'nothing was created for the refusals',
  )
})
