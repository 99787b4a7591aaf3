import { JobNotFound, ParentNotFound } from '../../../domain/errors.ts'
import {
  assertHeartbeatAllowed,
  type AckStatus,
  cascadeOf,
  cascadeOfState,
  type CascadeStep,
  isTerminal,
  jobDecider,
  type Job,
  type JobCommand,
  type JobError,
  type JobEvent,
} from '../../../domain/job.ts'
import type { RetryPolicies } from '../../../domain/retry-policy.ts'
import { upsertJobRows } from '../../../projections/job-list.ts'
import type { AggregateRef, EventRecord, Loaded, StoredEvent } from '../../../streams/event-store.ts'
import { handleCommand, type CommandResult } from '../../../streams/handle-command.ts'
import { isSubjectToken } from '../../../streams/names.ts'
import { recordJobEvents } from '../../infrastructure/metrics.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** `job_` and a ULID: anything else cannot name a job, so it is not found without a lookup. */
const jobIdPattern = /^job_[0-9A-HJKMNP-TV-Z]{26}$/

export function isJobId(id: string): boolean {
  return jobIdPattern.test(id)
}

export interface NewJob {
  job_type: string
  payload: Record<string, unknown>
  queue: string
  run_at: string | null
  max_attempts: number
  timeout_seconds: number
  tags: Record<string, string> | null
  parent_job_id: string | null
  idempotency_key: string | null
  /** The creating request's W3C `traceparent`, if it sent one. */
  traceparent?: string | null
}

export interface AckInput {
  worker_id: string
  status: AckStatus
  duration_ms: number | null
  error: JobError | null
}

export interface AckOutcome {
  action: 'done' | 'retry'
  retry_at?: string
  children_activated?: number
}

/** Where a page of a job's history resumes: the message's stream sequence and the event's index in it. */
export interface HistoryPosition {
  seq: number
  index: number
}

export interface HistoryPage {
  events: Array<{ seq: number; event: StoredEvent<JobEvent> }>
  /** Where the next page starts; null when this one reached the job's last event. */
  next: HistoryPosition | null
}

export interface Written {
  job: Job
  seq: number
}

/**
 * Follows a JobService's appends as they are answered, so that the API's ready index takes its
 * own process's creates, claims and releases at once instead of waiting for the log to deliver
 * them back.
 */
export interface JobAppendObserver {
  /** A new job's first append is about to be sent. */
  creating(jobId: string): void
  /** A message this service appended was acknowledged. */
  appended(record: EventRecord<JobEvent, Job | null>): void
  /** The new job's append has settled, stored or not (after `appended` when it was). */
  created(jobId: string): void
}

/** Jobs whose last known state this process keeps as hints (state includes the payload). */
const maxKnownJobs = 20_000

/** Children are re-decided a few at a time so a parent with thousands of them stays polite. */
const cascadeConcurrency = 16

/**
 * The job use cases shared by the API and the scheduler: each one is a command on
 * the job aggregate, plus the cross-aggregate follow-ups (continuations) written child by child.
 */
export class JobService {
  readonly #deps: Deps
  /** Per project, the last stream sequence this process wrote: lists wait for the projector to reach it. */
  readonly lastWrittenSeq = new Map<string, number>()
  /**
   * The state and sequence of jobs this process last decided on, used as the next command's
   * hint: an ack after a claim in the same process then costs one append and no load. A stale
   * entry only costs a conflict and a reload (see handleCommand).
   */
  readonly #known = new Map<string, Loaded<Job>>()
  /** Told of this service's appends: the API's ready index (JobAppendObserver). */
  observer: JobAppendObserver | null = null

  constructor(deps: Deps) {
    this.#deps = deps
  }

  ref(projectId: string, jobId: string): AggregateRef {
    return { aggregate: 'job', projectId, id: jobId }
  }

  #meta(): { now: string; random: number } {
    return { now: this.#deps.now().toISOString(), random: Math.random() }
  }

