import { hostname } from 'node:os'
import { backoffDelay, sleep } from './backoff.js'
import type { JobsvcClient } from './client.js'
import { JobsvcError } from './errors.js'
import type { AckRequest, PolledJob, RecurringScheduleRegistration } from './types.js'
import { SDK_VERSION } from './version.js'

export interface JobContext {
  readonly workerId: string
  /**
   * Fires when the job's `timeout_seconds` pass, when the service stops the attempt (the job was
   * reaped, or cancelled while running: {@link JobCancelled}, within about a second of the cancel),
   * or when the worker stops and its grace period ends ({@link WorkerStopped}). Pass it to fetch
   * and the like; after it fires the attempt is over, whatever the handler does.
   */
  readonly signal: AbortSignal
  /**
   * The W3C `traceparent` the job was created with, or null: start the handler's span as its
   * child (with OpenTelemetry, `propagation.extract(context.active(), { traceparent })`) to continue
   * the creator's trace.
   */
  readonly traceparent: string | null
  /**
   * For a job created with `depends_on` (an extension): the result of each parent that succeeded,
   * by parent id (null for a parent whose handler returned nothing). A parent that ended otherwise
   * (the job runs under `on_parent_failure: "run"`) is not in it; `client.jobs.dependencies()`
   * says how it ended. Empty for any other job. The same as `job.parent_results`, which the poll
   * answer carries only for such jobs.
   */
  readonly parentResults: Readonly<Record<string, unknown>>
  /** Reports progress (0.0 to 1.0) with a heartbeat now; the progress stream shows it. */
  progress(value: number): Promise<void>
}

/**
 * Runs one job; a return is `succeeded`, with the returned value (as JSON) the job's `result`,
 * a throw `failed` with the error's type, message and stack, and a throw of {@link RateLimited}
 * `rate_limited`: the job waits `retryAfterMs` and runs again, its attempt not spent.
 */
export type Handler = (job: PolledJob, ctx: JobContext) => unknown

export interface Logger {
  info(message: string, fields?: object): void
  warn(message: string, fields?: object): void
  error(message: string, fields?: object): void
}

export interface WorkerOptions {
  client: JobsvcClient
  queues: string[]
  /** One handler per job type. */
  handlers: Record<string, Handler>
  /** The job types to claim; by default those of `handlers`. */
  jobTypes?: string[]
  /** Jobs run at once. Each poll asks for as many as there are free slots (at most 50). Default 1. */
  concurrency?: number
  /** Default `wrk_<host>_<pid>_<random>`. */
  workerId?: string
  /** Upserted when the worker registers (spec, POST /workers/register). */
  recurringSchedules?: RecurringScheduleRegistration[]
  /**
   * How long stop() lets running handlers finish before it hands the rest back to the service
   * (`POST /workers/release`: pending again, their attempts not spent). Default 30 s.
   */
  shutdownGraceMs?: number
  /** How long one poll may wait for work (0 to 30 s). Default 30. */
  pollWaitSeconds?: number
  /** Back-off after a failed poll or ack: up to `baseMs * 2^n`, at most `maxMs`. Default 500 ms and 30 s. */
  backoff?: { baseMs?: number; maxMs?: number }
  /**
   * The shortest heartbeat interval. The spec asks for max(timeout_seconds / 3, 10 s); lower it
   * only to test against a service whose reaper was tuned to match.
   */
  minHeartbeatIntervalMs?: number
  logger?: Logger
}

/** The error an attempt is acked with when its handler is still running at the end of stop()'s grace. */
export class WorkerStopped extends Error {
  override name = 'WorkerStopped'
}

/**
 * The reason `ctx.signal` carries when the job was cancelled while it ran (a cancel with
 * `includeRunning`); the attempt is acked failed at once and the job ends `cancelled`.
 */
export class JobCancelled extends Error {
  override name = 'JobCancelled'
}

/** The longest `retry_after_ms` the service takes: a day. */
const maxRetryAfterMs = 86_400_000

/**
 * What a handler throws when what the job calls is rate limiting it (an HTTP 429, a quota). The
 * attempt is acked `rate_limited`: the service puts the job back, due `retryAfterMs` from now,
 * without spending an attempt, and holds back the job's concurrency key (or, without a per-key
 * limit, its queue) until then, so the other jobs of that key wait too instead of failing.
 * `retryAfterMs` is rounded up to whole milliseconds, at least 1 and at most a day.
 */
export class RateLimited extends Error {
  override name = 'RateLimited'
  readonly retryAfterMs: number

