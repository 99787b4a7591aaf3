import t from 'tap'
import { startApiProcess } from '../support/api-process.ts'
import { gatesOf } from '../../domain/flow-gate.ts'
import { gateRefOf, takeGates } from '../../services/use-cases/jobs/flow-gates.ts'
import { gateHandler } from '../../streams/aggregates.ts'
import { eventually, httpRequest, startHarness, withClockShifted } from '../support/harness.ts'

// Queue limits (issue 29, items 1–4): per-key concurrency, fair turns among keys, rate limits,
// the strategies and a worker's "rate limited" ack, against the real NATS and Postgres with two
// API processes: every slot is held on the log, so what the workers see running at once is what
// the limits say, whichever process claimed.
const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler'],
  tunables: { scheduler_interval_ms: 100, reaper_interval_ms: 200, reaper_grace_ms: 300 },
})
const second = await startApiProcess(t, h.runtime)
const urls = [h.url, second.url]
const on = (process: number, method: string, path: string, body?: unknown) => httpRequest(urls[process]!, h.apiKey, method, path, body)

async function ok(res: Promise<{ status: number; body: any }>, status = 200): Promise<any> {
  const r = await res
  if (r.status !== status) throw new Error(`answered ${r.status}: ${JSON.stringify(r.body).slice(0, 500)}`)
  return r.body
}

/**
 * Sets a queue's limits through the first process and waits until the second applies them too:
 * each process reads a project's limits from its own copy of the project, which learns of a
 * change from the log a moment later (a claim in between is not limited; the issue stays open on it).
 */
const setLimits = async (queue: string, body: unknown) => {
  const set = await ok(on(0, 'PUT', `/jobsvc/v1/queues/${queue}/limits`, body))
  await eventually(async () => second.context.flow.limitsOf(h.projectId, queue) !== null || null, 10_000, 'the second process to apply the limits')
  return set
}

async function createMany(queue: string, items: Array<{ key: string | null; i: number }>): Promise<string[]> {
  const ids: string[] = []
  for (let at = 0; at < items.length; at += 1000) {
    const jobs = items
      .slice(at, at + 1000)
      .map(({ key, i }) => ({ job_type: 'fl', queue, payload: { i }, ...(key === null ? {} : { concurrency_key: key }) }))
    const body = await ok(on(0, 'POST', '/jobsvc/v1/jobs/batch', { jobs }))
    if (body.created !== jobs.length) throw new Error(`the batch created ${body.created} of ${jobs.length}`)
    ids.push(...(body.results as Array<{ body: { id: string } }>).map((r) => r.body.id))
  }
  return ids
}

const poll = async (process: number, queue: string, workerId: string, capacity: number, waitSeconds = 1) =>
  (await ok(on(process, 'POST', '/jobsvc/v1/workers/poll', { worker_id: workerId, queues: [queue], capacity, wait_seconds: waitSeconds })))
    .jobs as Array<{
    id: string
    attempt: number
    payload: { i: number }
  }>

const ack = (process: number, jobId: string, workerId: string, status = 'succeeded', extra: Record<string, unknown> = {}) =>
  ok(on(process, 'POST', '/jobsvc/v1/workers/ack', { job_id: jobId, worker_id: workerId, status, ...extra }))

t.test('limits are set, read and removed; bad limits are 400', async (t) => {
  const body = { concurrency: { per_key: { limit: 2, by: 'concurrency_key' } }, rate: { limit: 10, period_seconds: 60 } }
  const set = await setLimits('fl-crud', body)
  t.same(
    { concurrency: set.concurrency, rate: set.rate },
    {
      concurrency: { limit: null, per_key: { limit: 2, by: 'concurrency_key' }, strategy: 'queue' },
      rate: { limit: 10, period_seconds: 60, burst: 10, by: null },
    },
    'normalised: strategy queue, burst = limit',
  )
  t.same((await ok(on(1, 'GET', '/jobsvc/v1/queues/fl-crud/limits'))).rate, set.rate, 'read back through the other process')
  for (const bad of [
    {},
    { concurrency: {} },
    { concurrency: { per_key: { limit: 0, by: 'concurrency_key' } } },
    { rate: { limit: 1 } },
    { concurrency: { limit: 1, strategy: 'x' } },
    { concurrency: { per_key: { limit: 1, by: 'colour' } } },
  ]) {
    const res = await on(0, 'PUT', '/jobsvc/v1/queues/fl-crud/limits', bad)
    t.equal(res.status, 400, `${JSON.stringify(bad)} is 400`)
    t.equal(res.body.error?.code, 'invalid_request')
  }
  t.equal((await on(0, 'DELETE', '/jobsvc/v1/queues/fl-crud/limits')).status, 204, 'removed')
  t.same(await ok(on(0, 'GET', '/jobsvc/v1/queues/fl-crud/limits')), { queue: 'fl-crud', concurrency: null, rate: null, updated_at: null })
  const badAck = await on(0, 'POST', '/jobsvc/v1/workers/ack', { job_id: 'job_x', worker_id: 'w', status: 'rate_limited' })
  t.equal(badAck.status, 400, 'rate_limited without retry_after_ms is 400')
})

