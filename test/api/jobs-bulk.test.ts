import t from 'tap'
import { resolvePlans } from '../../domain/plans.ts'
import { eventually, httpRequest, startHarness, type Harness } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

// Issue 28, item 6: bulk retry and cancel of the jobs a filter matches, run as an operation by the
// dispatcher role: counted first, one event per job carrying the operation id, skips counted,
// stopped half-way, resumed after its role restarts, capped by the plan, confined to the project.
// Against the real NATS and Postgres.

/** The pace of a bulk operation here: pages of two jobs, a tenth of a second each, so a test can stop or restart one half-way. */
const perSecond = 20
/** The plan's cap on the jobs one bulk action may match, in this file. */
const cap = 40

const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler', 'dispatcher'],
  tunables: { bulk_jobs_per_second: perSecond },
  config: { plans: resolvePlans({ business: { bulk_operation_max_jobs: cap }, free: { bulk_operation_max_jobs: cap } }) },
})

type Caller = Pick<Harness, 'request'>

const bulk = (body: unknown, caller: Caller = h) => caller.request('POST', '/jobsvc/v1/jobs/bulk', body)
const operation = async (id: string) => (await h.request('GET', `/jobsvc/v1/operations/${id}`)).body
const getJob = async (id: string, caller: Caller = h) => (await caller.request('GET', `/jobsvc/v1/jobs/${id}`)).body
const history = async (id: string) => (await h.request('GET', `/jobsvc/v1/jobs/${id}/history?limit=100`)).body.data as any[]
/** The events of the job that carry `operationId`. */
const eventsOf = async (jobId: string, operationId: string) => (await history(jobId)).filter((e) => e.data.operation_id === operationId)

