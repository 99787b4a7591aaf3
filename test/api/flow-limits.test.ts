import t from 'tap'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

// Queue limits (issue 29, items 1–4): per-key concurrency, fair turns among keys, rate limits,
// the strategies and a worker's "rate limited" ack, against the real NATS and Postgres with two
// API processes: every slot is held on the log, so what the workers see running at once is what
// the limits say, whichever process claimed.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector', 'scheduler'], tunables: { scheduler_interval_ms: 100 } })
const second = await startApiProcess(t, h.runtime)
const urls = [h.url, second.url]
const on = (process: number, method: string, path: string, body?: unknown) => httpRequest(urls[process]!, h.apiKey, method, path, body)

async function ok(res: Promise<{ status: number; body: any }>, status = 200): Promise<any> {
  const r = await res
  if (r.status !== status) throw new Error(`answered ${r.status}: ${JSON.stringify(r.body).slice(0, 500)}`)
  return r.body
}

const setLimits = (queue: string, body: unknown) => ok(on(0, 'PUT', `/jobsvc/v1/queues/${queue}/limits`, body))

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

t.test('2 processes × 8 pollers: no key ever runs more than its limit, and every job runs once', async (t) => {
  const queue = 'fl-keys'
  await setLimits(queue, { concurrency: { per_key: { limit: 2, by: 'concurrency_key' } } })
  const keys = ['a', 'b', 'c', 'd', 'e']
  const ids = await createMany(
    queue,
    Array.from({ length: 200 }, (_, i) => ({ key: keys[i % keys.length]!, i })),
  )
  const keyOf = new Map(ids.map((id, i) => [id, keys[i % keys.length]!]))
  const running = new Map<string, number>()
  let most = 0
  const done = new Set<string>()
  const ranTwice: string[] = []
  let failedOnce = false
  const worker = async (process: number, name: string) => {
    while (done.size < ids.length) {
      const jobs = await poll(process, queue, name, 2)
      await Promise.all(
        jobs.map(async (job) => {
          const key = keyOf.get(job.id)!
          running.set(key, (running.get(key) ?? 0) + 1)
          most = Math.max(most, running.get(key)!)
          await new Promise((r) => setTimeout(r, 5))
          running.set(key, running.get(key)! - 1)
          // One failure on the way: a retried attempt frees its slot and takes one again.
          if (!failedOnce && job.attempt === 1) {
            failedOnce = true
            await ack(process, job.id, name, 'failed', { error: { type: 'E', message: 'once', stack_trace: '' } })
            return
          }
          if (done.has(job.id)) ranTwice.push(job.id)
          done.add(job.id)
          await ack(process, job.id, name)
        }),
      )
    }
  }
  // The failed job retries after its backoff; the test waits for it through the pollers.
  await Promise.all(Array.from({ length: 16 }, (_, i) => worker(i % 2, `w-${i}`)))
  t.equal(done.size, ids.length, 'every job ran')
  t.strictSame(ranTwice, [], 'none twice')
  t.ok(most <= 2, `at most 2 of a key ran at once (seen: ${most})`)
  t.equal(most, 2, 'and the limit was used')
})

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
