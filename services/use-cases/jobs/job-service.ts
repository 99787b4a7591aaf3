import type { Actor, CommandMeta } from '../../../domain/decider.ts'
import type { FeedPosition } from '../../../domain/event-feed.ts'
import { JobNotFound, ParentNotFound, ParentTerminal } from '../../../domain/errors.ts'

import {
  assertHeartbeatAllowed,
  type AckStatus,
  cascadeOf,
  cascadeOfState,
  type CascadeStep,
  errorOf,
  isCancelRequested,
  isTerminal,
  payloadInEvents,
  resultOf,
  toJobView,
  type Job,
  type JobDefinition,
  type JobCommand,
  type JobError,
  type JobEvent,
  type JobState,
  type JobView,
  type ParentFailureRule,
  type ParentOutcome,
  isClaimable,
} from '../../../domain/job.ts'
import { InvalidState } from '../../../domain/errors.ts'
import { setTimeout as sleep } from 'node:timers/promises'
import { ConcurrencyConflict } from '../../../streams/errors.ts'
import { EndedAttempts, expectRoom, freeGate, GateStates, giveBack, holdGate, newHoldId, takeGates, type ClaimHold } from './flow-gates.ts'
import { gateNameOf, gatesOf, holdGateOf, LimitRefused, type GateSpec } from '../../../domain/flow-gate.ts'
import type { FlowLimits } from '../../../domain/project/index.ts'
import { jobProgressDecider, progressOf, type JobProgress, type JobProgressCommand } from '../../../domain/job-progress.ts'
import type { RetryPolicies } from '../../../domain/retry-policy.ts'
import { upsertJobRows } from '../../../projections/job-list.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { jobHandler, progressHandler } from '../../../streams/aggregates.ts'
import type { EventRecord, Loaded, StoredEvent } from '../../../streams/event-store.ts'
import { eventSubject, isSubjectToken, jobSubjectsFilter } from '../../../streams/names.ts'
import { limitRefusals, limitSlotsTaken, recordJobEvents } from '../../infrastructure/metrics.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** `job_` and a ULID: anything else cannot name a job, so it is not found without a lookup. */
const jobIdPattern = /^job_[0-9A-HJKMNP-TV-Z]{26}$/

export function isJobId(id: string): boolean {
  return jobIdPattern.test(id)
}

/** A job as its creator asks for it: the service gives it its id, the project its own. */
export interface NewJob extends Omit<JobDefinition, 'job_id' | 'project_id'> {
  /** The creating request's W3C `traceparent`, if it sent one. */
  traceparent?: string | null
}

export interface AckInput {
  worker_id: string
  status: AckStatus
  duration_ms: number | null
  error: JobError | null
  /** What the handler returned (JSON; null or absent: nothing), kept when the attempt succeeded. */
  result?: unknown
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
  /** Each event with its message's sequence and its place in the log as the event feed names it (its cursor). */
  events: Array<{ seq: number; event: StoredEvent<JobEvent>; position: FeedPosition }>
  /** Where the next page starts; null when this one reached the job's last event. */
  next: HistoryPosition | null
}

/** Which events a page of a job's history keeps: its types, and times within inclusive bounds (ISO instants); null: any. */
export interface HistoryFilter {
  types: ReadonlySet<string> | null
  since: string | null
  until: string | null
}

const everyEvent: HistoryFilter = { types: null, since: null, until: null }

/** Messages a filtered page of a job's history looks at before it ends short, with `has_more`. */
const maxExaminedPerHistoryPage = 1000

/**
 * How far past `until` a filtered history reads before it stops: an event's time is the clock of
 * the process that decided it, and the log may hold a later decision of another process whose
 * clock is a little behind.
 */
const historyClockMarginMs = 10_000

/** A parent's end asking to move one of its children (JobService's #moveChild). */
interface ChildMove {
  parentId: string
  step: CascadeStep
  resolve: (result: CommandResult<JobEvent, Job>) => void
  reject: (err: unknown) => void
}

/** A parent of a graph job as its children see it (JobService.dependencies). */
export interface ParentView {
  job_id: string
  /** null: gone from the log (retention). */
  state: JobState | null
  result: unknown
  error: JobError | null
}

/** A child of a job (a graph job or a continuation) as its parent's dependencies show it. */
export interface ChildView {
  job_id: string
  /** null: gone from the log (retention), or attached by a create that never landed. */
  state: JobState | null
}

export interface Written {
  job: Job
  seq: number
}

/** A job as the API shows it, and the last sequence of its subjects (its own, its progress reports'). */
export interface Read {
  job: JobView
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

/** Jobs whose last known state this process keeps as hints. */
const maxKnownJobs = 20_000

/**
 * The results of jobs that succeeded, by project and id: a success is final (only a failed or
 * dead-lettered job is retried) and its result is in its job_succeeded, so a child's poll need
 * not read a parent from the log again, and a fan-out's thousand children do not each read their
 * one parent's message (which names every child). Bounded in entries and in the size of what it
 * keeps; a result over `largestKept` is read from the log each time.
 */
class SucceededResults {
  readonly #results = new Map<string, unknown>()
  constructor(
    readonly capacity = 10_000,
    readonly largestKept = 4_096,
  ) {}

  has(projectId: string, jobId: string): boolean {
    return this.#results.has(`${projectId}/${jobId}`)
  }

  get(projectId: string, jobId: string): unknown {
    return this.#results.get(`${projectId}/${jobId}`)
  }

