import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { KV } from '@nats-io/kv'
import { fingerprintOf, IdempotencyStore } from '../../services/roles/api/idempotency-store.ts'
import { startApiProcess } from '../support/api-process.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { isError } from '../support/jobs-api.ts'

// Issue 23, item 7: a duplicate of a request still running (same Idempotency-Key, same body)
// waited by reading the key from the bucket every 20 ms. It now waits on the running request's
// promise in its own process, or on a KV watch of the key in another, and looks again once, when
// the entry changes. A duplicate of a long poll is refused at once rather than held as long.
// The bucket's reads and watches are counted where the API processes call them.

const h = await startHarness(t, import.meta.filename, { roles: ['projector'] })
const bucket: KV = h.runtime.idempotency
const reads = new Map<string, number>()
const watches = new Map<string, number>()
const realGet = bucket.get.bind(bucket)
const realWatch = bucket.watch.bind(bucket)
bucket.get = (key, options) => {
  reads.set(key, (reads.get(key) ?? 0) + 1)
  return realGet(key, options)
}
bucket.watch = (options) => {
  const key = String(options?.key)
  watches.set(key, (watches.get(key) ?? 0) + 1)
  return realWatch(options)
}

// Two API processes on one install: each has its own store, so one's reservation is the other's
// "another process".
const first = await startApiProcess(t, h.runtime)
const second = await startApiProcess(t, h.runtime)
const body = (n: string) => ({ job_type: 'idem.wait', payload: { n } })
const createWithKey = (url: string, key: string, b: unknown) => httpRequest(url, h.apiKey, 'POST', '/jobsvc/v1/jobs', b, { 'idempotency-key': key })
const stored = (b: unknown) => ({ status: 201, body: JSON.stringify({ stored: b }), headers: { location: '/jobsvc/v1/jobs/job_stored' } })

/** Reserves `key` in `store` as a request with `b` would: the test plays the request that runs first. */
async function holdKey(store: IdempotencyStore, key: string, b: unknown) {
  const fingerprint = fingerprintOf('POST', '/jobsvc/v1/jobs', b)
  const reservation = await store.reserve(IdempotencyStore.keyOf(h.projectId, key), fingerprint)
  if (reservation.outcome !== 'reserved') throw new Error(`not reserved: ${reservation.outcome}`)
  return { reservation, fingerprint, kvKey: reservation.key }
}

t.test('a duplicate in another process waits on a watch of the key, and replays once the first completes', async (t) => {
  const b = body('other-process')
  const held = await holdKey(first.context.idempotency, 'dup-other', b)
  const readsBefore = reads.get(held.kvKey) ?? 0
  const duplicate = createWithKey(second.url, 'dup-other', b)
  // Its reads: the one that found the key taken, and one once its watch had started.
  await eventually(async () => watches.get(held.kvKey) === 1 && reads.get(held.kvKey) === readsBefore + 2, 15_000, 'the duplicate watching the key')
  // Long enough for a reader on a 20 ms timer to have read the key again many times.
  await sleep(300)
  t.equal(reads.get(held.kvKey), readsBefore + 2, 'no read of the bucket while it waits')
  await first.context.idempotency.complete(held.reservation, held.fingerprint, stored(b))
  const answer = await duplicate
  t.equal(answer.status, 201)
  t.equal(answer.headers.get('idempotent-replay'), 'true', 'the stored answer, replayed')
  t.same(answer.body, { stored: b })
  t.equal(reads.get(held.kvKey), readsBefore + 3, 'one more read, after the entry changed')
  t.equal(watches.get(held.kvKey), 1, 'one watch')
})

t.test('a duplicate in the same process waits on the running request, without a watch', async (t) => {
  const b = body('same-process')
  const held = await holdKey(first.context.idempotency, 'dup-same', b)
  const readsBefore = reads.get(held.kvKey) ?? 0
  const duplicate = createWithKey(first.url, 'dup-same', b)
  await eventually(async () => reads.get(held.kvKey) === readsBefore + 1, 15_000, 'the duplicate finding the key taken')
  await sleep(300)
  t.equal(reads.get(held.kvKey), readsBefore + 1, 'no read of the bucket while it waits')
  t.equal(watches.get(held.kvKey) ?? 0, 0, 'no watch either: the request runs here')
  await first.context.idempotency.complete(held.reservation, held.fingerprint, stored(b))
  const answer = await duplicate
  t.equal(answer.status, 201)
  t.equal(answer.headers.get('idempotent-replay'), 'true')
  t.same(answer.body, { stored: b })
  t.equal(reads.get(held.kvKey), readsBefore + 2, 'one more read, after the first completed')
})

t.test('a duplicate whose first request fails runs itself', async (t) => {
  const b = body('released')
  const held = await holdKey(first.context.idempotency, 'dup-released', b)
  const duplicate = createWithKey(second.url, 'dup-released', b)
  await eventually(async () => watches.get(held.kvKey) === 1, 15_000, 'the duplicate watching the key')
  await first.context.idempotency.release(held.reservation)
  const answer = await duplicate
  t.equal(answer.status, 201, 'it ran')
  t.equal(answer.headers.get('idempotent-replay'), null, 'not a replay')
  t.equal(answer.body.job_type, 'idem.wait')
})

t.test('a duplicate of a long poll still waiting is refused at once', async (t) => {
  const poll = { worker_id: 'w-idem', queues: ['idem-poll'], wait_seconds: 10 }
  const headers = { 'idempotency-key': 'poll-dup' }
  let firstAnswered = false
  const firstPoll = httpRequest(first.url, h.apiKey, 'POST', '/jobsvc/v1/workers/poll', poll, headers).finally(() => (firstAnswered = true))
  const kvKey = IdempotencyStore.keyOf(h.projectId, 'poll-dup')
  await eventually(async () => (await realGet(kvKey))?.json<{ state: string }>().state === 'pending', 15_000, 'the first poll running')
  for (const url of [first.url, second.url]) {
    const duplicate = await httpRequest(url, h.apiKey, 'POST', '/jobsvc/v1/workers/poll', poll, headers)
    isError(t, duplicate, 409, 'idempotency_key_reuse', 'the duplicate is refused')
    t.match(duplicate.body.error.message, /still waiting/)
    t.notOk(firstAnswered, 'while the first poll still waits')
  }
  const job = await httpRequest(first.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'idem.poll', queue: 'idem-poll', payload: {} })
  t.equal(job.status, 201)
  const claimed = await firstPoll
  t.equal(claimed.status, 200)
  t.same(
    claimed.body.jobs.map((j: { id: string }) => j.id),
    [job.body.id],
    'the first poll goes on and claims the job',
  )
  const replay = await httpRequest(second.url, h.apiKey, 'POST', '/jobsvc/v1/workers/poll', poll, headers)
  t.equal(replay.headers.get('idempotent-replay'), 'true', 'once it has answered, its answer is replayed')
  t.same(replay.body, claimed.body)
})
