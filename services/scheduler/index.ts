import { isAttemptStale, type Job, type JobEvent } from '../../domain/job.ts'
import { consumeBatches } from '../../streams/consume.ts'
import { eventHeaders } from '../../streams/event-store.ts'
import { holdLeadership } from '../leadership.ts'
import { aggregateKindFilter, cascadeConsumerName, eventsStreamName } from '../../streams/names.ts'
import { JobService } from '../jobs/job-service.ts'
import type { Deps } from '../runtime.ts'

/** Rows handled per promotion or reaping pass; the next pass takes the rest. */
const passLimit = 500
const passConcurrency = 16

/**
 * The scheduler role: moves due scheduled jobs to pending, wakes pollers when a retry's backoff
 * ends, reaps attempts whose heartbeat went stale, and finishes continuation cascades that a
 * crash interrupted. Every move is a command on the job aggregate, so several schedulers may run:
 * the expected-sequence append lets exactly one of them win each move.
 */
export async function start(deps: Deps): Promise<() => Promise<void>> {
  const controller = new AbortController()
  const { signal } = controller
  const jobs = new JobService(deps)
  const t = deps.config.tunables
  let lastDueScan = deps.now()

  const loops = [
    every(t.scheduler_interval_ms, signal, async () => {
      await promoteDueJobs(deps, jobs)
      lastDueScan = await wakeForDueRetries(deps, jobs, lastDueScan)
    }, (err) => deps.log.error({ err }, 'scheduler: promotion pass failed')),
    every(t.reaper_interval_ms, signal, async () => void (await reapStaleAttempts(deps, jobs)), (err) =>
      deps.log.error({ err }, 'scheduler: reaper pass failed'),
    ),
    runCascadeReactor(deps, jobs, signal),
  ]
  return async () => {
    controller.abort()
    await Promise.all(loops)
  }
}

async function every(ms: number, signal: AbortSignal, pass: () => Promise<void>, onError: (err: unknown) => void): Promise<void> {
  while (!signal.aborted) {
    try {
      await pass()
    } catch (err) {
      if (!signal.aborted) onError(err)
    }
    // The abort listener is removed when the timer fires: one left behind per pass would pile up
    // on the role's signal (a leak, and MaxListenersExceededWarning after 10 passes).
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer)
        signal.removeEventListener('abort', done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      signal.addEventListener('abort', done, { once: true })
    })
  }
}

async function inParallel<T>(items: T[], run: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items]
  const worker = async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await run(item)
  }
  await Promise.all(Array.from({ length: Math.min(passConcurrency, queue.length) }, worker))
}

/**
 * Scheduled jobs whose run_at has come become pending. Their rows are written here rather than
 * left to the projector so that pollers woken next find them claimable at once.
 */
export async function promoteDueJobs(deps: Deps, jobs: JobService): Promise<number> {
  const due = await deps.sql<{ project_id: string; id: string }[]>`
    SELECT project_id, id FROM jobs
    WHERE state = 'scheduled' AND NOT waiting_for_parent AND available_at <= ${deps.now()}
    ORDER BY available_at LIMIT ${passLimit}`
  let promoted = 0
  await inParallel(due, async (row) => {
    const result = await jobs.promote(row.project_id, row.id)
    await jobs.writeRows([result.record])
    if (result.appended && result.state !== null) {
      promoted++
      jobs.notifyReady(row.project_id, result.state.queue)
    }
  })
  return promoted
}

/**
 * A failed attempt leaves the job pending with a future run_at and no event marks the moment it
 * becomes claimable, so this pass wakes the pollers of each project and queue whose backoff
 * ended since the previous pass. Resolves to the instant this pass covered up to.
 */
async function wakeForDueRetries(deps: Deps, jobs: JobService, since: Date): Promise<Date> {
  const until = deps.now()
  const rows = await deps.sql<{ project_id: string; queue: string }[]>`
    SELECT DISTINCT project_id, queue FROM jobs
    WHERE state = 'pending' AND available_at > ${since} AND available_at <= ${until}`
  for (const r of rows) jobs.notifyReady(r.project_id, r.queue)
  return until
}

/**
 * Processing attempts past the shortest window they could have (see isAttemptStale) are checked
 * against their last heartbeat in KV; stale ones are retried or dead-lettered through the
 * aggregate. The reap names the attempt, so an ack that landed first turns it into a no-op.
 */
export async function reapStaleAttempts(deps: Deps, jobs: JobService): Promise<number> {
  const graceMs = deps.config.tunables.reaper_grace_ms
  const now = deps.now()
  const candidates = await deps.sql<{ project_id: string; id: string; attempt: number; started_at: Date; timeout_seconds: number }[]>`
    SELECT project_id, id, attempt, started_at, timeout_seconds FROM jobs
    WHERE state = 'processing'
      AND started_at + make_interval(secs => (least(timeout_seconds, 2 * greatest(timeout_seconds / 3.0, 10)) + ${graceMs}::double precision / 1000)::double precision) < ${now}
    ORDER BY started_at LIMIT ${passLimit}`
  let reaped = 0
  await inParallel(candidates, async (c) => {
    const beat = await jobs.lastHeartbeat(c.id, c.attempt)
    const view = { state: 'processing' as const, started_at: c.started_at.toISOString(), timeout_seconds: c.timeout_seconds }
    if (!isAttemptStale(view, beat?.at ?? null, now.toISOString(), graceMs)) return
    const silentFor = Math.round((now.getTime() - Date.parse(beat?.at ?? view.started_at)) / 1000)
    const result = await jobs.reap(c.project_id, c.id, c.attempt, {
      type: 'HeartbeatTimeout',
      message: `no heartbeat for ${silentFor} s on attempt ${c.attempt}; the worker is presumed lost`,
      stack_trace: '',
    })
    await jobs.writeRows([result.record])
    if (result.appended) {
      reaped++
      deps.log.warn({ job_id: c.id, attempt: c.attempt, state: result.state?.state }, 'scheduler: reaped a stale attempt')
    }
  })
  return reaped
}

/**
 * Repeats every parent's continuation cascade from the log. The API already ran it in the
 * request; this is what heals a crash between the parent's append and its children's.
 */
function runCascadeReactor(deps: Deps, jobs: JobService, signal: AbortSignal): Promise<void> {
  const ns = deps.config.namespace
  // One reactor leads at a time across scheduler processes, so the consumer can ack whole
  // batches in order; standbys take over when the leader's connection goes.
  return holdLeadership(deps.sql, 'jobsvc.cascade:' + ns, signal, () => consumeBatches(
    deps.nats,
    {
      stream: eventsStreamName(ns),
      durable: cascadeConsumerName(ns),
      filterSubject: aggregateKindFilter(ns, 'job'),
      maxBatch: 500,
      ack: 'all',
      select: (headers) => (headers?.get(eventHeaders.eventTypes) ?? '').split(',').some((type) => cascadingEvents.has(type)),
    },
    async (records) => {
      for (const r of records) {
        const state = r.message.state as Job | null
        if (state === null || state.children.length === 0) continue
        await jobs.cascade(r.message.project_id, r.message.events as JobEvent[], state)
      }
    },
    signal,
    (err) => deps.log.error({ err }, 'scheduler: cascade reactor failed; retrying'),
  ), (err) => deps.log.error({ err }, 'scheduler: cascade reactor lost its lock'))
}

/** Events after which a parent's continuations move (see cascadeOf). */
const cascadingEvents = new Set<string>(['job_succeeded', 'job_dead_lettered', 'job_cancelled'])
