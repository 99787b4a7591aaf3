/**
 * One cycle of the load: producers create jobs, workers poll and acknowledge them, and the
 * figures the report prints are taken on the way.
 *
 * - jobs/s end to end: jobs / (first create sent -> the last ack answered AND the read models
 *   holding it). "Projected" is judged by sequence: every write answers with X-Event-Seq, and the
 *   run ends when the projector is seen past the highest sequence any response carried.
 * - create latency: each POST /jobs, request sent to 201 received.
 * - created -> claimed: a job's 201 to the poll answer that returned it, keyed by job id.
 * - projection lag: see ProjectionTracker (projection-trackers.ts).
 */
import { randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { eventSeq, HttpError, isRetryable, maxRetries, withRetries, type Client, type Reply } from './http-client.ts'
import type { Options } from './options.ts'
import type { ProjectionTracker } from './projection-trackers.ts'

/** Workers hold each poll this long when nothing is claimable, so they notice the end quickly. */
const pollWaitSeconds = 1

/** How many jobs a cycle runs, by how many producers and workers, at what pace. */
export type Load = Pick<Options, 'jobs' | 'producers' | 'workers' | 'rate' | 'priorities' | 'pausedQueue' | 'flowKeys' | 'flowLimit'>

/** Creates sent to the paused queue (--paused-queue): one after every this many jobs of the run. */
const pausedQueueEvery = 10

/** A job priority from -600 to 600, uniformly. */
function randomPriority(): number {
  return Math.floor(Math.random() * 1201) - 600
}

export interface CycleResults {
  complete: boolean
  jobs: number
  elapsedMs: number | null
  createLatencies: number[]
  claimLatencies: number[]
  lags: readonly number[]
  lagMethod: string
  duplicateClaims: number
  acked: number
  polls: number
  emptyPolls: number
  /** This process's CPU time over the run, to tell whether the client was the bottleneck. */
  clientCpuMs: number
  wallMs: number
}

/** How one cycle creates and acknowledges: one request per job, or batches. */
export interface Cycle {
  /** Jobs per batch create, acks of each poll in one request; null: one request per create and per ack. */
  batch: number | null
  capacity: number
}

/** One item of a batch answer. */
interface BatchItemReply {
  status: number
  body?: { id: string }
  error?: { code: string }
}

/**
 * Producers create `jobs` jobs; workers poll, then ack every claimed job: each ack its own request
 * (in parallel), or with `cycle.batch` all of a poll's acks in one request.
 */
export async function drive(client: Client, load: Load, cycle: Cycle, tracker: ProjectionTracker, signal: AbortSignal): Promise<CycleResults> {
  const runId = randomBytes(4).toString('hex')
  // A queue of its own, so that against a shared project the workers claim only this run's jobs.
  const queue = `bench_${runId}`
  const pausedQueue = load.pausedQueue ? `bench_${runId}_paused` : null
  const jobBody = (i: number) => ({
    job_type: 'bench',
    queue,
    payload: { i },
    ...(load.priorities ? { priority: randomPriority() } : {}),
    ...(load.flowKeys === null ? {} : { concurrency_key: `key-${i % load.flowKeys}` }),
  })
  const createLatencies: number[] = []
  const claimLatencies: number[] = []
  const createdAt = new Map<string, number>()
  const claimedEarly = new Map<string, number>()
  const claimedIds = new Set<string>()
  let next = 0
  /** Jobs created, claimed and acknowledged so far, and what the polls brought. */
  const count = { created: 0, claimed: 0, acked: 0, duplicateClaims: 0, polls: 0, emptyPolls: 0 }
  let maxSeq = 0
  let firstCreateAt: number | null = null
  let lastAckAt = 0
  let projected: Promise<number> | null = null
  const finished = new AbortController()
  const halt = new AbortController()
  const stop = AbortSignal.any([signal, finished.signal, halt.signal])
  // A failed or interrupted run ends its requests in flight; a finished one lets polls return.
  const failed = AbortSignal.any([signal, halt.signal])
  const endRequests = () => client.close()
  failed.addEventListener('abort', endRequests, { once: true })

  const noteWrite = (reply: Reply) => {
    const seq = eventSeq(reply)
    if (seq === null)
      throw new Error(`${reply.headers['x-request-id'] ?? 'a response'} carries no X-Event-Seq; the service is too old for this bench`)
    if (seq > maxSeq) maxSeq = seq
    tracker.observe(seq, reply.at)
  }

  /** A created job's answer (the 201, or its batch's 200): its creation time, matched with an early claim. */
  const noteCreated = (id: string, at: number) => {
    count.created++
    const early = claimedEarly.get(id)
    // The poll can answer before the 201 reaches us; the job was then claimable at once.
    if (early !== undefined) {
      claimedEarly.delete(id)
      claimLatencies.push(Math.max(0, early - at))
    } else {
      createdAt.set(id, at)
    }
  }

  /** A create sent with the bench's retries; its latency counts from the last send, and the first send starts the rate's clock. */
  const timedCreate = async (what: string, path: string, body: unknown, expected: number) => {
    let sent = 0
    const reply = await withRetries(
      what,
      stop,
      () => {
        sent = performance.now()
        firstCreateAt ??= sent
        return client.request('POST', path, body)
      },
      expected,
    )
    createLatencies.push(reply.at - sent)
    return reply
  }

  /**
   * Creates `cycle.batch` jobs per request. Items refused for now (429, 503) are sent again in the
   * producer's next request, up to maxRetries times each; any other item failure ends the run.
   */
  const batchProducer = async () => {
    const again: Array<{ i: number; tries: number }> = []
    while ((next < load.jobs || again.length > 0) && !stop.aborted) {
      const items = again.splice(0, cycle.batch!)
      while (items.length < cycle.batch! && next < load.jobs) items.push({ i: next++, tries: 0 })
      const reply = await timedCreate('batch create', '/jobsvc/v1/jobs/batch', { jobs: items.map(({ i }) => jobBody(i)) }, 200)
      const results = reply.body.results as BatchItemReply[]
      results.forEach((result, k) => {
        if (result.status === 201) return noteCreated(String(result.body!.id), reply.at)
        const item = items[k]!
        if (!isRetryable(result.status) || item.tries >= maxRetries) throw new HttpError(`batch create item ${k}`, { ...reply, body: result })
        again.push({ i: item.i, tries: item.tries + 1 })
      })
      if (results.some((r) => r.status === 201)) noteWrite(reply)
      if (again.length > 0 && next >= load.jobs) await sleep(50, undefined, { signal: stop })
    }
  }

  const singleProducer = async () => {
    while (next < load.jobs && !stop.aborted) {
      const i = next++
      if (load.rate !== null && firstCreateAt !== null) {
        const due = firstCreateAt + (i * 1000) / load.rate - performance.now()
        if (due > 0) await sleep(due, undefined, { signal: stop })
      }
      const reply = await timedCreate('create', '/jobsvc/v1/jobs', jobBody(i), 201)
      noteWrite(reply)
      noteCreated(String(reply.body.id), reply.at)
      if (pausedQueue !== null && i % pausedQueueEvery === 0) {
        const held = { ...jobBody(i), queue: pausedQueue }
        noteWrite(await withRetries('create (paused queue)', stop, () => client.request('POST', '/jobsvc/v1/jobs', held), 201))
      }
    }
  }
  const producer = cycle.batch === null ? singleProducer : batchProducer

  const noteAcked = (jobs: number, at: number) => {
    lastAckAt = Math.max(lastAckAt, at)
    count.acked += jobs
    if (count.acked === load.jobs) {
      // Watched from this moment on, not after the workers' last polls have returned.
      projected = tracker.reachedAt(maxSeq, signal)
      projected.catch(() => undefined)
      finished.abort()
    }
  }

  const ack = async (jobId: string, workerId: string) => {
    const reply = await withRetries(
      'ack',
      stop,
      () => client.request('POST', '/jobsvc/v1/workers/ack', { job_id: jobId, worker_id: workerId, status: 'succeeded', duration_ms: 0 }),
      200,
    )
    noteWrite(reply)
    noteAcked(1, reply.at)
  }

  /** A poll's jobs acknowledged in one request; acks refused for now (503) are sent again. */
  const ackBatch = async (jobIds: string[], workerId: string) => {
    for (let tries = 0, pending = jobIds; pending.length > 0; tries++) {
      const acks = pending.map((id) => ({ job_id: id, worker_id: workerId, status: 'succeeded', duration_ms: 0 }))
      const reply = await withRetries('batch ack', stop, () => client.request('POST', '/jobsvc/v1/workers/ack/batch', { acks }), 200)
      const results = reply.body.results as BatchItemReply[]
      const failed = results.filter((r) => r.status !== 200)
      if (failed.some((r) => r.status !== 503) || (failed.length > 0 && tries >= maxRetries))
        throw new HttpError('batch ack', { ...reply, body: failed[0] })
      if (failed.length < results.length) noteWrite(reply)
      noteAcked(results.length - failed.length, reply.at)
      pending = pending.filter((_, k) => results[k]!.status !== 200)
    }
  }

  const worker = async (w: number) => {
    const workerId = `bench-${runId}-w${w}`
    const queues = pausedQueue === null ? [queue] : [queue, pausedQueue]
    const body = { worker_id: workerId, queues, capacity: cycle.capacity, wait_seconds: pollWaitSeconds }
    while (!stop.aborted) {
      const reply = await withRetries('poll', stop, () => client.request('POST', '/jobsvc/v1/workers/poll', body), 200)
      const jobs = reply.body.jobs as Array<{ id: string }>
      count.polls++
      if (jobs.length === 0) count.emptyPolls++
      const fresh: typeof jobs = []
      for (const job of jobs) {
        if (claimedIds.has(job.id)) {
          count.duplicateClaims++
          continue
        }
        claimedIds.add(job.id)
        fresh.push(job)
        count.claimed++
        const at = createdAt.get(job.id)
        if (at === undefined) claimedEarly.set(job.id, reply.at)
        else {
          createdAt.delete(job.id)
          claimLatencies.push(reply.at - at)
        }
      }
      if (cycle.batch === null) await Promise.all(fresh.map((job) => ack(job.id, workerId)))
      else if (fresh.length > 0)
        await ackBatch(
          fresh.map((job) => job.id),
          workerId,
        )
    }
  }

  const startedAt = performance.now()
  const cpuAtStart = process.cpuUsage()
  const measured = () => {
    const cpu = process.cpuUsage(cpuAtStart)
    return { clientCpuMs: (cpu.user + cpu.system) / 1000, wallMs: performance.now() - startedAt }
  }
  let lastAcked = 0
  const progress = setInterval(() => {
    const s = ((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)
    const projected = tracker.position()
    const where = projected === null ? '' : `  projected seq ${projected}/${maxSeq}`
    process.stderr.write(
      `[${s}s] created ${count.created}/${load.jobs}  claimed ${count.claimed}  acked ${count.acked}  (${count.acked - lastAcked} acked/s)${where}\n`,
    )
    lastAcked = count.acked
  }, 1000)
  /** What the run saw, complete or not. */
  const observed = () => ({
    jobs: load.jobs,
    createLatencies,
    claimLatencies,
    lags: tracker.lags(),
    lagMethod: tracker.method,
    duplicateClaims: count.duplicateClaims,
    acked: count.acked,
    polls: count.polls,
    emptyPolls: count.emptyPolls,
    ...measured(),
  })
  try {
    // The first failure halts the run; what fails after that is only the abort itself.
    const guard = (p: Promise<void>) =>
      p.catch((err) => {
        if (!stop.aborted) halt.abort(err)
      })
    if (pausedQueue !== null) {
      const path = `/jobsvc/v1/queues/${pausedQueue}/pause`
      await withRetries('pause', stop, () => client.request('POST', path, { reason: 'bench' }), 200)
    }
    if (load.flowKeys !== null) {
      const limits = { concurrency: { per_key: { limit: load.flowLimit, by: 'concurrency_key' }, strategy: 'queue' } }
      await withRetries('limits', stop, () => client.request('PUT', `/jobsvc/v1/queues/${queue}/limits`, limits), 200)
    }
    await Promise.all([
      ...Array.from({ length: load.producers }, () => guard(producer())),
      ...Array.from({ length: load.workers }, (_, w) => guard(worker(w))),
    ])
    if (halt.signal.aborted) throw halt.signal.reason
    if (!finished.signal.aborted) throw signal.reason ?? new Error('the run stopped early')
    const endAt = Math.max(lastAckAt, await projected!)
    return { ...observed(), complete: true, elapsedMs: endAt - firstCreateAt! }
  } catch (err) {
    process.stderr.write(`bench: run incomplete: ${err instanceof Error ? err.message : String(err)}\n`)
    return { ...observed(), complete: false, elapsedMs: null }
  } finally {
    failed.removeEventListener('abort', endRequests)
    clearInterval(progress)
  }
}
