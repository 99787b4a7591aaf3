import type { Job, JobEvent, JobEventType } from '../../../../domain/job.ts'
import type { StoredEvent } from '../../../../streams/event-store.ts'
import { isNatsConnected } from '../../../../streams/connection.ts'
import { followEvents, type FollowedEvent } from '../../../../streams/consume.ts'
import { aggregateKindFilter, eventsStreamName, parseEventSubject } from '../../../../streams/names.ts'
import type { Deps } from '../../../infrastructure/runtime.ts'
import type { JobAppendObserver } from '../job-service.ts'
import { createdPayloadOf, provisionalStateBytes, viewOf, type HeldCandidate, type Lane, type Lanes } from './lanes.ts'

/** Event types after which a job may be pending: the only messages decoded. */
const mayMakeClaimable: ReadonlySet<string> = new Set<JobEventType>([
  'job_created',
  'job_promoted',
  'job_activated',
  'job_attempt_failed',
  'job_retried',
  'job_released',
  // A pending job's new rank: held again at its new place in the lane.
  'job_priority_changed',
  // A pending job's new payload (a dedup create's): held again with it.
  'job_payload_replaced',
  // A pending job refused a gate (issue 29) waits on: held again at its new sequence.
  'job_limit_waiting',
])
/** Event types a running job's worker must hear of at once (FollowerHooks.signalled). */
const signalsWorker: ReadonlySet<string> = new Set<JobEventType>(['job_cancel_requested', 'job_cancelled'])
/** Moves a held job to a new sequence (and state) without changing whether it is claimable. */
const keepsClaimability: JobEventType = 'job_child_attached'

/** The event types of a followed message, from its header. */
function types(event: FollowedEvent): string[] {
  return event.eventTypes.split(',')
}

export interface FollowerHooks<X> {
  /** Candidates newly held in a lane, to offer to its waiting polls. */
  offer(lane: Lane<X>, candidates: readonly HeldCandidate<X>[]): void
  /** After each message followed, at `position`. */
  followed(position: number): void
  /** A message that asks the job's worker to stop (a cancel asked for, or the job cancelled), by its subject and header alone. */
  signalled(jobId: string): void
  /**
   * A job message whose events end a running attempt (issue 29), by its header alone; `decode`
   * reads its state where the listener needs it (the flow gates the attempt held).
   */
  attemptEnded(projectId: string, decode: () => Job | null): void
}

/** The events that end a running attempt, and so free the flow gates it held. */
const endsAttempt = new Set(['job_succeeded', 'job_attempt_failed', 'job_dead_lettered', 'job_released', 'job_cancelled'])

/**
 * Follows the job events of the log into the lanes, with an ordered consumer from the sequence the
 * process started at, reading only the `Jobsvc-Event-Type` header of each message and decoding
 * only those after which a job may be pending; a claim, an end or a cancellation drops the job by
 * its subject alone. The process's own appends (creates, claims, retries) enter at once from the
 * append's answer (`observer`).
 */
export class LogFollower<X> {
  readonly #deps: Deps
  readonly #lanes: Lanes<X>
  readonly #hooks: FollowerHooks<X>
  /**
   * New jobs this process is appending, with the log's copy of their message when it arrives
   * before the append's answer (it usually does), then 'answered': the answer's state is used
   * instead of decoding the copy, and the copy only if the answer never comes.
   */
  readonly #creating = new Map<string, FollowedEvent | null | 'answered'>()
  /** The last sequence followed: every job event up to it has been applied to the lanes that existed then. */
  #position = 0
  #live = false
  readonly #stopping = new AbortController()
  #following: Promise<void> | undefined

  constructor(deps: Deps, lanes: Lanes<X>, hooks: FollowerHooks<X>) {
    this.#deps = deps
    this.#lanes = lanes
    this.#hooks = hooks
  }