t.test(
  '2 processes × 8 pollers over 5,000 jobs: no key ever runs more than its limit, through failures, releases, cancels and a dead worker',
  async (t) => {
    const queue = 'fl-keys'
    const limit = 3
    await setLimits(queue, { concurrency: { per_key: { limit, by: 'concurrency_key' } } })
    // Failures retry at once, so the test need not wait out the spec's 15 s backoff.
    await ok(
      on(0, 'PUT', `/jobsvc/v1/queues/${queue}/retry-policy`, {
        base_delay_seconds: 1,
        factor: 1,
        max_delay_seconds: 1,
        jitter_seconds: 0,
        max_attempts: 5,
      }),
    )
    const keys = Array.from({ length: 10 }, (_, i) => `key-${i}`)
    const total = 5_000
    const ids: string[] = []
    for (let at = 0; at < total; at += 1000) {
      const jobs = Array.from({ length: 1000 }, (_, i) => ({
        job_type: 'fl',
        queue,
        payload: { i: at + i },
        concurrency_key: keys[(at + i) % keys.length]!,
        // A dead worker's attempt is reaped once its timeout passes without a heartbeat.
        timeout_seconds: 5,
      }))
      const body = await ok(on(0, 'POST', '/jobsvc/v1/jobs/batch', { jobs }))
      ids.push(...(body.results as Array<{ body: { id: string } }>).map((r) => r.body.id))
    }
    const keyOf = new Map(ids.map((id, i) => [id, keys[i % keys.length]!]))

    // What the workers themselves see running, per key: from a claim's answer until its work ends
    // (before its ack), as intervals on this process's clock, counted once the run is over.
    const runs: Array<{ id: string; attempt: number; key: string; from: number; to: number }> = []
    const startedAt = new Map<string, number>()
    const start = (id: string, attempt: number) => void startedAt.set(`${id}#${attempt}`, Date.now())
    const end = (id: string, attempt: number, at = Date.now()) => {
      runs.push({ id, attempt, key: keyOf.get(id)!, from: startedAt.get(`${id}#${attempt}`)!, to: at })
      startedAt.delete(`${id}#${attempt}`)
    }
    const succeeded = new Map<string, number>()
    const seen = { failed: 0, released: 0, cancelled: 0, dead: 0 }
    // The dead worker's attempt runs until the job leaves it on the log (the reaper's event), read
    // from the job's history at the end: a poll of the job would notice it late, after another
    // claim may have taken the slot the reaper freed, and count one too many.
    const abandoned = new Map<string, number>()
    // Attempts whose ack found them reaped: their slot was held until the reaper's event, not until the worker's end.
    const overran = new Map<string, number>()
    let claims = 0
    let dying = true
    // One failing worker stops them all, so the test ends with its failure instead of at its timeout.
    let stopped = false
    const unfinished = () => !stopped && succeeded.size + seen.cancelled < total

    const worker = async (process: number, name: string) => {
      while (unfinished()) {
        const jobs = await poll(process, queue, name, 4)
        await Promise.all(
          jobs.map(async (job) => {
            start(job.id, job.attempt)
            const n = ++claims
            if (dying && n === 100) {
              // This worker dies holding its job: no heartbeat, no ack.
              dying = false
              seen.dead++
              abandoned.set(job.id, job.attempt)
              return
            }
            await new Promise((r) => setTimeout(r, 2))
            end(job.id, job.attempt)
            if (n % 500 === 0) {
              seen.failed++
              await ack(process, job.id, name, 'failed', { error: { type: 'E', message: 'retry me', stack_trace: '' } })
            } else if (n % 400 === 0) {
              seen.released++
              await ok(on(process, 'POST', '/jobsvc/v1/workers/release', { job_id: job.id, worker_id: name }))
            } else if (n % 700 === 0) {
              await ok(on(1 - process, 'POST', `/jobsvc/v1/jobs/${job.id}/cancel`, { include_running: true }), 202)
              seen.cancelled++
              await ack(process, job.id, name, 'failed', { error: { type: 'Cancelled', message: 'stopped', stack_trace: '' } })
            } else {
              const res = await on(process, 'POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: name, status: 'succeeded' })
              if (res.status === 200) succeeded.set(job.id, (succeeded.get(job.id) ?? 0) + 1)
              // A loaded machine can hold a worker past its job's 5 s timeout: the reaper took
              // the attempt back (and freed its slot) before the ack came.
              else overran.set(job.id, job.attempt)
            }
          }),
        )
      }
    }
    const stopOnFailure = (running: Promise<void>) =>
      running.catch((err) => {
        stopped = true
        throw err
      })
    await Promise.all(Array.from({ length: 16 }, (_, i) => worker(i % 2, `w-${i}`)).map(stopOnFailure))
    /** When the job's log left `attempt`: the event after its last claim. */
    const leftAt = async (id: string, attempt: number) => {
      const history = await ok(on(0, 'GET', `/jobsvc/v1/jobs/${id}/history?limit=100`))
      const events = history.data as Array<{ type: string; time: string; data: { attempt?: number } }>
      // The last claim of that number: a claim handed back (a limit refusal, a release) reuses it.
      const claimed = events.map((e) => e.type === 'job_claimed' && e.data.attempt === attempt).lastIndexOf(true)
      const left = events[claimed + 1]
      return claimed >= 0 && left !== undefined ? Date.parse(left.time) : null
    }
    for (const [id, attempt] of abandoned) {
      const at = await leftAt(id, attempt)
      t.ok(at !== null, "the dead worker's attempt was left on the log")
      end(id, attempt, at!)
    }
    for (const [id, attempt] of overran) {
      const at = await leftAt(id, attempt)
      const run = runs.find((r) => r.id === id && r.attempt === attempt)
      if (at !== null && run !== undefined) run.to = Math.min(run.to, at)
    }
    if (overran.size > 0) t.comment(`${overran.size} attempts were reaped before their worker's ack (a loaded machine)`)
    // The most of one key running at once: ends before starts at the same instant.
    const peakOf = (key: string) => {
      const edges = runs.filter((r) => r.key === key).flatMap((r) => [[r.from, 1, r] as const, [r.to, -1, r] as const])
      edges.sort((a, b) => a[0] - b[0] || a[1] - b[1])
      const open = new Set<(typeof runs)[number]>()
      let peak: Array<(typeof runs)[number]> = []
      for (const [, step, run] of edges) {
        if (step === 1) open.add(run)
        else open.delete(run)
        if (open.size > peak.length) peak = [...open]
      }
      return peak
    }
    const peaks = keys.map(peakOf)
    const most = Math.max(...peaks.map((p) => p.length))
    // Were it exceeded, which attempts overlapped, to read their histories.
    if (most > limit) t.comment(JSON.stringify(peaks.find((p) => p.length === most)))
    t.equal(succeeded.size + seen.cancelled, total, 'every job succeeded or was cancelled')
    t.strictSame(
      [...succeeded].filter(([, n]) => n > 1),
      [],
      'none succeeded twice',
    )
    t.ok(
      seen.failed > 0 && seen.released > 0 && seen.cancelled > 0 && seen.dead === 1,
      `failures, releases, cancels and a dead worker (${JSON.stringify(seen)})`,
    )
    t.ok(most <= limit, `at most ${limit} of a key ran at once, as the workers saw it (seen: ${most})`)
    t.equal(most, limit, 'and the limit was used')
    const state = await eventually(async () => {
      const s = await ok(on(0, 'GET', `/jobsvc/v1/queues/${queue}/limits/state`))
      return s.running === 0 ? s : null
    })
    t.equal(state.running, 0, 'every slot freed at the end')
  },
)

t.test("one key's 10,000 waiting jobs at limit 1 never hold back ten other keys", async (t) => {
  const queue = 'fl-fair'
  await setLimits(queue, { concurrency: { per_key: { limit: 1, by: 'concurrency_key' } } })
  await createMany(
    queue,
    Array.from({ length: 10_000 }, (_, i) => ({ key: 'big', i })),
  )
  const small = await createMany(
    queue,
    Array.from({ length: 100 }, (_, i) => ({ key: `small-${i % 10}`, i })),
  )
  const waiting = new Set(small)
  let bigDone = 0
  let bigRunning = 0
  let bigMost = 0
  const worker = async (process: number, name: string) => {
    while (waiting.size > 0) {
      for (const job of await poll(process, queue, name, 5)) {
        const big = !small.includes(job.id)
        if (big) bigMost = Math.max(bigMost, ++bigRunning)
        await new Promise((r) => setTimeout(r, 2))
        // The job's work ends before its ack: the ack's append frees the slot.
        if (big) {
          bigRunning--
          bigDone++
        } else waiting.delete(job.id)
        await ack(process, job.id, name)
      }
    }
  }
  await Promise.all([worker(0, 'f-1'), worker(1, 'f-2'), worker(0, 'f-3'), worker(1, 'f-4')])
  t.equal(waiting.size, 0, "the ten keys' 100 jobs all ran")
  t.ok(bigMost <= 1, 'the big key never ran two at once')
  t.comment(`the big key finished ${bigDone} of its jobs meanwhile`)
  const state = await ok(on(0, 'GET', `/jobsvc/v1/queues/${queue}/limits/state`))
  t.ok(state.waiting >= 10_000 - bigDone - 5, `the state counts the big key's waiting jobs (${state.waiting})`)
  t.equal(state.keys[0]?.key, 'big', 'the key with the most waiting comes first')
})

t.test('a rate limit counts starts; the excess waits', async (t) => {
  const queue = 'fl-rate'
  await setLimits(queue, { rate: { limit: 2, period_seconds: 3600 } })
  await createMany(
    queue,
    Array.from({ length: 5 }, (_, i) => ({ key: null, i })),
  )
  const first = await poll(0, queue, 'r-1', 5)
  t.equal(first.length, 2, 'two starts in the bucket')
  t.equal((await poll(1, queue, 'r-2', 5, 0)).length, 0, 'the other process starts none either')
  // The state is read from the gates' read model: it shows the second start once the projector has it.
  const state = await eventually(async () => {
    const s = await ok(on(0, 'GET', `/jobsvc/v1/queues/${queue}/limits/state`))
    return s.tokens !== null && s.tokens < 1 ? s : null
  })
  t.ok(state.tokens < 1, `no token left (${state.tokens})`)
})

t.test('cancel_newest cancels a job whose key is full; cancel_in_progress asks the running one to stop', async (t) => {
  await setLimits('fl-newest', { concurrency: { per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'cancel_newest' } })
  const [a, b] = await createMany('fl-newest', [
    { key: 'k', i: 1 },
    { key: 'k', i: 2 },
  ])
  const got = await poll(0, 'fl-newest', 'n-1', 2)
  t.same(
    got.map((j) => j.id),
    [a],
    'the first runs',
  )
  // The newer one is cancelled when a claim tries it while its key is full.
  t.equal((await poll(1, 'fl-newest', 'n-2', 2)).length, 0, 'nothing else runs')
  const cancelled = await eventually(async () => {
    const job = await ok(on(0, 'GET', `/jobsvc/v1/jobs/${b}`))
    return job.state === 'cancelled' ? job : null
  })
  t.equal(cancelled.cancel_reason, 'concurrency_limit', 'the newer one is cancelled for its full key')

  await setLimits('fl-progress', { concurrency: { per_key: { limit: 1, by: 'concurrency_key' }, strategy: 'cancel_in_progress' } })
  const [old] = await createMany('fl-progress', [{ key: 'k', i: 1 }])
  t.equal((await poll(0, 'fl-progress', 'p-1', 1))[0]?.id, old, 'the old one runs')
  const [fresh] = await createMany('fl-progress', [{ key: 'k', i: 2 }])
  t.equal((await poll(1, 'fl-progress', 'p-2', 1)).length, 0, 'the new one waits for the slot')
  const beat = await eventually(async () => {
    const res = await ok(on(0, 'POST', '/jobsvc/v1/workers/heartbeat', { job_id: old, worker_id: 'p-1' }))
    return res.status === 'cancel' ? res : null
  })
  t.equal(beat.status, 'cancel', 'the running one is asked to stop')
  await ack(0, old!, 'p-1', 'failed', { error: { type: 'Cancelled', message: 'stopped', stack_trace: '' } })
  const next = await eventually(async () => {
    const jobs = await poll(1, 'fl-progress', 'p-2', 1)
    return jobs.length > 0 ? jobs : null
  }).catch(async (err) => {
    t.comment(JSON.stringify(await ok(on(0, 'GET', `/jobsvc/v1/jobs/${old}`))))
    t.comment(JSON.stringify(await ok(on(0, 'GET', `/jobsvc/v1/jobs/${fresh}`))))
    t.comment(JSON.stringify(await ok(on(0, 'GET', `/jobsvc/v1/queues/fl-progress/limits/state`))))
    throw err
  })
  t.equal(next[0]!.id, fresh, 'the new one runs once the old one stopped')
})

t.test('a worker\'s "rate limited" ack spends no attempt and holds its key back', async (t) => {
  const queue = 'fl-held'
  await setLimits(queue, { concurrency: { per_key: { limit: 5, by: 'concurrency_key' } } })
  const [first, sibling, other] = await createMany(queue, [
    { key: 'api', i: 1 },
    { key: 'api', i: 2 },
    { key: 'other', i: 3 },
  ])
  const claimed = await poll(0, queue, 'h-1', 1)
  t.equal(claimed[0]?.id, first)
  t.equal(claimed[0]?.attempt, 1)
  const answer = await ack(0, first!, 'h-1', 'rate_limited', { retry_after_ms: 1500 })
  t.equal(answer.action, 'retry', 'answered as a retry')
  const job = await ok(on(0, 'GET', `/jobsvc/v1/jobs/${first}`))
  t.equal(job.state, 'pending', 'pending again')
  t.equal(job.attempt, 0, 'no attempt spent')
  const meanwhile = await poll(1, queue, 'h-2', 3, 0)
  t.same(
    meanwhile.map((j) => j.id),
    [other],
    "the held key's jobs wait; another key's run",
  )
  const later = await eventually(async () => {
    const jobs = await poll(1, queue, 'h-2', 3)
    return jobs.length > 0 ? jobs : null
  }, 10_000)
  t.ok(
    later.some((j) => j.id === first || j.id === sibling),
    'the key runs again after the hold',
  )
  const again = later.find((j) => j.id === first)
  if (again !== undefined) t.equal(again.attempt, 1, 'with the same attempt number')
})

t.test('the limits state counts running attempts only: an ended one whose slot no take has needed yet is not running', async (t) => {
  const queue = 'fl-live'
  await setLimits(queue, { concurrency: { per_key: { limit: 2, by: 'concurrency_key' } } })
  const [a, b] = await createMany(queue, [
    { key: 'k', i: 1 },
    { key: 'k', i: 2 },
  ])
  // A poll answers with what it has: both may come in one poll or in two.
  const got: string[] = []
  await eventually(async () => {
    got.push(...(await poll(0, queue, 'l-1', 2 - got.length)).map((j) => j.id))
    return got.length === 2
  })
  t.same(got.sort(), [a, b].sort(), 'both run')
  await ack(0, a!, 'l-1')
  const state = await eventually(async () => {
    const s = await ok(on(1, 'GET', `/jobsvc/v1/queues/${queue}/limits/state`))
    return s.keys.find((k: { key: string }) => k.key === 'k')?.running === 1 ? s : null
  })
  t.equal(state.running, 1, 'the queue counts one running')
  t.equal(state.keys_at_limit, 0, 'the key is not at its limit')
  const [row] = await h.runtime.sql<{ running: number }[]>`SELECT running FROM flow_gates WHERE queue = ${queue} AND key = 'k'`
  t.equal(row?.running, 2, "while the gate still lists a's ended attempt (no take needed its slot)")
})

t.test('a slot a crash left held by an attempt that never ran is freed by the reaper', async (t) => {
  const queue = 'fl-crash'
  const limits = { concurrency: { limit: null, per_key: { limit: 1, by: 'concurrency_key' as const }, strategy: 'queue' as const }, rate: null }
  await setLimits(queue, { concurrency: { per_key: { limit: 1, by: 'concurrency_key' } } })
  const [first] = await createMany(queue, [
    { key: 'k', i: 1 },
    { key: 'k', i: 2 },
  ])
  // A claim that took its gate and died before the job's append, 30 s ago.
  const job = (await ok(on(0, 'GET', `/jobsvc/v1/jobs/${first}`))) as { queue: string; job_type: string; tags: null; concurrency_key: string }
  await withClockShifted(h.runtime, -30_000, () =>
    takeGates(h.runtime, h.projectId, { job_id: first!, attempt: 1, hold: 'crashed' }, gatesOf(limits, job)),
  )
  const gate = gateRefOf(h.projectId, gatesOf(limits, job)[0]!)
  const freed = await eventually(
    async () => {
      const history = await gateHandler.history(h.runtime.store, gate)
      return history.flatMap((m) => m.message.events).find((e) => e.type === 'gate_slot_freed' && e.data.job_id === first) ?? null
    },
    15_000,
    'the reaper frees the slot',
  )
  t.equal(freed.type === 'gate_slot_freed' && freed.data.reason, 'reconciled', 'freed by the reconciliation, on the log')
  const claimed = await eventually(
    async () => {
      const jobs = await poll(1, queue, 'c-1', 2)
      return jobs.length > 0 ? jobs : null
    },
    15_000,
    'a job of the key claimed once the slot is freed',
  )
  t.equal(claimed.length, 1, 'one of the key runs, as its limit says')
})