  constructor(retryAfterMs: number, message?: string) {
    if (!Number.isFinite(retryAfterMs) || retryAfterMs < 0) throw new TypeError(`retryAfterMs must be a number of milliseconds, not ${retryAfterMs}`)
    const ms = Math.min(maxRetryAfterMs, Math.max(1, Math.ceil(retryAfterMs)))
    super(message ?? `rate limited; retry after ${ms} ms`)
    this.retryAfterMs = ms
  }
}

/** The reason `ctx.signal` carries when the job's timeout passes. */
export class JobTimeout extends Error {
  override name = 'JobTimeout'
}

interface Running {
  job: PolledJob
  controller: AbortController
  startedAt: number
  settled: boolean
  progress: number | null
  beating: Promise<void>
  heartbeat: NodeJS.Timeout
  timeout: NodeJS.Timeout
}

/** Codes of an ack or heartbeat that came too late: the service no longer gives this worker the attempt. */
const lostAttemptCodes = new Set(['invalid_state', 'worker_mismatch', 'job_not_found'])
const maxAcksPerBatch = 1_000
const maxPollCapacity = 50
/**
 * A job is watched for a cancel (the signal poll) once it has run this long: shorter jobs cost no
 * request, and a cancel still reaches a handler well within a second.
 */
const signalWatchDelayMs = 200
/** How long one signal poll waits for a cancel; it is sent again at once while jobs run. */
const signalWaitSeconds = 25
/** Job ids one signal poll may name (the route's bound). */
const maxSignalJobs = 100
/**
 * How long acks the service cannot take are sent again before they are given up (and their
 * attempts left to its reaper): long enough to ride out a restart or an upgrade.
 */
const ackRetryMs = 5 * 60_000

/**
 * Polls the service for jobs of its queues and runs them: one handler call per claimed job, at
 * most `concurrency` at once, each kept alive by heartbeats and acknowledged when it ends.
 * Nothing a handler or the service does makes it throw once started; problems are logged.
 */
export class Worker {
  readonly workerId: string
  readonly #client: JobsvcClient
  readonly #options: WorkerOptions
  readonly #concurrency: number
  readonly #jobTypes: string[]
  readonly #log: Logger
  readonly #running = new Map<string, Running>()
  readonly #acks: AckRequest[] = []
  #flushing: Promise<void> | null = null
  #batchAck = true
  #loop: Promise<void> | null = null
  #stopping = false
  readonly #pollAbort = new AbortController()
  #slotFreed: (() => void) | null = null
  /** The signal poll in flight, and what restarts it with the jobs running now. */
  #signals: Promise<void> | null = null
  #signalRestart: AbortController | null = null
  #signalTimer: NodeJS.Timeout | null = null
  /** False once the service answered that it has no signal route (an older one): heartbeats still carry `cancel`. */
  #hasSignals = true