  /** Follows the log from its current end. */
  async start(): Promise<void> {
    const ns = this.#deps.config.namespace
    this.#position = await this.#deps.store.lastSequence()
    this.#live = true
    this.#following = followEvents(
      this.#deps.nats,
      {
        stream: eventsStreamName(ns),
        filterSubject: aggregateKindFilter(ns, 'job'),
        startSeq: this.#position + 1,
        onLive: (live) => {
          this.#live = live
          if (!live) this.#deps.log.warn('ready index: not following the log for now; polls also ask the read model')
        },
      },
      (event) => this.#onFollowed(event),
      this.#stopping.signal,
      (err) => this.#deps.log.warn({ err }, 'ready index: following the log failed; resuming where it stopped'),
    )
  }

  /** Stops following; resolves when the consumer has stopped. */
  stop(): Promise<void> | undefined {
    this.#stopping.abort()
    return this.#following
  }

  /** The last stream sequence followed. */
  get position(): number {
    return this.#position
  }

  /** Whether the follower is running (no stall known). */
  get isLive(): boolean {
    return this.#live && isNatsConnected(this.#deps.nats.nc)
  }

  /** This process's own appends, as soon as they are answered (JobService.observer). */
  readonly observer: JobAppendObserver = {
    creating: (jobId) => {
      this.#creating.set(jobId, null)
    },
    appended: (record) => {
      const { project_id: projectId, aggregate_id: jobId } = record.message
      const early = this.#creating.get(jobId)
      if (early !== undefined) this.#creating.set(jobId, 'answered')
      if (this.#lanes.held(jobId) === undefined && !this.#lanes.hasProject(projectId)) return
      if (record.seq <= this.#lanes.floor(jobId)) return
      const size = early !== null && early !== undefined && early !== 'answered' && early.seq === record.seq ? early.size : provisionalStateBytes
      this.#apply(projectId, jobId, record.seq, record.message.state, record.message.events, size)
    },
    created: (jobId) => {
      const early = this.#creating.get(jobId)
      this.#creating.delete(jobId)
      if (early === null || early === undefined || early === 'answered') return
      // The log has the job but the append's answer never came (a timeout, a lost connection):
      // it is taken from the log's copy.
      const where = parseEventSubject(this.#deps.config.namespace, early.subject)
      if (where !== null) this.#onJobMessage(where.projectId, jobId, early)
    },
  }

  #onFollowed(event: FollowedEvent): void {
    this.#position = event.seq
    const where = parseEventSubject(this.#deps.config.namespace, event.subject)
    if (where !== null) {
      const eventTypes = types(event)
      if (eventTypes.some((t) => signalsWorker.has(t))) this.#hooks.signalled(where.aggregateId)
      if (eventTypes.some((t) => endsAttempt.has(t))) this.#hooks.attemptEnded(where.projectId, () => event.decode<JobEvent, Job | null>().state)
      this.#onJobMessage(where.projectId, where.aggregateId, event)
    }
    this.#hooks.followed(this.#position)
  }

  #onJobMessage(projectId: string, jobId: string, event: FollowedEvent): void {
    const held = this.#lanes.held(jobId)
    if (held === undefined && !this.#lanes.hasProject(projectId)) return
    if (held === undefined && this.#creating.get(jobId) === null) return void this.#creating.set(jobId, event)
    if (held !== undefined && held.seq === event.seq) {
      // This process's own append, delivered back: now its size is known.
      if (held.job !== null) {
        // A create's message (or a payload replacement's) holds its payload; a later message's size comes on top of the payload carried.
        const isCreate = types(event).some((t) => t === 'job_created' || t === 'job_payload_replaced')
        const payload = held.heldPayload
        const bytes = isCreate || payload === null ? event.size : event.size + payload.bytes
        this.#lanes.resize(held, bytes)
        if (isCreate && payload !== null) held.heldPayload = { ...payload, bytes }
      }
      return
    }
    if (event.seq <= this.#lanes.floor(jobId)) return
    const eventTypes = types(event)
    if (eventTypes.some((t) => mayMakeClaimable.has(t)) || (held !== undefined && eventTypes.includes(keepsClaimability))) {
      const message = event.decode<JobEvent, Job | null>()
      this.#apply(projectId, jobId, event.seq, message.state, message.events, event.size)
    } else {
      this.#lanes.remove(projectId, jobId, event.seq)
    }
  }

  /**
   * Takes the job's message at `seq`: holds the job if it is pending, with the payload its
   * `job_created` holds or the one held for it already; removes it otherwise.
   */
  #apply(projectId: string, jobId: string, seq: number, job: Job | null, events: readonly StoredEvent<JobEvent>[], size: number): void {
    if (job === null || job.state !== 'pending') return this.#lanes.remove(projectId, jobId, seq)
    const lane = this.#lanes.laneOf(projectId, job.queue)
    // A queue no poll of this process asked for: its warm-up will read the job from the read model.
    if (lane === undefined) return
    const created = createdPayloadOf(events, size)
    const carried = created === null ? (this.#lanes.held(jobId)?.heldPayload ?? null) : null
    const c = this.#lanes.hold(lane, viewOf(job, created ?? carried), seq, size + (carried?.bytes ?? 0))
    if (c !== null) this.#hooks.offer(lane, [c])
  }
}