  remember(projectId: string, jobId: string, result: unknown): void {
    if (result !== null && JSON.stringify(result).length > this.largestKept) return
    const key = `${projectId}/${jobId}`
    this.#results.delete(key)
    if (this.#results.size >= this.capacity) this.#results.delete(this.#results.keys().next().value!)
    this.#results.set(key, result)
  }
}

/** Children are re-decided a few at a time so a parent with thousands of them stays polite. */
const cascadeConcurrency = 64
/** Parents (or children) of one job read from the log at once (its poll's results, its dependencies). */
const parentReadConcurrency = 16
/** Children a job's dependencies name with their states; `children_total` counts them all. */
export const maxChildrenShown = 200
/** A contended decision (#retryingConflicts) made again after conflicts at most this often (each a fresh load and append). */
const maxConflictRounds = 50

/**
 * The job use cases shared by the API and the scheduler: each one is a command on
 * the job aggregate, plus the cross-aggregate follow-ups (continuations) written child by child.
 */
export class JobService {
  readonly #deps: Deps
  /** Per project, the last stream sequence this process wrote: lists wait for the projector to reach it. */
  readonly lastWrittenSeq = new Map<string, number>()
  /**
   * Per project, the last stream sequence at which this process appended a job that is pending
   * after it (created, retried, released, activated, promoted): a poll the ready index cannot
   * answer for waits for the projector to reach it before it answers short (claimer.ts). Claims
   * are left out, so a poll's own claims do not make it wait for their rows.
   */
  readonly lastPendingSeq = new Map<string, number>()
  /**
   * The state and sequence of jobs this process last decided on, used as the next command's
   * hint: an ack after a claim in the same process then costs one append and no load. A stale
   * entry only costs a conflict and a reload (see streams/handle-command.ts).
   */
  readonly #known = new Map<string, Loaded<Job>>()
  /** Told of this service's appends: the API's ready index (JobAppendObserver). */
  observer: JobAppendObserver | null = null

  constructor(deps: Deps) {
    this.#deps = deps
  }

  /** Results of parents that succeeded, read or acked here lately: what every child's poll hands out (parentResults). */
  readonly #succeededResults = new SucceededResults()

  /** The flow gates this process decided on last (flow-gates.ts), so its next take or free needs no load. */
  readonly #gateStates = new GateStates()
  /** Attempts this process ended by spending them, whose slots a take frees without loading their jobs (flow-gates.ts). */
  readonly #endedAttempts = new EndedAttempts()

  /** What a decision on a flow gate needs: the runtime's log and clock as they are now, and what this process knows of the gates. */
  get #gateDeps() {
    const { store, newUlid, now } = this.#deps
    return { store, newUlid, now, gateStates: this.#gateStates, endedAttempts: this.#endedAttempts }
  }

  /** `actor`: the dashboard member who asked, recorded on the events (none for keys, workers and roles). */
  #meta(actor?: Actor): CommandMeta {
    return { now: this.#deps.now().toISOString(), random: Math.random(), actor }
  }

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