  #newEventId = (): string => `evt_${this.#deps.newUlid()}`

  newJobId(): string {
    return `job_${this.#deps.newUlid()}`
  }

  /** A write of this project's made elsewhere (recurring routes), for read-your-writes on lists. */
  noteWritten(projectId: string, seq: number): void {
    this.#noteWrite(projectId, seq)
  }

  #noteWrite(projectId: string, seq: number): void {
    if (seq > (this.lastWrittenSeq.get(projectId) ?? 0)) this.lastWrittenSeq.set(projectId, seq)
  }

  #remember(jobId: string, known: Loaded<Job>): void {
    this.#known.delete(jobId)
    if (this.#known.size >= maxKnownJobs) this.#known.delete(this.#known.keys().next().value!)
    this.#known.set(jobId, known)
  }

  async #run(projectId: string, jobId: string, command: JobCommand, hint?: Loaded<Job>, trustHint = false): Promise<CommandResult<JobEvent, Job>> {
    if (!isJobId(jobId)) throw new JobNotFound(jobId)
    const creating = command.type === 'create_job'
    const known = creating ? { state: null, seq: 0 } : (hint ?? this.#known.get(jobId))
    if (creating) this.observer?.creating(jobId)
    let result: CommandResult<JobEvent, Job | null>
    try {
      const decide = () =>
        handleCommand(this.#deps.store, jobDecider, this.ref(projectId, jobId), command, this.#newEventId, {
          hint: known,
          trustHint: trustHint && hint !== undefined,
        })
      // Where the log's check is not exact (write-guard.ts), a decision on a job holds the job's
      // lock from its load to its append, so a racing decision waits rather than conflicts.
      result = creating ? await decide() : await this.#deps.guard.serialize(this.#deps.store.subjectOf(this.ref(projectId, jobId)), decide)
      if (result.appended) {
        this.observer?.appended(result.record)
        recordJobEvents(result.events, result.state)
      }
    } finally {
      if (creating) this.observer?.created(jobId)
    }
    if (result.state !== null && !isTerminal(result.state.state)) this.#remember(jobId, { state: result.state as Job, seq: result.seq })
    else this.#known.delete(jobId)
    // A no-op still reports the state it was decided on, which another writer (the
    // scheduler, another API process) may have just appended: a list that follows must wait for the
    // projector to reach it too, or a cascade the scheduler won shows stale children.
    this.#noteWrite(projectId, result.seq)
    return result as CommandResult<JobEvent, Job>
  }

  /** The job as of its latest event, straight from the log (read-your-writes for single reads). */
  async get(projectId: string, jobId: string): Promise<Written> {
    if (!isJobId(jobId) || !isSubjectToken(projectId)) throw new JobNotFound(jobId)
    const loaded = await this.#deps.store.load<Job>(this.ref(projectId, jobId))
    if (loaded.state === null) throw new JobNotFound(jobId)
    return { job: loaded.state, seq: loaded.seq }
  }

  /**
   * One page of the job's events from the log, oldest first: at most `limit` events from `from`
   * (the position a previous page ended at; null: the first event). Reads one message per event
   * (a message almost always holds one), plus one to learn whether more follow, so a job with
   * thousands of progress reports costs a page, not its whole history.
   */
  async history(projectId: string, jobId: string, from: HistoryPosition | null, limit: number): Promise<HistoryPage> {
    if (!isJobId(jobId) || !isSubjectToken(projectId)) throw new JobNotFound(jobId)
    const ref = this.ref(projectId, jobId)
    const store = this.#deps.store
    const events: HistoryPage['events'] = []
    let record = await store.nextOf<JobEvent, Job>(ref, from?.seq ?? 1)
    if (record === null && (from === null || (await store.load(ref)).state === null)) throw new JobNotFound(jobId)
    for (; record !== null; record = await store.nextOf<JobEvent, Job>(ref, record.seq + 1)) {
      // A cursor names the message it stopped in; a message that is not there any more starts the next one whole.
      const all = record.message.events
      const first = from !== null && record.seq === from.seq ? from.index : 0
      for (let i = first; i < all.length; i++) {
        if (events.length === limit) return { events, next: { seq: record.seq, index: i } }
        events.push({ seq: record.seq, event: all[i]! })
      }
      if (events.length === limit) {
        const after = await store.nextOf<JobEvent, Job>(ref, record.seq + 1)
        return { events, next: after === null ? null : { seq: after.seq, index: 0 } }
      }
    }
    return { events, next: null }
  }

  /**
   * A continuation is attached to its parent before it exists, so a parent that succeeds in
   * between still finds it; a crash between the two leaves the parent naming a child that never
   * appeared, which activation skips.
   */
  /** `options.jobId`: an id decided by the caller (a recurring occurrence); InvalidState if it exists. */
  async create(projectId: string, input: NewJob, options: { jobId?: string } = {}): Promise<Written> {
    const jobId = options.jobId ?? this.newJobId()
    let waitsForParent = false
    if (input.parent_job_id !== null) {
      if (!isJobId(input.parent_job_id)) throw new ParentNotFound(input.parent_job_id)
      try {
        const attached = await this.#run(projectId, input.parent_job_id, {
          type: 'attach_child',
          data: { child_job_id: jobId },
          meta: this.#meta(),
        })
        waitsForParent = attached.appended
      } catch (err) {
        if (err instanceof JobNotFound) throw new ParentNotFound(input.parent_job_id)
        throw err
      }
    }
    const created = await this.#run(projectId, jobId, {
      type: 'create_job',
      data: { ...input, job_id: jobId, project_id: projectId, waits_for_parent: waitsForParent },
      meta: this.#meta(),
    })
    return { job: created.state!, seq: created.seq }
  }

  async cancel(projectId: string, jobId: string): Promise<Written> {
    const result = await this.#run(projectId, jobId, { type: 'cancel_job', data: {}, meta: this.#meta() })
    await this.cascade(projectId, result.events, result.state)
    return { job: result.state!, seq: result.seq }
  }

  async retry(projectId: string, jobId: string): Promise<Written> {
    const result = await this.#run(projectId, jobId, { type: 'retry_job', data: {}, meta: this.#meta() })
    return { job: result.state!, seq: result.seq }
  }

  /**
   * `seq` is the ack's own message; continuations it activates are appended after it. A failure
   * is retried under `retryPolicies`, the project's settings as the caller holds them already
   * (the API key's cached project), so an ack reads nothing more to learn them.
   */
  async ack(projectId: string, jobId: string, input: AckInput, retryPolicies?: RetryPolicies): Promise<{ outcome: AckOutcome; seq: number }> {
    const data = retryPolicies === undefined ? input : { ...input, retry_policies: retryPolicies }
    const result = await this.#run(projectId, jobId, { type: 'ack_job', data, meta: this.#meta() })
    const job = result.state!
    const outcome: AckOutcome = job.state === 'pending' ? { action: 'retry', retry_at: job.run_at! } : { action: 'done' }
    const activated = await this.cascade(projectId, result.events, result.state)
    if (job.children.length > 0 && job.state === 'succeeded') outcome.children_activated = activated
    return { outcome, seq: result.seq }
  }

  /** Liveness only: a KV write, no event, unless the worker reports a new progress value. */
  async heartbeat(projectId: string, jobId: string, workerId: string, progress: number | null): Promise<void> {
    const { job } = await this.get(projectId, jobId)
    assertHeartbeatAllowed(job, workerId)
    const beat: Heartbeat = { worker_id: workerId, attempt: job.attempt, at: this.#deps.now().toISOString() }
    await this.#deps.heartbeats.put(jobId, JSON.stringify(beat))
    if (progress !== null && progress !== job.progress) {
      await this.#run(projectId, jobId, { type: 'report_progress', data: { worker_id: workerId, progress }, meta: this.#meta() })
    }
  }

  async lastHeartbeat(jobId: string, attempt: number): Promise<Heartbeat | null> {
    const entry = await this.#deps.heartbeats.get(jobId)
    if (entry === null || entry.operation !== 'PUT') return null
    const beat = entry.json<Heartbeat>()
    return beat.attempt === attempt ? beat : null
  }

  /** The reaper's move: a no-op when the attempt already ended (an ack won the race). */
  async reap(
    projectId: string,
    jobId: string,
    attempt: number,
    error: JobError,
    retryPolicies?: RetryPolicies,
  ): Promise<CommandResult<JobEvent, Job>> {
    const data = retryPolicies === undefined ? { attempt, error } : { attempt, error, retry_policies: retryPolicies }
    const result = await this.#run(projectId, jobId, { type: 'reap_job', data, meta: this.#meta() })
    await this.cascade(projectId, result.events, result.state)
    return result
  }

  /**
   * `known` is the job as a read-model row or the ready index has it, used as the hint so a claim
   * needs no load. With `trustKnown`, a stale `known` is not reloaded: the claim fails with
   * ConcurrencyConflict (or the refusal decided on it) and the caller moves on.
   */
  async claim(projectId: string, jobId: string, workerId: string, known?: Loaded<Job>, trustKnown = false): Promise<CommandResult<JobEvent, Job>> {
    return this.#run(projectId, jobId, { type: 'claim_job', data: { worker_id: workerId }, meta: this.#meta() }, known, trustKnown)
  }

  async promote(projectId: string, jobId: string): Promise<CommandResult<JobEvent, Job>> {
    return this.#run(projectId, jobId, { type: 'promote_job', data: {}, meta: this.#meta() })
  }

  /**
   * Activates or cancels the continuations of a parent whose decision just ended it. Each child
   * is its own append with its own expected sequence; the domain makes a repeat a no-op, which is
   * what lets the scheduler's sweep run the same step again after a crash. Resolves to the number
   * of children moved.
   */
  async cascade(projectId: string, events: readonly JobEvent[], job: Job | null): Promise<number> {
    if (job === null || job.children.length === 0) return 0
    const step = events.map(cascadeOf).find((c) => c !== null)
    if (step === undefined || step === null) return 0
    return this.#moveChildren(projectId, job, step)
  }

  /** The sweep's cascade: decided from the parent's state rather than the event that ended it. */
  async cascadeFromState(projectId: string, job: Job): Promise<number> {
    const step = cascadeOfState(job)
    if (step === null || job.children.length === 0) return 0
    return this.#moveChildren(projectId, job, step)
  }

  async #moveChildren(projectId: string, job: Job, step: CascadeStep): Promise<number> {
    let moved = 0
    const children = [...job.children]
    const worker = async () => {
      for (let childId = children.shift(); childId !== undefined; childId = children.shift()) {
        const command: JobCommand =
          step.kind === 'activate'
            ? { type: 'activate_child', data: { parent_job_id: job.id }, meta: this.#meta() }
            : { type: 'cancel_by_parent', data: { reason: step.reason }, meta: this.#meta() }
        const result = await this.#run(projectId, childId, command)
        // The scheduler's sweep may race this request and move a child first; for activation the
        // child still counts in `children_activated` (a child leaves waiting_for_parent only by
        // activation or cancellation).
        if (result.appended || (step.kind === 'activate' && isActivated(result.state))) moved++
      }
    }
    await Promise.all(Array.from({ length: Math.min(cascadeConcurrency, children.length) }, worker))
    return moved
  }

  /** Writes read-model rows for records this process appended (the scheduler's promotion and reaping paths). */
  async writeRows(records: readonly EventRecord[]): Promise<void> {
    await upsertJobRows(this.#deps.sql, records)
  }
}

function isActivated(child: Job | null): boolean {
  return child !== null && child.parent_job_id !== null && !child.waiting_for_parent && child.state !== 'cancelled'
}

export interface Heartbeat {
  worker_id: string
  attempt: number
  at: string
}