async function createJobs(caller: Caller, n: number, item: Record<string, unknown>): Promise<string[]> {
  const res = await caller.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: Array.from({ length: n }, (_, i) => ({ job_type: 'bulk', payload: { i }, ...item })),
  })
  if (res.status !== 200 || res.body.created !== n) throw new Error(`batch answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body.results.map((r: any) => r.body.id as string)
}

/** `n` jobs of `queue` dead-lettered: created with one attempt, claimed and acked as failed. */
async function deadLettered(caller: Caller, n: number, queue: string, item: Record<string, unknown> = {}): Promise<string[]> {
  const ids = await createJobs(caller, n, { queue, max_attempts: 1, ...item })
  const claimed: string[] = []
  while (claimed.length < n) {
    const res = await caller.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-bulk', queues: [queue], capacity: 50, wait_seconds: 5 })
    claimed.push(...res.body.jobs.map((j: any) => j.id))
    await Promise.all(
      res.body.jobs.map((j: any) =>
        caller.request('POST', '/jobsvc/v1/workers/ack', {
          job_id: j.id,
          worker_id: 'w-bulk',
          status: 'failed',
          error: { type: item.error_type ?? 'Boom', message: 'failed on purpose' },
        }),
      ),
    )
  }
  await eventually(async () => {
    const states = await Promise.all(ids.map(async (id) => (await getJob(id, caller)).state))
    return states.every((s) => s === 'dead_letter')
  })
  return ids
}

/** Waits for the job list to hold `n` jobs of `queue` in `state` (a bulk action counts from it). */
async function listed(caller: Caller, queue: string, state: string, n: number): Promise<void> {
  await eventually(async () => (await caller.request('GET', `/jobsvc/v1/jobs?queue=${queue}&state=${state}&limit=100`)).body.data.length === n)
}

async function ended(id: string, timeoutMs = 30_000) {
  return eventually(
    async () => {
      const op = await operation(id)
      return op.status !== 'running' ? op : null
    },
    timeoutMs,
    `operation ${id} to end`,
  )
}

t.test('validation: the spec’s error envelope, 400 invalid_request, nothing started', async (t) => {
  const bad: Array<[unknown, RegExp]> = [
    [{ action: 'retry', filter: {} }, /at least one/],
    [{ action: 'retry' }, /filter/],
    [{ action: 'explode', filter: { queues: ['a'] } }, /action/],
    [{ action: 'retry', filter: { states: ['lost'] } }, /states/],
    [{ action: 'retry', filter: { states: ['pending'] } }, /retry applies to failed and dead_letter jobs, not pending/],
    [{ action: 'cancel', filter: { states: ['processing'] } }, /not processing/],
    [{ action: 'retry', filter: { queues: ['a'], colour: 'red' } }, /colour|unrecognized/i],
    [{ action: 'retry', filter: { created_from: 'yesterday' } }, /created_from/],
    [{ action: 'retry', filter: { created_from: '2025-03-02T00:00:00Z', created_until: '2025-03-01T00:00:00Z' } }, /after/],
    [{ action: 'retry', filter: { queues: [] } }, /queues/],
    [{ action: 'retry', filter: { queues: ['a'] }, priority: 5 }, /only set_priority/],
    [{ action: 'set_priority', filter: { queues: ['a'] } }, /required for set_priority/],
    [{ action: 'set_priority', filter: { queues: ['a'] }, priority: 601 }, /priority/],
    [{ action: 'retry', filter: { queues: ['a'] }, dry_run: 'yes' }, /dry_run/],
  ]
  for (const [body, message] of bad) {
    const res = await bulk(body)
    isError(t, res, 400, 'invalid_request', JSON.stringify(body))
    t.match(res.body.error.message, message, JSON.stringify(body))
    t.ok(res.body.error.request_id)
  }
  t.equal((await h.request('GET', '/jobsvc/v1/operations')).body.data.length, 0, 'no operation was started')
})

t.test('dry run: the count and the first jobs, by every kind of filter key; nothing changes', async (t) => {
  const failing = await deadLettered(h, 6, 'dry', { tags: { team: 'a' } })
  const other = await deadLettered(h, 3, 'dry', { error_type: 'Timeout', job_type: 'other' })
  const pending = await createJobs(h, 4, { queue: 'dry' })
  await listed(h, 'dry', 'dead_letter', 9)
  const dry = await bulk({ action: 'retry', filter: { queues: ['dry'] }, dry_run: true })
  t.equal(dry.status, 200, JSON.stringify(dry.body))
  t.equal(dry.body.matched, 9, 'the dead-lettered ones: pending jobs are not retried')
  t.strictSame([...dry.body.sample_ids].sort(), [...failing, ...other].sort())
  const count = async (filter: Record<string, unknown>, action = 'retry') => {
    const res = await bulk({ action, filter, dry_run: true })
    t.equal(res.status, 200, JSON.stringify(res.body))
    return res.body.matched as number
  }
  t.equal(await count({ queues: ['dry'], job_types: ['other'] }), 3)
  t.equal(await count({ queues: ['dry'], tags: { team: 'a' } }), 6)
  t.equal(await count({ queues: ['dry'], tags: { team: 'b' } }), 0)
  t.equal(await count({ queues: ['dry'], error_type: 'Timeout' }), 3)
  t.equal(await count({ ids: [failing[0], other[0], pending[0]] }), 2, 'ids: of those only the ones the action applies to')
  t.equal(await count({ queues: ['dry'], states: ['failed'] }), 0)
  t.equal(await count({ queues: ['dry'], created_from: new Date(Date.now() + 60_000).toISOString() }), 0)
  t.equal(await count({ queues: ['dry'], finished_until: new Date(Date.now() + 60_000).toISOString() }), 9)
  t.equal(await count({ queues: ['dry'] }, 'cancel'), 4, 'a cancel counts the pending ones')
  for (const id of failing) t.equal((await getJob(id)).state, 'dead_letter', 'a dry run changes nothing')
})

t.test('bulk retry: every dead-lettered job back to pending, each by one event carrying the operation id', async (t) => {
  const ids = await deadLettered(h, 12, 'retry-all')
  await listed(h, 'retry-all', 'dead_letter', 12)
  const started = await bulk({ action: 'retry', filter: { queues: ['retry-all'] } })
  t.equal(started.status, 202, JSON.stringify(started.body))
  t.match(started.body, { operation_id: /^op_[0-9a-z]{26}$/, matched: 12 })
  t.ok(Number(started.headers.get('x-event-seq')) > 0)
  const opId = started.body.operation_id as string
  const op = await ended(opId)
  t.match(op, { id: opId, kind: 'job_bulk', status: 'succeeded', matched: 12, processed: 12, succeeded: 12, failed: 0, error: null })
  for (const id of ids) {
    const job = await getJob(id)
    t.equal(job.state, 'pending', 'retried')
    t.equal(job.attempt, 1, 'the attempt count stays; max_attempts grows')
    const events = await eventsOf(id, opId)
    t.equal(events.length, 1, 'one event of the operation')
    t.match(events[0], { type: 'job_retried', data: { operation_id: opId, previous_state: 'dead_letter' } })
  }
  const listedOps = (await h.request('GET', '/jobsvc/v1/operations')).body.data
  t.match(
    listedOps.find((o: any) => o.id === opId),
    { kind: 'job_bulk', status: 'succeeded', processed: 12 },
  )
  const again = await bulk({ action: 'retry', filter: { queues: ['retry-all'] }, dry_run: true })
  t.equal(again.body.matched, 0, 'nothing left to retry')
})

t.test('bulk cancel: pending and scheduled jobs cancelled, a running one left alone, continuations follow', async (t) => {
  const pending = await createJobs(h, 3, { queue: 'cancel-all' })
  const scheduled = await createJobs(h, 2, { queue: 'cancel-all', run_at: new Date(Date.now() + 3_600_000).toISOString() })
  const [running] = await createJobs(h, 1, { queue: 'cancel-run' })
  const claimed = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-run', queues: ['cancel-run'], wait_seconds: 5 })
  t.equal(claimed.body.jobs[0].id, running)
  const child = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'bulk', payload: {}, queue: 'cancel-child', parent_job_id: pending[0] })
  t.equal(child.status, 201)
  await listed(h, 'cancel-all', 'pending', 3)
  await listed(h, 'cancel-all', 'scheduled', 2)
  const started = await bulk({ action: 'cancel', filter: { queues: ['cancel-all', 'cancel-run'] } })
  t.match(started.body, { matched: 5 }, 'the running job is not matched')
  const op = await ended(started.body.operation_id)
  t.match(op, { status: 'succeeded', processed: 5, succeeded: 5, failed: 0 })
  for (const id of [...pending, ...scheduled]) {
    t.equal((await getJob(id)).state, 'cancelled')
    t.match(await eventsOf(id, op.id), [{ type: 'job_cancelled', data: { operation_id: op.id, reason: 'requested' } }])
  }
  t.equal((await getJob(running!)).state, 'processing', 'a bulk cancel never stops a running job')
  await eventually(async () => (await getJob(child.body.id)).state === 'cancelled', 15_000, 'the continuation to be cancelled')
})

t.test('bulk set_priority: waiting jobs re-ranked, each by one event carrying the operation id; claims follow the new order', async (t) => {
  const early = await createJobs(h, 3, { queue: 'prio-all' })
  const late = await createJobs(h, 2, { queue: 'prio-all', priority: 30 })
  await listed(h, 'prio-all', 'pending', 5)
  const started = await bulk({ action: 'set_priority', filter: { ids: early }, priority: 120 })
  t.equal(started.status, 202)
  t.match(started.body, { matched: 3 })
  const op = await ended(started.body.operation_id)
  t.match(op, { status: 'succeeded', processed: 3, succeeded: 3, failed: 0 })
  for (const id of early) {
    t.equal((await getJob(id)).priority, 120)
    t.match(await eventsOf(id, op.id), [{ type: 'job_priority_changed', data: { operation_id: op.id, priority: 120, previous_priority: 0 } }])
  }
  for (const id of late) t.equal((await getJob(id)).priority, 30, 'jobs outside the filter keep theirs')
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-prio', queues: ['prio-all'], capacity: 5, wait_seconds: 5 })
  t.same(
    polled.body.jobs.map((j: { id: string }) => j.id),
    [...early, ...late],
    'claimed by due time − priority: the raised jobs first',
  )
})

t.test('a job whose state no longer allows the action when reached is skipped and counted, not an error', async (t) => {
  const ids = await deadLettered(h, 4, 'skip')
  await listed(h, 'skip', 'dead_letter', 4)
  // The read model still shows it dead-lettered; the log says it was retried meanwhile.
  await h.stopRole('projector')
  t.equal((await h.request('POST', `/jobsvc/v1/jobs/${ids[0]}/retry`)).status, 200)
  const started = await bulk({ action: 'retry', filter: { queues: ['skip'] } })
  t.match(started.body, { matched: 4 })
  const op = await ended(started.body.operation_id)
  t.match(op, { status: 'succeeded', processed: 4, succeeded: 3, failed: 1 })
  await h.startRole('projector')
  t.equal((await eventsOf(ids[0]!, op.id)).length, 0, 'the skipped job has no event of the operation')
  for (const id of ids.slice(1)) t.equal((await eventsOf(id, op.id)).length, 1)
})

t.test('stopped half-way by DELETE: cancelled, counts add up, the rest untouched', async (t) => {
  const ids = await deadLettered(h, 30, 'stop')
  await listed(h, 'stop', 'dead_letter', 30)
  const started = await bulk({ action: 'retry', filter: { queues: ['stop'] } })
  t.match(started.body, { matched: 30 })
  const opId = started.body.operation_id as string
  await eventually(async () => (await operation(opId)).processed >= 6)
  const stopped = await h.request('DELETE', `/jobsvc/v1/operations/${opId}`)
  t.equal(stopped.status, 200, JSON.stringify(stopped.body))
  t.equal(stopped.body.status, 'cancelled')
  const op = await eventually(async () => {
    const now = await operation(opId)
    return now.succeeded + now.failed === now.processed ? now : null
  })
  t.equal(op.status, 'cancelled')
  t.ok(op.processed < 30, `stopped at ${op.processed} of 30`)
  t.equal(op.failed, 0)
  await new Promise((r) => setTimeout(r, 500))
  t.equal((await operation(opId)).processed, op.processed, 'nothing more is processed')
  const states = await Promise.all(ids.map(async (id) => (await getJob(id)).state))
  t.equal(states.filter((s) => s !== 'dead_letter').length, op.succeeded, 'exactly the jobs counted were retried')
  t.equal(states.filter((s) => s === 'dead_letter').length, 30 - op.succeeded, 'the rest untouched')
})

t.test('an operation resumes after its role restarts: from its cursor, no job retried twice', async (t) => {
  const ids = await deadLettered(h, 30, 'resume')
  await listed(h, 'resume', 'dead_letter', 30)
  const started = await bulk({ action: 'retry', filter: { queues: ['resume'] } })
  const opId = started.body.operation_id as string
  await eventually(async () => (await operation(opId)).processed >= 6)
  await h.stopRole('dispatcher')
  const halfway = await operation(opId)
  t.equal(halfway.status, 'running', 'a stopped role leaves its operation running')
  t.ok(halfway.processed < 30, `stopped at ${halfway.processed}`)
  await new Promise((r) => setTimeout(r, 300))
  t.equal((await operation(opId)).processed, halfway.processed, 'nothing runs it meanwhile')
  await h.startRole('dispatcher')
  const op = await ended(opId)
  t.match(op, { status: 'succeeded', matched: 30, processed: 30, succeeded: 30, failed: 0 })
  for (const id of ids) t.equal((await eventsOf(id, opId)).length, 1, 'retried once')
})

t.test('the plan caps what one bulk action may match: 409 bulk_limit_exceeded, dry run included', async (t) => {
  await createJobs(h, cap + 1, { queue: 'cap' })
  await listed(h, 'cap', 'pending', cap + 1)
  isError(t, await bulk({ action: 'cancel', filter: { queues: ['cap'] }, dry_run: true }), 409, 'bulk_limit_exceeded')
  const refused = await bulk({ action: 'cancel', filter: { queues: ['cap'] } })
  isError(t, refused, 409, 'bulk_limit_exceeded')
  t.match(refused.body.error.message, new RegExp(`more than ${cap} jobs`))
  const narrowed = await bulk({ action: 'cancel', filter: { queues: ['cap'], created_until: new Date().toISOString() }, dry_run: true })
  t.equal(narrowed.status, 409, 'still all of them')
})

t.test('tenant isolation: a filter never touches another project’s jobs', async (t) => {
  const other = await h.newProject()
  const as: Caller = { request: (method, path, body, headers) => httpRequest(h.url, other.apiKey, method, path, body, headers) }
  const theirs = await deadLettered(as, 3, 'shared')
  const ours = await deadLettered(h, 2, 'shared')
  await listed(as, 'shared', 'dead_letter', 3)
  await listed(h, 'shared', 'dead_letter', 2)
  t.equal((await bulk({ action: 'retry', filter: { ids: theirs }, dry_run: true })).body.matched, 0, 'their ids match nothing here')
  const started = await bulk({ action: 'retry', filter: { queues: ['shared'] } })
  t.match(started.body, { matched: 2 })
  t.match(await ended(started.body.operation_id), { status: 'succeeded', succeeded: 2 })
  for (const id of ours) t.equal((await getJob(id)).state, 'pending')
  for (const id of theirs) t.equal((await getJob(id, as)).state, 'dead_letter', 'untouched')
  isError(t, await as.request('GET', `/jobsvc/v1/operations/${started.body.operation_id}`), 404, 'operation_not_found')
})