  #notePending(projectId: string, seq: number): void {
    if (seq > (this.lastPendingSeq.get(projectId) ?? 0)) this.lastPendingSeq.set(projectId, seq)
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
      const ref = jobHandler.ref(projectId, jobId)
      const decide = () => jobHandler.decide(this.#deps, ref, command, { hint: known, trustHint: trustHint && hint !== undefined })
      // Where the log's check is not exact (write-guard.ts), a decision on a job holds the job's
      // lock from its load to its append, so a racing decision waits rather than conflicts.
      result = creating ? await decide() : await this.#deps.guard.serialize(this.#deps.store.subjectOf(ref), decide)
      if (result.appended) {
        this.observer?.appended(result.record)
        if (result.state !== null && result.state.children.length > 0 && result.state.state === 'succeeded') {
          this.#succeededResults.remember(projectId, jobId, resultOf(result.events))
        }
        recordJobEvents(result.events, result.state)
        if (result.state?.state === 'pending') this.#notePending(projectId, result.seq)
        await this.#freeEndedAttempt(projectId, jobId, result.events, result.state)
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

  /**
   * After an append that ended a running attempt (an ack, a reap, a cancel, a release), the flow
   * gates the attempt held have room again for its key's next job. An end that spends the attempt
   * appends nothing on them: that it ended is on the job's log for good, and the next take that
   * needs the slot frees it in its own append (flow-gates.ts); this process remembers the attempt
   * so its takes know without a load. A release does not spend the attempt (its next claim takes
   * the same number, which a gate cannot tell from this one), so its slots are freed now; a crash
   * before that leaves them held until the reaper's reconciliation.
   */
  async #freeEndedAttempt(projectId: string, jobId: string, events: readonly JobEvent[], job: Job | null): Promise<void> {
    const gates = job?.gates
    if (gates === undefined || gates.length === 0 || job!.state === 'processing') return
    const ended = events.find(
      (e) =>
        e.type === 'job_succeeded' ||
        e.type === 'job_attempt_failed' ||
        e.type === 'job_dead_lettered' ||
        e.type === 'job_released' ||
        (e.type === 'job_cancelled' && e.data.previous_state === 'processing'),
    )
    if (ended === undefined) return
    const attempt = (ended.data as { attempt?: number }).attempt ?? job!.attempt
    if (ended.type !== 'job_released') this.#endedAttempts.add(projectId, jobId, attempt)
    else {
      try {
        // This claim's hold only: a later claim of the same number holds under its own.
        const hold = { job_id: jobId, attempt, ...(job!.gate_hold === undefined ? {} : { hold: job!.gate_hold }) }
        await Promise.all(gates.map((name) => freeGate(this.#gateDeps, projectId, name, hold, 'ended')))
      } catch (err) {
        // The release stands; the reaper's reconciliation frees what could not be freed here.
        this.#deps.log.warn({ err, projectId, jobId, gates }, 'could not free the flow gates of a released attempt')
      }
    }
    this.gateFreed?.(projectId, gates)
  }

  /** Told of gates this process freed, so its polls stop passing over their keys at once (the API's FlowBlocks). */
  gateFreed: ((projectId: string, gates: readonly string[]) => void) | null = null

  /** The job's state as of its latest event, straight from the log: one direct get. */
  async load(projectId: string, jobId: string): Promise<Written> {
    assertJobAddress(projectId, jobId)
    const loaded = await jobHandler.load(this.#deps.store, jobHandler.ref(projectId, jobId))
    if (loaded.state === null) throw new JobNotFound(jobId)
    return { job: loaded.state, seq: loaded.seq }
  }

  /**
   * The job as the API shows it, straight from the log (read-your-writes for single reads): its
   * last message, its first (the payload) and its last progress report, read at once, and the
   * message holding its last error when that is another one. `seq` covers both of its subjects,
   * so a list waiting for it shows the same progress.
   */
  async get(projectId: string, jobId: string): Promise<Read> {
    assertJobAddress(projectId, jobId)
    const store = this.#deps.store
    const ref = jobHandler.ref(projectId, jobId)
    const [last, first, report] = await Promise.all([
      jobHandler.last(store, ref),
      jobHandler.next(store, ref, 1),
      progressHandler.load(store, progressHandler.ref(projectId, jobId)),
    ])
    if (last === null || last.message.state === null) throw new JobNotFound(jobId)
    const job = last.message.state
    const error =
      job.error ??
      (job.error_seq === null
        ? null
        : errorOf((job.error_seq === last.seq ? last : await jobHandler.at(store, ref, job.error_seq))?.message.events ?? []))
    const payload = payloadIn(
      job.payload_seq === undefined ? first : job.payload_seq === last.seq ? last : await jobHandler.at(store, ref, job.payload_seq),
    )
    const facts = { payload, error, progress: progressOf(job, report.state), result: await this.#resultOf(job, last) }
    return { job: toJobView(job, facts), seq: Math.max(last.seq, report.seq) }
  }

  /**
   * A succeeded job's result, from the message that recorded its success: the last one, unless a
   * continuation was attached after it (then its history is read back to that message).
   */
  async #resultOf(job: Job, last: EventRecord<JobEvent, Job | null>): Promise<unknown> {
    if (job.state !== 'succeeded') return null
    if (last.message.events.some((e) => e.type === 'job_succeeded')) return resultOf(last.message.events)
    const history = await jobHandler.history(this.#deps.store, jobHandler.ref(job.project_id, job.id))
    for (let i = history.length - 1; i >= 0; i--) {
      const events = history[i]!.message.events
      if (events.some((e) => e.type === 'job_succeeded')) return resultOf(events)
    }
    return null
  }

  /**
   * A parent of a graph job (issue 30) as its children see it, from the log: its state, the
   * result of its successful attempt and its last error; null when it is gone (retention).
   */
  async #parentView(projectId: string, parentId: string): Promise<ParentView | null> {
    const store = this.#deps.store
    const ref = jobHandler.ref(projectId, parentId)
    const last = await jobHandler.last(store, ref)
    const job = last?.message.state ?? null
    if (last === null || job === null) return null
    const error =
      job.error ??
      (job.error_seq === null
        ? null
        : errorOf((job.error_seq === last.seq ? last : await jobHandler.at(store, ref, job.error_seq))?.message.events ?? []))
    return { job_id: parentId, state: job.state, result: await this.#resultOf(job, last), error }
  }

  /** Each of `parentIds` as #parentView reads it, `parentReadConcurrency` at a time, in order. */
  async #parentViews(projectId: string, parentIds: readonly string[]): Promise<Array<ParentView | null>> {
    const views = new Array<ParentView | null>(parentIds.length).fill(null)
    let next = 0
    const reader = async () => {
      for (let i = next++; i < parentIds.length; i = next++) views[i] = await this.#parentView(projectId, parentIds[i]!)
    }
    await Promise.all(Array.from({ length: Math.min(parentReadConcurrency, parentIds.length) }, reader))
    return views
  }

  /**
   * What a graph job's parents hand it when it is claimed (the poll's `parent_results`): the
   * result of each parent that succeeded (null when its handler returned none), by id. A parent
   * that ended otherwise (the job runs under `on_parent_failure: "run"`) is not in it; its error
   * is in `dependencies`. Each result is at most the ack's bound (64 KiB).
   */
  async parentResults(projectId: string, job: Pick<Job, 'depends_on'>): Promise<Record<string, unknown>> {
    const parents = job.depends_on ?? []
    const read = new Map<string, unknown>()
    const unknown = parents.filter((id) => !this.#succeededResults.has(projectId, id))
    for (const view of await this.#parentViews(projectId, unknown)) {
      if (view?.state !== 'succeeded') continue
      read.set(view.job_id, view.result ?? null)
      this.#succeededResults.remember(projectId, view.job_id, view.result ?? null)
    }
    const results: Record<string, unknown> = {}
    for (const id of parents) {
      if (read.has(id)) results[id] = read.get(id)
      else if (this.#succeededResults.has(projectId, id)) results[id] = this.#succeededResults.get(projectId, id)
    }
    return results
  }

  /**
   * A graph job's parents (`GET /jobsvc/v1/jobs/{id}/dependencies`): each with its state, result
   * and error, and whether the job still waits for it; a parent gone from the log (retention)
   * reads `state: null`. Empty for a job without `depends_on` (a continuation names its one
   * parent as `parent_job_id`). Also the job's children (graph jobs and continuations attached to
   * it, in attach order), the first `maxChildrenShown` of them with their states: a fan-out can
   * hold thousands and each costs a read of the log.
   */
  async dependencies(
    projectId: string,
    jobId: string,
  ): Promise<{ job: Job; parents: Array<ParentView & { waiting: boolean }>; children: ChildView[]; childrenTotal: number }> {
    const { job } = await this.load(projectId, jobId)
    const ids = job.depends_on ?? []
    const [views, children] = await Promise.all([
      this.#parentViews(projectId, ids),
      this.#childViews(projectId, job.children.slice(0, maxChildrenShown)),
    ])
    const waiting = new Set(job.waiting_for ?? [])
    const parents = ids.map((id, i) => ({ ...(views[i] ?? { job_id: id, state: null, result: null, error: null }), waiting: waiting.has(id) }))
    return { job, parents, children, childrenTotal: job.children.length }
  }

  /**
   * Each of `childIds` with its state from the log, `parentReadConcurrency` at a time, in order;
   * a child gone from the log (retention) reads `state: null`. A child is attached before its
   * first append, so one whose create never landed reads null too.
   */
  async #childViews(projectId: string, childIds: readonly string[]): Promise<ChildView[]> {
    const views: ChildView[] = childIds.map((id) => ({ job_id: id, state: null }))
    let next = 0
    const reader = async () => {
      for (let i = next++; i < childIds.length; i = next++) {
        const last = await jobHandler.last(this.#deps.store, jobHandler.ref(projectId, childIds[i]!))
        views[i]!.state = last?.message.state?.state ?? null
      }
    }
    await Promise.all(Array.from({ length: Math.min(parentReadConcurrency, childIds.length) }, reader))
    return views
  }

  /** The job's state and its last progress report, read at once: what the progress stream shows. */
  async progressSnapshot(projectId: string, jobId: string): Promise<{ job: Job; report: JobProgress | null }> {
    assertJobAddress(projectId, jobId)
    const [{ job }, report] = await Promise.all([
      this.load(projectId, jobId),
      progressHandler.load(this.#deps.store, progressHandler.ref(projectId, jobId)),
    ])
    return { job, report: report.state }
  }

  /**
   * The job's payload, given its state: one direct get of its first message (its `job_created`),
   * or of the message its `payload_seq` names once a dedup create replaced it.
   */
  async payloadOf(projectId: string, job: Pick<Job, 'id' | 'payload_seq'>): Promise<Record<string, unknown>> {
    const ref = jobHandler.ref(projectId, job.id)
    const store = this.#deps.store
    return payloadIn(job.payload_seq === undefined ? await jobHandler.next(store, ref, 1) : await jobHandler.at(store, ref, job.payload_seq))
  }

  /**
   * A dedup create's newer payload for a waiting job (`job_payload_replaced`); InvalidState once
   * the job runs or has ended. `runAt`: a debounce's new due time for a scheduled job.
   */
  async replacePayload(projectId: string, jobId: string, payload: Record<string, unknown>, runAt?: string): Promise<Written> {
    const data = runAt === undefined ? { payload } : { payload, run_at: runAt }
    const result = await this.#run(projectId, jobId, { type: 'replace_payload', data, meta: this.#meta() })
    return { job: result.state!, seq: result.seq }
  }

  /**
   * One page of the job's events from the log, oldest first, its progress reports among them: at
   * most `limit` events from `from` (the position a previous page ended at; null: the first
   * event). Reads one message per event (a message almost always holds one) on both of the job's
   * subjects at once, plus one to learn whether more follow, so a job with thousands of progress
   * reports costs a page, not its whole history.
   *
   * A `filter` keeps some events: without `job_progressed` among its types only the job's own
   * subject is read; a page looks at most at 1,000 messages (then it ends, short, with a `next`
   * past them), and stops once the log reaches events well after `until`.
   */
  async history(projectId: string, jobId: string, from: HistoryPosition | null, limit: number, filter = everyEvent): Promise<HistoryPage> {
    assertJobAddress(projectId, jobId)
    const ref = jobHandler.ref(projectId, jobId)
    const store = this.#deps.store
    const ns = this.#deps.config.namespace
    const ownOnly = filter.types !== null && !filter.types.has('job_progressed')
    const subjects = ownOnly ? eventSubject(ns, projectId, 'job', jobId) : jobSubjectsFilter(ns, projectId, jobId)
    const since = filter.since === null ? Number.NEGATIVE_INFINITY : Date.parse(filter.since)
    const until = filter.until === null ? Number.POSITIVE_INFINITY : Date.parse(filter.until)
    const keeps = (e: StoredEvent<JobEvent>) => {
      const time = Date.parse(e.time)
      return (filter.types === null || filter.types.has(e.type)) && time >= since && time <= until
    }
    const events: HistoryPage['events'] = []
    let record = await store.nextOn<JobEvent, unknown>(subjects, from?.seq ?? 1)
    if (record === null && (from === null || (await jobHandler.load(store, ref)).state === null)) throw new JobNotFound(jobId)
    for (let examined = 0; record !== null; record = await store.nextOn<JobEvent, unknown>(subjects, record.seq + 1)) {
      if (++examined > maxExaminedPerHistoryPage) return { events, next: { seq: record.seq, index: 0 } }
      // A cursor names the message it stopped in; a message that is not there any more starts the next one whole.
      const all = record.message.events
      const first = from !== null && record.seq === from.seq ? from.index : 0
      for (let i = first; i < all.length; i++) {
        const event = all[i]!
        if (Date.parse(event.time) > until + historyClockMarginMs) return { events, next: null }
        if (!keeps(event)) continue
        if (events.length === limit) return { events, next: { seq: record.seq, index: i } }
        events.push({ seq: record.seq, event, position: { seq: record.seq, index: i === all.length - 1 ? 'all' : i } })
      }
      if (events.length === limit) {
        const after = await store.nextOn<JobEvent, unknown>(subjects, record.seq + 1)
        return { events, next: after === null ? null : { seq: after.seq, index: 0 } }
      }
    }
    return { events, next: null }
  }

  /**
   * A continuation is attached to its parent before it exists, so a parent that succeeds in
   * between still finds it; a crash between the two leaves the parent naming a child that never
   * appeared, which activation skips. A job of a graph (`depends_on`, issue 30) is attached to
   * each of its parents the same way (#attachToParents).
   *
   * `options.jobId`: an id decided by the caller (a recurring occurrence, a graph batch's item);
   * InvalidState if it exists. `options.actor`: the dashboard member creating it. `options.graph`:
   * a graph batch's item (create-jobs.ts, createGraph), created before its parents of the batch:
   * those (`unbornParents`, named in `depends_on`) are waited for without an attach, since each is
   * created later with its `children` (this job among them) on its own `job_created`.
   */
  async create(
    projectId: string,
    input: NewJob,
    options: { jobId?: string; actor?: Actor; graph?: { children: string[]; unbornParents: ReadonlySet<string> } } = {},
  ): Promise<Written> {
    const jobId = options.jobId ?? this.newJobId()
    if (input.depends_on != null) {
      const rule = input.on_parent_failure ?? 'cancel'
      const unborn = options.graph?.unbornParents ?? new Set<string>()
      const attached = await this.#attachToParents(
        projectId,
        jobId,
        input.depends_on.filter((id) => !unborn.has(id)),
        rule,
      )
      const kept = new Set(attached.dependsOn)
      const waiting = new Set(attached.waitingFor)
      const dependsOn = input.depends_on.filter((id) => unborn.has(id) || kept.has(id))
      const waitingFor = input.depends_on.filter((id) => unborn.has(id) || waiting.has(id))
      const created = await this.#run(projectId, jobId, {
        type: 'create_job',
        data: {
          ...input,
          depends_on: dependsOn,
          on_parent_failure: rule,
          job_id: jobId,
          project_id: projectId,
          waits_for_parent: waitingFor.length > 0,
          waiting_for: waitingFor,
          ...(options.graph === undefined ? {} : { children: options.graph.children }),
        },
        meta: this.#meta(options.actor),
      })
      return { job: created.state!, seq: created.seq }
    }
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
      data: {
        ...input,
        job_id: jobId,
        project_id: projectId,
        waits_for_parent: waitsForParent,
        ...(options.graph === undefined ? {} : { children: options.graph.children }),
      },
      meta: this.#meta(options.actor),
    })
    return { job: created.state!, seq: created.seq }
  }

  /**
   * Attaches a graph job to each of its parents (at most `cascadeConcurrency` at once). Resolves
   * to its parents (less those dropped) and those it waits for: the ones that had yet to succeed.
   * A parent that already ended without success refuses the job under `cancel` (409
   * `parent_terminal`, as a continuation's parent does); under `run` it is settled and under
   * `ignore` dropped, neither waited for. An unknown parent is 422 `parent_not_found`. A refusal
   * leaves the parents attached so far naming a job that never appears, which activation skips.
   */
  async #attachToParents(
    projectId: string,
    childId: string,
    parents: readonly string[],
    rule: ParentFailureRule,
  ): Promise<{ dependsOn: string[]; waitingFor: string[] }> {
    for (const parentId of parents) if (!isJobId(parentId)) throw new ParentNotFound(parentId)
    const outcome = new Map<string, 'waiting' | 'succeeded' | 'dropped' | 'settled'>()
    const todo = [...parents]
    const attach = async () => {
      for (let parentId = todo.shift(); parentId !== undefined; parentId = todo.shift()) {
        try {
          // Many jobs may attach to one parent at once (a fan-in's siblings, a batch's items).
          const attached = await this.#retryingConflicts(parentId, () =>
            this.#run(projectId, parentId, { type: 'attach_child', data: { child_job_id: childId }, meta: this.#meta() }),
          )
          outcome.set(parentId, attached.appended || isAttached(attached.state, childId) ? 'waiting' : 'succeeded')
        } catch (err) {
          if (err instanceof JobNotFound) throw new ParentNotFound(parentId)
          if (err instanceof ParentTerminal && rule !== 'cancel') outcome.set(parentId, rule === 'ignore' ? 'dropped' : 'settled')
          else throw err
        }
      }
    }
    await Promise.all(Array.from({ length: Math.min(cascadeConcurrency, parents.length) }, attach))
    return {
      dependsOn: parents.filter((id) => outcome.get(id) !== 'dropped'),
      waitingFor: parents.filter((id) => outcome.get(id) === 'waiting'),
    }
  }

  /**
   * `includeRunning`: a processing job is asked to stop (its worker hears `cancel`) instead of
   * refused; it ends cancelled when its worker acknowledges, or when the grace period runs out
   * (the scheduler's `expireCancel`). `operationId`: the bulk operation asking (domain/job-bulk.ts), named on the event.
   */
  async cancel(projectId: string, jobId: string, actor?: Actor, includeRunning = false, operationId?: string): Promise<Written> {
    const data = { ...(includeRunning ? { include_running: true } : {}), ...(operationId === undefined ? {} : { operation_id: operationId }) }
    const result = await this.#run(projectId, jobId, { type: 'cancel_job', data, meta: this.#meta(actor) })
    await this.cascade(projectId, result.events, result.state)
    return { job: result.state!, seq: result.seq }
  }

  /** The end of a cancel's grace period: a no-op unless `attempt` is still running with its cancel asked for. */
  async expireCancel(projectId: string, jobId: string, attempt: number): Promise<CommandResult<JobEvent, Job>> {
    const result = await this.#run(projectId, jobId, { type: 'expire_cancel', data: { attempt }, meta: this.#meta() })
    await this.cascade(projectId, result.events, result.state)
    return result
  }

  /**
   * The worker hands its attempt back: the job is pending again (scheduled until `runAt`) and the
   * attempt is not spent. A job whose cancel was asked for ends cancelled instead.
   */
  async release(projectId: string, jobId: string, workerId: string, runAt: string | null): Promise<Written> {
    const result = await this.#run(projectId, jobId, { type: 'release_job', data: { worker_id: workerId, run_at: runAt }, meta: this.#meta() })
    await this.cascade(projectId, result.events, result.state)
    return { job: result.state!, seq: result.seq }
  }

  /**
   * A waiting job's claim order offset (InvalidState unless it is pending or scheduled; the same
   * priority again appends nothing). `meta.operationId`: the bulk operation asking, recorded on
   * the event; `meta.actor`: the dashboard member.
   */
  async setPriority(projectId: string, jobId: string, priority: number, meta: { actor?: Actor; operationId?: string } = {}): Promise<Written> {
    const data = meta.operationId === undefined ? { priority } : { priority, operation_id: meta.operationId }
    const result = await this.#run(projectId, jobId, { type: 'set_priority', data, meta: this.#meta(meta.actor) })
    return { job: result.state!, seq: result.seq }
  }

  /** `operationId`: the bulk operation asking (domain/job-bulk.ts), named on the event. */
  async retry(projectId: string, jobId: string, actor?: Actor, operationId?: string): Promise<Written> {
    const data = operationId === undefined ? {} : { operation_id: operationId }
    const result = await this.#run(projectId, jobId, { type: 'retry_job', data, meta: this.#meta(actor) })
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

  /**
   * Liveness only: a KV write, no event, unless the worker reports a new progress value, which is
   * a small message on the job's progress subject (the job's own subject, which claims and acks
   * load, is not touched). The job and its last report are read at once.
   */
  async heartbeat(projectId: string, jobId: string, workerId: string, progress: number | null): Promise<'ok' | 'cancel'> {
    assertJobAddress(projectId, jobId)
    const progressRef = progressHandler.ref(projectId, jobId)
    const [{ job }, report] = await Promise.all([
      this.load(projectId, jobId),
      progress === null ? null : progressHandler.load(this.#deps.store, progressRef),
    ])
    assertHeartbeatAllowed(job, workerId)
    const status = isCancelRequested(job) ? 'cancel' : 'ok'
    const beat: Heartbeat = { worker_id: workerId, attempt: job.attempt, at: this.#deps.now().toISOString() }
    await this.#deps.heartbeats.put(jobId, JSON.stringify(beat))
    if (progress === null || report === null) return status
    const command: JobProgressCommand = {
      type: 'report_progress',
      data: { worker_id: workerId, attempt: job.attempt, job_progress: job.progress, progress },
      meta: this.#meta(),
    }
    // Unchanged on what was just read: nothing to append (a hint's no-op would be read again).
    if (jobProgressDecider.decide(command, report.state).length === 0) return status
    const reported = await progressHandler.decide(this.#deps, progressRef, command, { hint: report })
    // A list that follows waits for the projector to reach the report, as for any other write.
    this.#noteWrite(projectId, reported.seq)
    return status
  }

  /**
   * Which of `jobIds` the worker should stop: those still its own with a cancel asked for, and
   * those already cancelled. One direct get per job; an id of no job of the project is left out.
   */
  async cancelSignals(projectId: string, workerId: string, jobIds: readonly string[]): Promise<string[]> {
    const states = await Promise.all(
      jobIds.map((id) =>
        this.load(projectId, id).then(
          ({ job }) => job,
          (err: unknown) => {
            if (err instanceof JobNotFound) return null
            throw err
          },
        ),
      ),
    )
    return jobIds.filter((_, i) => {
      const job = states[i]
      if (job === null || job === undefined) return false
      return job.state === 'cancelled' || (isCancelRequested(job) && job.worker_id === workerId)
    })
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
  async claim(
    projectId: string,
    jobId: string,
    workerId: string,
    known?: Loaded<Job>,
    trustKnown = false,
    limits: FlowLimits | null = null,
  ): Promise<CommandResult<JobEvent, Job>> {
    const command = (gates?: string[], hold?: ClaimHold): JobCommand => ({
      type: 'claim_job',
      data:
        gates === undefined || gates.length === 0 || hold === undefined
          ? { worker_id: workerId }
          : { worker_id: workerId, gates, hold: hold.hold, attempt: hold.attempt },
      meta: this.#meta(),
    })
    if (limits === null) return this.#run(projectId, jobId, command(), known, trustKnown)
    // Under limits the claim first takes the job's gates, decided on the job as known (its keys,
    // its next attempt): a stale `known` only costs the claim's conflict, and the gates go back.
    const job = known?.state ?? (await this.load(projectId, jobId)).job
    if (!isClaimable(job, this.#meta().now)) throw new InvalidState(`job ${job.id} is ${job.state} and cannot be claimed now`)
    const gates = gatesOf(limits, job)
    if (gates.length === 0) return this.#run(projectId, jobId, command(), known, trustKnown)
    const hold: ClaimHold = { job_id: jobId, attempt: job.attempt + 1, hold: newHoldId() }
    if (expectRoom(this.#gateDeps, projectId, hold, gates)) return this.#claimBesideTake(projectId, job, workerId, gates, hold, known, trustKnown)
    let taken: string[]
    try {
      taken = await takeGates(this.#gateDeps, projectId, hold, gates)
    } catch (err) {
      if (err instanceof LimitRefused) {
        limitRefusals.inc({ reason: err.refusal.reason })
        await this.#refused(projectId, job, err)
      }
      throw err
    }
    limitSlotsTaken.inc()
    try {
      return await this.#run(projectId, jobId, command(taken, hold), known, trustKnown)
    } catch (err) {
      await giveBack(this.#gateDeps, projectId, hold, gates).catch(() => undefined)
      throw err
    }
  }

  /**
   * The claim when this process's last word on the job's gates says they have room: the takes
   * and the job's claim are appended together, one round trip instead of two. No worker sees
   * the job before both stand, so a key never runs more than its limit; when the claim stands
   * and a take does not (another process took the last slot since), the job is handed back
   * (job_released, reason `limit_refused`) and the refusal handled as the sequential claim does.
   */
  async #claimBesideTake(
    projectId: string,
    job: Job,
    workerId: string,
    gates: readonly GateSpec[],
    hold: ClaimHold,
    known: Loaded<Job> | undefined,
    trustKnown: boolean,
  ): Promise<CommandResult<JobEvent, Job>> {
    const claim: JobCommand = {
      type: 'claim_job',
      data: { worker_id: workerId, gates: gates.map(gateNameOf), hold: hold.hold, attempt: hold.attempt },
      meta: this.#meta(),
    }
    const [take, claimed] = await Promise.allSettled([
      takeGates(this.#gateDeps, projectId, hold, gates),
      this.#run(projectId, job.id, claim, known, trustKnown),
    ])
    if (take.status === 'fulfilled' && claimed.status === 'fulfilled') {
      limitSlotsTaken.inc()
      return claimed.value
    }
    if (take.status === 'fulfilled') {
      await giveBack(this.#gateDeps, projectId, hold, gates).catch(() => undefined)
      throw (claimed as PromiseRejectedResult).reason
    }
    // The job was lost too (another claim won it): nothing of this claim stands.
    if (claimed.status === 'rejected') throw claimed.reason
    const released = await this.#run(projectId, job.id, {
      type: 'release_job',
      data: { worker_id: workerId, run_at: null, reason: 'limit_refused' },
      meta: this.#meta(),
    })
    const refused = take.reason
    if (refused instanceof LimitRefused) {
      limitRefusals.inc({ reason: refused.refusal.reason })
      if (released.state !== null) await this.#refused(projectId, released.state, refused)
    }
    throw refused
  }

  /**
   * A claim its gate refused: the waiting job records why (once per wait); under
   * `cancel_newest` a full key cancels the job instead, under `cancel_in_progress` the key's
   * oldest running job is asked to stop, to make room.
   */
  async #refused(projectId: string, job: Job, refused: LimitRefused): Promise<void> {
    const { refusal, gate } = refused
    if (refusal.reason === 'concurrency' && gate.strategy === 'cancel_newest') {
      await this.#run(projectId, job.id, { type: 'cancel_job', data: { reason: 'concurrency_limit' }, meta: this.#meta() }).then(
        (result) => this.cascade(projectId, result.events, result.state),
        () => undefined,
      )
      return
    }
    if (refusal.reason === 'concurrency' && gate.strategy === 'cancel_in_progress' && refusal.oldestHolder !== null) {
      await this.cancel(projectId, refusal.oldestHolder.job_id, undefined, true).catch(() => undefined)
    }
    if (job.limit_waiting === undefined) {
      await this.#run(projectId, job.id, { type: 'note_limit_wait', data: { reason: refusal.reason, key: gate.key }, meta: this.#meta() }).catch(
        () => undefined,
      )
    }
  }

  /**
   * A worker's `rate_limited` ack (issue 29): the job goes back to pending, due in `retryAfterMs`,
   * without spending an attempt, and the gate that counts its starts (its key's, else its
   * queue's) is held shut until then. `limitsOf`: a queue's limits, as the caller knows them.
   */
  async rateLimited(
    projectId: string,
    jobId: string,
    workerId: string,
    retryAfterMs: number,
    limitsOf: (queue: string) => FlowLimits | null,
  ): Promise<{ outcome: AckOutcome; seq: number }> {
    const until = new Date(this.#deps.now().getTime() + retryAfterMs).toISOString()
    const result = await this.#run(projectId, jobId, {
      type: 'release_job',
      data: { worker_id: workerId, run_at: until, reason: 'rate_limited' },
      meta: this.#meta(),
    })
    const job = result.state!
    await this.cascade(projectId, result.events, job)
    const limits = limitsOf(job.queue)
    const hold: GateSpec | null = limits === null ? null : holdGateOf(gatesOf(limits, job))
    if (hold !== null && job.state === 'pending') await holdGate(this.#gateDeps, projectId, hold, jobId, until)
    const outcome: AckOutcome = job.state === 'pending' ? { action: 'retry', retry_at: job.run_at! } : { action: 'done' }
    return { outcome, seq: result.seq }
  }

  /**
   * The expiry sweep's move: a job still waiting past its `expires_at` ends cancelled (reason
   * `expired`), its waiting continuations with it; a no-op when a claim, a cancel or a new wait
   * came first.
   */
  async expire(projectId: string, jobId: string): Promise<CommandResult<JobEvent, Job>> {
    const result = await this.#run(projectId, jobId, { type: 'expire_job', data: {}, meta: this.#meta() })
    await this.cascade(projectId, result.events, result.state)
    return result
  }

  /**
   * The orphan sweep's move: a graph job waiting for `parentId`, which the log does not hold,
   * ends cancelled (reason `parent_never_created`), and so do the jobs of its batch waiting on
   * it; a no-op once it no longer waits for that parent.
   */
  async cancelForNeverCreatedParent(projectId: string, jobId: string, parentId: string): Promise<CommandResult<JobEvent, Job>> {
    const command: JobCommand = { type: 'cancel_by_parent', data: { reason: 'parent_never_created', parent_job_id: parentId }, meta: this.#meta() }
    const result = await this.#run(projectId, jobId, command)
    await this.cascade(projectId, result.events, result.state)
    return result
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
        try {
          const result = await this.#moveChild(projectId, childId, job.id, step)
          // The scheduler's sweep may race this request and move a child first; for activation the
          // child still counts in `children_activated` (a child leaves waiting_for_parent only by
          // activation or cancellation).
          if (result.appended || (step.kind === 'activate' && isActivated(result.state))) moved++
        } catch (err) {
          // The parent's end stands, and the scheduler's sweep moves what could not be moved here.
          this.#deps.log.warn({ err, projectId, parentId: job.id, childId }, 'could not move a child of an ended parent; the sweep will')
        }
      }
    }
    await Promise.all(Array.from({ length: Math.min(cascadeConcurrency, children.length) }, worker))
    return moved
  }

  /**
   * One child's move by one parent's end. A fan-in's parents end together, each of them in this
   * process asking to move the same child: while one decision on the child is in flight, the
   * moves asked meanwhile wait, then go together as one decision and one append (a hundred
   * parents' settlements in a few messages, not a hundred conflicting ones). Decided again on
   * conflicts with other processes (#retryingConflicts).
   */
  #moveChild(projectId: string, childId: string, parentId: string, step: CascadeStep): Promise<CommandResult<JobEvent, Job>> {
    return new Promise((resolve, reject) => {
      const asked: ChildMove = { parentId, step, resolve, reject }
      const waiting = this.#childMoves.get(childId)
      if (waiting !== undefined) return void waiting.push(asked)
      const line = [asked]
      this.#childMoves.set(childId, line)
      void this.#drainChildMoves(projectId, childId, line)
    })
  }

  /** Per child, the moves asked and not yet decided (#moveChild). */
  readonly #childMoves = new Map<string, ChildMove[]>()

  async #drainChildMoves(projectId: string, childId: string, line: ChildMove[]): Promise<void> {
    while (line.length > 0) {
      const moves = line.splice(0)
      try {
        const result = await this.#retryingConflicts(childId, () => this.#run(projectId, childId, this.#moveCommand(moves)))
        for (const m of moves) m.resolve(result)
      } catch (err) {
        for (const m of moves) m.reject(err)
      }
    }
    this.#childMoves.delete(childId)
  }

  /** One parent's move is the continuation's command; several (only a graph job has several parents) settle together. */
  #moveCommand(moves: readonly ChildMove[]): JobCommand {
    const meta = this.#meta()
    // A parent never created cancels the job whatever its rule, which settle_parents would not.
    const neverCreated = moves.find((m) => m.step.kind === 'cancel' && m.step.reason === 'parent_never_created')
    if (moves.length === 1 || neverCreated !== undefined) {
      const { parentId, step } = neverCreated ?? moves[0]!
      return step.kind === 'activate'
        ? { type: 'activate_child', data: { parent_job_id: parentId }, meta }
        : { type: 'cancel_by_parent', data: { reason: step.reason, parent_job_id: parentId }, meta }
    }
    const outcomeOf = (step: CascadeStep): ParentOutcome =>
      step.kind === 'activate' ? 'succeeded' : step.reason === 'parent_cancelled' ? 'cancelled' : 'dead_letter'
    return { type: 'settle_parents', data: { parents: moves.map((m) => ({ parent_job_id: m.parentId, outcome: outcomeOf(m.step) })) }, meta }
  }

  /**
   * A decision on a job that many deciders may want at the same moment: a graph job whose parents
   * end together, a parent that many jobs attach to at once. This process makes its own ones on
   * the job one after another (a fan-in's hundred settlements would otherwise conflict with each
   * other over and over); another process's make the append conflict, and the loser decides
   * again (handleCommand already does, a few times) after a short random pause so that they do
   * not meet again, as often as needed.
   */
  async #retryingConflicts<T>(jobId: string, decide: () => Promise<T>): Promise<T> {
    return this.#inLine(jobId, async () => {
      for (let round = 1; ; round++) {
        try {
          return await decide()
        } catch (err) {
          if (!(err instanceof ConcurrencyConflict) || round >= maxConflictRounds) throw err
          await sleep(Math.random() * Math.min(50, 2 * round))
        }
      }
    })
  }

  /** The contended decisions this process has in flight or waiting, by job: the last one's end. */
  readonly #lines = new Map<string, Promise<unknown>>()

  /** Runs `decide` after this process's earlier contended decisions on the job have ended. */
  async #inLine<T>(jobId: string, decide: () => Promise<T>): Promise<T> {
    const before = this.#lines.get(jobId) ?? Promise.resolve()
    const mine = before.then(decide, decide)
    const end = mine.then(
      () => undefined,
      () => undefined,
    )
    this.#lines.set(jobId, end)
    try {
      return await mine
    } finally {
      if (this.#lines.get(jobId) === end) this.#lines.delete(jobId)
    }
  }

  /** Writes read-model rows for records this process appended (the scheduler's promotion and reaping paths). */
  async writeRows(records: readonly EventRecord[]): Promise<void> {
    await upsertJobRows(this.#deps.sql, records)
  }
}

/** Ids that cannot name a job of the project are not found without a read. */
function assertJobAddress(projectId: string, jobId: string): void {
  if (!isJobId(jobId) || !isSubjectToken(projectId)) throw new JobNotFound(jobId)
}

/** The payload a job's message holds (its `job_created`, or a replacement); `{}` once that message has left the log (retention). */
function payloadIn(record: EventRecord<JobEvent, unknown> | null): Record<string, unknown> {
  return payloadInEvents(record?.message.events ?? []) ?? {}
}

/** Whether the parent holds the child among its children, still to be moved by its end (a repeated attach). */
function isAttached(parent: Job | null, childId: string): boolean {
  return parent !== null && parent.state !== 'succeeded' && parent.children.includes(childId)
}

function isActivated(child: Job | null): boolean {
  return child !== null && child.parent_job_id !== null && !child.waiting_for_parent && child.state !== 'cancelled'
}

export interface Heartbeat {
  worker_id: string
  attempt: number
  at: string
}