  constructor(options: WorkerOptions) {
    if (options.queues.length === 0) throw new TypeError('queues must name at least one queue')
    this.#client = options.client
    this.#options = options
    this.#concurrency = Math.max(1, Math.floor(options.concurrency ?? 1))
    this.#jobTypes = options.jobTypes ?? Object.keys(options.handlers)
    this.#log = options.logger ?? console
    this.workerId = options.workerId ?? `wrk_${hostname().replace(/[^A-Za-z0-9_-]/g, '-')}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
  }

  /** Jobs whose handlers are running now. */
  get active(): number {
    return this.#running.size
  }

  /** Registers the worker, then resolves as its first poll goes out; the worker runs in the background. */
  async start(): Promise<void> {
    if (this.#loop !== null) throw new Error('the worker has already been started')
    await this.#client.workers.register({
      worker_id: this.workerId,
      queues: this.#options.queues,
      job_types: this.#jobTypes,
      hostname: hostname(),
      sdk_version: `typescript/${SDK_VERSION}`,
      recurring_schedules: this.#options.recurringSchedules,
    })
    await new Promise<void>((polling) => {
      this.#loop = this.#pollLoop(polling)
    })
    this.#log.info('jobsvc worker started', { worker_id: this.workerId, queues: this.#options.queues, concurrency: this.#concurrency })
  }

  /**
   * Stops polling, lets running handlers finish for up to `shutdownGraceMs`, then aborts the rest
   * (their `ctx.signal`, with {@link WorkerStopped}) and hands them back to the service
   * (`POST /workers/release`: pending again, the attempt not spent; a service without that route
   * gets them acked failed); resolves once every ack and release has been delivered or given up.
   */
  async stop(): Promise<void> {
    if (this.#stopping) return this.#drained()
    this.#stopping = true
    // A poll aborted in the moment between the service's claim and its answer loses those jobs
    // to this worker; the reaper hands them out again after their timeout, as for a lost worker.
    // Waiting for the poll instead could hold stop() for the whole long poll (30 s).
    this.#pollAbort.abort()
    this.#slotFreed?.()
    await this.#loop
    const graceOver = new AbortController()
    const allDone = async () => {
      while (this.#running.size > 0 && !graceOver.signal.aborted) await this.#nextSlot()
      graceOver.abort()
    }
    await Promise.race([allDone(), sleep(this.#options.shutdownGraceMs ?? 30_000, graceOver.signal).then(() => graceOver.abort())])
    await Promise.all([...this.#running.values()].map((running) => this.#release(running)))
    this.#stopWatching()
    await this.#drained()
    this.#log.info('jobsvc worker stopped', { worker_id: this.workerId })
  }

  /** Ends the attempt on this side and hands the job back; acks it failed where the service cannot take it back. */
  async #release(running: Running): Promise<void> {
    running.controller.abort(new WorkerStopped('the worker stopped before the handler finished'))
    if (running.settled) return
    running.settled = true
    clearInterval(running.heartbeat)
    clearTimeout(running.timeout)
    this.#running.delete(running.job.id)
    try {
      await this.#client.workers.release({ job_id: running.job.id, worker_id: this.workerId })
      this.#log.info('jobsvc worker: job handed back', { job_id: running.job.id })
      return
    } catch (err) {
      if (err instanceof JobsvcError && lostAttemptCodes.has(err.code)) return
      this.#log.warn('jobsvc worker: release failed; acking the attempt failed', { job_id: running.job.id, error: String(err) })
    }
    running.settled = false
    this.#finish(running, 'failed', running.controller.signal.reason)
  }

  /**
   * Keeps one signal poll open while jobs run (`POST /workers/signals`), so a cancel reaches the
   * handler within about a second rather than at the next heartbeat. A job that starts restarts the
   * poll with the new list after {@link signalWatchDelayMs}; the last one to end stops it.
   */
  #watchSignals(): void {
    if (!this.#hasSignals || this.#signalTimer !== null) return
    this.#signalTimer = setTimeout(() => {
      this.#signalTimer = null
      if (this.#running.size === 0) return
      this.#signalRestart?.abort()
      this.#signals ??= this.#signalLoop().finally(() => (this.#signals = null))
    }, signalWatchDelayMs)
    this.#signalTimer.unref?.()
  }

  #stopWatching(): void {
    if (this.#signalTimer !== null) clearTimeout(this.#signalTimer)
    this.#signalTimer = null
    this.#signalRestart?.abort()
  }

  async #signalLoop(): Promise<void> {
    let failures = 0
    while (this.#running.size > 0 && this.#hasSignals) {
      const restart = new AbortController()
      this.#signalRestart = restart
      const jobIds = [...this.#running.keys()].slice(0, maxSignalJobs)
      try {
        const { cancel } = await this.#client.workers.signals(
          { worker_id: this.workerId, job_ids: jobIds, wait_seconds: signalWaitSeconds },
          { signal: restart.signal },
        )
        failures = 0
        for (const id of cancel) {
          const running = this.#running.get(id)
          if (running !== undefined) this.#cancelled(running)
        }
      } catch (err) {
        if (restart.signal.aborted) continue
        if (err instanceof JobsvcError && err.code === 'route_not_found') {
          this.#hasSignals = false
          return
        }
        await this.#backOff('signal poll', err, failures++, restart.signal)
      }
    }
  }

  /** The service cancelled the job: the handler is told and the attempt acked failed at once, which ends the job `cancelled`. */
  #cancelled(running: Running): void {
    if (running.settled) return
    this.#log.info('jobsvc worker: the job was cancelled; stopping it', { job_id: running.job.id })
    running.controller.abort(new JobCancelled(`job ${running.job.id} was cancelled`))
    this.#finish(running, 'failed', running.controller.signal.reason)
  }

  async #drained(): Promise<void> {
    while (this.#flushing !== null) await this.#flushing
  }

  async #pollLoop(polling: () => void): Promise<void> {
    let failures = 0
    while (!this.#stopping) {
      const free = this.#concurrency - this.#running.size
      if (free <= 0) {
        await this.#nextSlot()
        continue
      }
      try {
        const request = this.#client.workers.poll(
          {
            worker_id: this.workerId,
            queues: this.#options.queues,
            job_types: this.#jobTypes.length > 0 ? this.#jobTypes : undefined,
            capacity: Math.min(free, maxPollCapacity),
            wait_seconds: this.#options.pollWaitSeconds ?? 30,
          },
          { signal: this.#pollAbort.signal },
        )
        polling()
        const { jobs } = await request
        failures = 0
        for (const job of jobs) this.#run(job)
      } catch (err) {
        if (this.#stopping) break
        polling()
        await this.#backOff('poll', err, failures++, this.#pollAbort.signal)
      }
    }
  }

  /**
   * Waits after a failed request: the service's Retry-After when it gave one, else back-off with
   * jitter. `signal` cuts the wait short (stop() ends a poll's wait, never an ack's).
   */
  async #backOff(what: string, err: unknown, failures: number, signal?: AbortSignal): Promise<void> {
    const error = err instanceof JobsvcError ? err : null
    const level = error?.isTransient ? 'warn' : 'error'
    this.#log[level](`jobsvc worker: ${what} failed, retrying`, {
      worker_id: this.workerId,
      code: error?.code,
      status: error?.status,
      error: String(err),
    })
    const { baseMs = 500, maxMs = 30_000 } = this.#options.backoff ?? {}
    await sleep(error?.retryAfter != null ? error.retryAfter * 1000 : backoffDelay(failures, baseMs, maxMs), signal)
  }

  #nextSlot(): Promise<void> {
    return new Promise((resolve) => (this.#slotFreed = resolve))
  }

  #run(job: PolledJob): void {
    const intervalMs = Math.max((job.timeout_seconds * 1000) / 3, this.#options.minHeartbeatIntervalMs ?? 10_000)
    const running: Running = {
      job,
      controller: new AbortController(),
      startedAt: Date.now(),
      settled: false,
      progress: null,
      beating: Promise.resolve(),
      heartbeat: setInterval(() => void this.#beat(running), intervalMs),
      timeout: setTimeout(() => this.#timeOut(running), job.timeout_seconds * 1000),
    }
    this.#running.set(job.id, running)
    this.#watchSignals()
    const ctx: JobContext = {
      workerId: this.workerId,
      signal: running.controller.signal,
      traceparent: job.traceparent ?? null,
      parentResults: job.parent_results ?? {},
      progress: (value) => {
        running.progress = value
        return this.#beat(running)
      },
    }
    const handler = this.#options.handlers[job.job_type]
    Promise.resolve()
      .then(() => {
        if (handler === undefined) throw new TypeError(`no handler for job type ${job.job_type}`)
        return handler(job, ctx)
      })
      .then(
        (value: unknown) => this.#finish(running, 'succeeded', undefined, value),
        (err: unknown) => this.#finish(running, err instanceof RateLimited ? 'rate_limited' : 'failed', err),
      )
  }

  #timeOut(running: Running): void {
    // Heartbeats stop with the attempt's time: a handler that ignores the signal is then reaped
    // by the service rather than kept alive for ever.
    clearInterval(running.heartbeat)
    running.controller.abort(new JobTimeout(`job ${running.job.id} ran past its timeout_seconds (${running.job.timeout_seconds})`))
  }

  /** Sends one heartbeat (with the latest progress), after any still in flight for the job. */
  #beat(running: Running): Promise<void> {
    running.beating = running.beating.then(async () => {
      if (running.settled || running.controller.signal.aborted) return
      try {
        const body = { job_id: running.job.id, worker_id: this.workerId, ...(running.progress === null ? {} : { progress: running.progress }) }
        const answer = await this.#client.workers.heartbeat(body)
        if (answer.status === 'cancel') this.#cancelled(running)
      } catch (err) {
        if (err instanceof JobsvcError && lostAttemptCodes.has(err.code)) {
          this.#log.warn('jobsvc worker: the service no longer gives this worker the job', { job_id: running.job.id, code: err.code })
          clearInterval(running.heartbeat)
          running.controller.abort(err)
        } else {
          this.#log.warn('jobsvc worker: heartbeat failed; the next one retries', { job_id: running.job.id, error: String(err) })
        }
      }
    })
    return running.beating
  }

  #finish(running: Running, status: AckRequest['status'], err?: unknown, value?: unknown): void {
    if (running.settled) return
    running.settled = true
    clearInterval(running.heartbeat)
    clearTimeout(running.timeout)
    this.#running.delete(running.job.id)
    if (this.#running.size === 0) this.#stopWatching()
    const ack: AckRequest = { job_id: running.job.id, worker_id: this.workerId, status, duration_ms: Date.now() - running.startedAt }
    if (status === 'failed') ack.error = toErrorDetail(err)
    else if (err instanceof RateLimited) ack.retry_after_ms = err.retryAfterMs
    else this.#attachResult(ack, value)
    this.#acks.push(ack)
    this.#flushing ??= this.#flushAcks().finally(() => (this.#flushing = null))
    this.#slotFreed?.()
  }

  /**
   * Acks go out as they come: while one request is in flight the next acks gather, and leave
   * together in one batch when it returns. A request that got no answer or a 5xx is sent again.
   */
  async #flushAcks(): Promise<void> {
    let failures = 0
    let failingSince = 0
    while (this.#acks.length > 0) {
      const batch = this.#acks.splice(0, maxAcksPerBatch)
      const { again, error } = await this.#sendAcks(batch)
      if (again.length === 0) {
        failures = 0
      } else if (failures > 0 && Date.now() - failingSince > ackRetryMs) {
        this.#log.error('jobsvc worker: acks given up', { worker_id: this.workerId, job_ids: again.map((a) => a.job_id), error: String(error) })
        failures = 0
      } else {
        if (failures === 0) failingSince = Date.now()
        this.#acks.unshift(...again)
        await this.#backOff(`ack of ${again.length} jobs`, error, failures++)
      }
    }
  }

  /** Sends the acks through the batch route (or one by one where it is missing); answers those to send again. */
  async #sendAcks(acks: AckRequest[]): Promise<{ again: AckRequest[]; error?: unknown }> {
    if (this.#batchAck) {
      try {
        const { results } = await this.#client.workers.ackBatch(acks)
        const again = acks.filter((ack, i) => {
          const result = results[i]
          return result !== undefined && 'error' in result && this.#isAckToRetry(ack, toJobsvcError(result.error, result.status))
        })
        return { again, error: again.length > 0 ? 'the service could not apply some acks of the batch' : undefined }
      } catch (err) {
        if (!(err instanceof JobsvcError && err.code === 'route_not_found'))
          return { again: acks.filter((ack) => this.#isAckToRetry(ack, err)), error: err }
        this.#batchAck = false
      }
    }
    let error: unknown
    const again = await Promise.all(
      acks.map(async (ack) => {
        try {
          await this.#client.workers.ack(ack)
          return []
        } catch (err) {
          error = err
          return this.#isAckToRetry(ack, err) ? [ack] : []
        }
      }),
    )
    return { again: again.flat(), error }
  }

  /** The handler's return value as the ack's `result`, as JSON would send it; none when it has no JSON form. */
  #attachResult(ack: AckRequest, value: unknown): void {
    if (value === undefined || value === null) return
    try {
      const text = JSON.stringify(value)
      if (text !== undefined) ack.result = JSON.parse(text)
    } catch (err) {
      this.#log.error('jobsvc worker: the handler returned a value JSON cannot hold; acked without a result', {
        job_id: ack.job_id,
        error: String(err),
      })
    }
  }

  #isAckToRetry(ack: AckRequest, err: unknown): boolean {
    const error = err instanceof JobsvcError ? err : null
    if (error === null || error.isTransient) return true
    // The service refused the result (over 64 KiB, or text it cannot store): the job still succeeded.
    if (error.code === 'invalid_request' && ack.result !== undefined) {
      this.#log.error('jobsvc worker: the result was refused; acked without it', { job_id: ack.job_id, reason: error.message })
      delete ack.result
      return true
    }
    const fields = { job_id: ack.job_id, status: ack.status, code: error.code }
    if (lostAttemptCodes.has(error.code)) this.#log.warn('jobsvc worker: late ack ignored; the attempt was no longer this worker’s', fields)
    else this.#log.error('jobsvc worker: ack refused', fields)
    return false
  }
}

function toJobsvcError(error: { code: string; message: string; request_id: string }, status: number): JobsvcError {
  return new JobsvcError({ code: error.code, status, message: error.message, requestId: error.request_id })
}

function toErrorDetail(err: unknown): NonNullable<AckRequest['error']> {
  if (err instanceof Error) return { type: err.name || err.constructor.name, message: err.message, stack_trace: err.stack ?? '' }
  return { type: typeof err, message: String(err), stack_trace: '' }
}
