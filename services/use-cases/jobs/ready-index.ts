import type { Job, JobEvent, JobEventType } from '../../../domain/job.ts'
import type { StoredEvent } from '../../../streams/event-store.ts'
import { readPendingQueue } from '../../../projections/job-list.ts'
import { isNatsConnected } from '../../../streams/connection.ts'
import { followEvents, type FollowedEvent } from '../../../streams/consume.ts'
import { aggregateKindFilter, eventsStreamName, parseEventSubject } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { JobAppendObserver } from './job-service.ts'

export interface ReadyIndexLimits {
  /** Candidates one project may hold, all its queues together. */
  jobsPerProject: number
  /** Candidates of all projects together. */
  jobs: number
  /** Job states and payloads held in all, in encoded bytes; past it candidates are held without them. */
  stateBytes: number
}

/** How far the read models are: a queue is warmed from a snapshot taken at or past its gap. */
export interface ProjectionProgress {
  readonly reached: number
  watch(listener: (seq: number) => void): () => void
}

/** A job the index proposes to a poll. Only the append at `seq` decides whether the poll gets it. */
export interface Candidate {
  readonly jobId: string
  readonly projectId: string
  /** The stream sequence of the job's last message: the claim's expected sequence. */
  readonly seq: number
  /** The job at `seq`, or null when it is held without its state (past the state budget): the claim loads it. */
  readonly job: Job | null
  /**
   * The job's payload, when the index saw its `job_created` (or read it from the read model)
   * within the state budget; null: the claim's answer reads it from the log.
   */
  readonly payload: Record<string, unknown> | null
}

export type Settlement = 'claimed' | 'lost' | 'unknown'

/** One long poll's view of the index, from its first claim to its answer. */
export interface PollSession {
  /**
   * Takes up to `max` claimable candidates of the poll's queues and job types, earliest due first,
   * out of every other poll's reach until `settle`d. Also counts as the poll having seen what it
   * was woken for.
   */
  take(max: number): Candidate[]
  /**
   * After the claim of a taken candidate: `claimed` (this process appended the claim), `lost` (the
   * append conflicted or was refused: the job moved on, and the log will say where) or `unknown`
   * (the append failed: the candidate goes back).
   */
  settle(candidate: Candidate, how: Settlement): void
  /**
   * True when the index holds every claimable job of the poll's queues, so a take that finds
   * fewer than wanted means there are no more: false while a queue is cold, past a bound, or the
   * index has stopped following the log. Polls ask the read model only when this is false.
   */
  isComplete(): boolean
  /** Resolves when a job becomes claimable for this poll (or did since its last take), after `ms`, or on abort. */
  wait(ms: number, signal: AbortSignal): Promise<'woken' | 'timeout' | 'aborted'>
  close(): void
}

/** Event types after which a job may be pending: the only messages decoded. */
const mayMakeClaimable: ReadonlySet<string> = new Set<JobEventType>([
  'job_created',
  'job_promoted',
  'job_activated',
  'job_attempt_failed',
  'job_retried',
])
/** Moves a held job to a new sequence (and state) without changing whether it is claimable. */
const keepsClaimability: JobEventType = 'job_child_attached'

/**
 * What a candidate's state is counted as until the log delivers its message and tells its size:
 * a job this process appended, before the log delivers it back.
 */
const provisionalStateBytes = 1024
/** Removed jobs remembered at most (see #tombstones). */
const maxTombstones = 100_000
/** A queue no poll has asked for in this long is dropped from the index (it is warmed again on its next poll). */
const laneIdleMs = 120_000
/** A queue is read from Postgres at most this often while it stays incomplete. */
const warmIntervalMs = 250
/** Queues read from Postgres at once: each read holds a pooled connection. */
const warmsAtOnce = 2
/** Longest timer Node keeps exact (about 24.8 days); a later due time re-arms when it fires. */
const maxTimerMs = 2 ** 31 - 1
/**
 * Queues of one project the index follows at once. A poll names up to 50, and each new one costs
 * a read of the read model: past this, a project's other queues are not indexed and their polls
 * use the read-model query (through the claim line), as before the index.
 */
export const maxLanesPerProject = 1_000

/** What the index needs of a job to hold it. */
interface JobView {
  id: string
  jobType: string
  /** available_at, in ms since the epoch. */
  dueAt: number
  job: Job | null
  payload: Payload | null
}

/** A payload as the index holds it: the value, and what it counts against the state budget. */
interface Payload {
  value: Record<string, unknown>
  bytes: number
}

function viewOf(job: Job, payload: Payload | null): JobView {
  return { id: job.id, jobType: job.job_type, dueAt: Date.parse(job.run_at ?? job.created_at), job, payload }
}

/** The payload a message's `job_created` holds (counted as the message's `bytes`, most of which it is), or null. */
function createdPayloadOf(events: readonly StoredEvent<JobEvent>[], bytes: number): Payload | null {
  const created = events.find((e) => e.type === 'job_created')
  return created?.type === 'job_created' ? { value: created.data.payload, bytes } : null
}

interface HeldCandidate extends Candidate {
  readonly lane: Lane
  readonly jobType: string
  /** available_at: when the job may be claimed, in ms since the epoch. */
  readonly dueAt: number
  bytes: number
  /** The payload held with the job (its bytes are part of `bytes`), carried to the job's later messages. */
  heldPayload: Payload | null
  taken: boolean
}

interface ProjectLanes {
  readonly lanes: Map<string, Lane>
  /** Candidates held for the project, taken ones included. */
  count: number
}

/** One project and queue. */
interface Lane {
  readonly projectId: string
  readonly queue: string
  readonly project: ProjectLanes
  /** Candidates not taken, by (dueAt, jobId): the read model's claim order. */
  readonly queued: HeldCandidate[]
  /**
   * null: complete, every job of the queue claimable by the last message followed is here.
   * Otherwise the sequence up to which pending jobs may be missing (not followed yet, or dropped
   * past a bound): a snapshot of the read model at or past it makes the lane complete.
   */
  gapSeq: number | null
  warming: boolean
  /** Date.now() of the last read from Postgres; 0: none yet. */
  lastWarmAt: number
  /** A read put off by warmIntervalMs, to run when it ends. */
  warmLater: NodeJS.Timeout | null
  readonly sessions: Set<Session>
  /** Date.now() when the last poll left. */
  idleSince: number
  timer: NodeJS.Timeout | null
  timerAt: number
  /** Candidates due by this instant (ms) have been offered to the waiting polls. */
  offeredThrough: number
}

interface Session {
  readonly lanes: Lane[]
  readonly jobTypes: ReadonlySet<string> | null
  readonly capacity: number
  /** Candidates offered to this poll since its last take. */
  offered: number
  fired: boolean
  wake: (() => void) | undefined
}

function isBefore(a: HeldCandidate, b: HeldCandidate): boolean {
  return a.dueAt < b.dueAt || (a.dueAt === b.dueAt && a.jobId < b.jobId)
}

/** Index of the first candidate of `list` that does not come before `c`. */
function positionOf(list: readonly HeldCandidate[], c: HeldCandidate): number {
  let lo = 0
  let hi = list.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (isBefore(list[mid]!, c)) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** Index of the first candidate of `list` due after `at`. */
function firstDueAfter(list: readonly HeldCandidate[], at: number): number {
  let lo = 0
  let hi = list.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (list[mid]!.dueAt <= at) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** The event types of a followed message, from its header. */
function types(event: FollowedEvent): string[] {
  return event.eventTypes.split(',')
}

function accepts(session: Session, jobType: string): boolean {
  return session.jobTypes === null || session.jobTypes.has(jobType)
}

/**
 * The claimable jobs of this API process's polls, found from the log rather than the read
 * model, so a job can be claimed as soon as its `job_created` is stored, with no Postgres
 * round trip and no wait for the projector.
 *
 * Per project and queue that some poll of this process asked for (a lane), the index holds the
 * pending jobs ordered by due time (`available_at`), each with its last stream sequence and, within
 * a byte budget, its state: what a claim's append needs. It follows the job events of the log
 * with an ordered consumer from the sequence the process started at, reading only the
 * `Jobsvc-Event-Type` header of each message and decoding only those after which a job may be
 * pending; a claim, an end or a cancellation drops the job by its subject alone. The process's own
 * appends (creates, claims, retries) enter at once from the append's answer.
 *
 * A lane starts cold: jobs pending before it was followed are not in it. It is warmed from the
 * read model (the queue's pending rows and the job list's checkpoint, read in one snapshot) once
 * the projector has passed the sequence the lane started from; until then, and whenever a bound
 * made it drop a job, the lane is incomplete and polls also run the read-model query (the claim
 * line's `FOR UPDATE SKIP LOCKED`). Correctness never rests on the index: it only proposes, the
 * claim's append at the proposed sequence decides, and a proposal that conflicts is dropped; the
 * log delivers the job's newer state anyway.
 *
 * Waiting polls are woken by the index itself, one poll per job that became claimable (created
 * pending, retried, released by the reaper, activated, promoted, or a retry's backoff ending: a
 * timer per lane at the earliest future due time), never all of them.
 */
export class ReadyIndex {
  readonly #deps: Deps
  readonly #progress: ProjectionProgress
  readonly #limits: ReadyIndexLimits
  readonly #projects = new Map<string, ProjectLanes>()
  readonly #jobs = new Map<string, HeldCandidate>()
  /**
   * Jobs removed from the index, by the sequence that removed them, so that an older message of
   * theirs (this process's own append answered before the log delivered an earlier one, or a row
   * of a lagging read model) cannot bring them back. Needed only until both the follower and the
   * projector have passed that sequence.
   */
  readonly #tombstones = new Map<string, number>()
  readonly #tombstoneOrder: Array<{ jobId: string; seq: number }> = []
  #tombstoneHead = 0
  readonly #incomplete = new Set<Lane>()
  /**
   * New jobs this process is appending, with the log's copy of their message when it arrives
   * before the append's answer (it usually does), then 'answered': the answer's state is used
   * instead of decoding the copy, and the copy only if the answer never comes.
   */
  readonly #creating = new Map<string, FollowedEvent | null | 'answered'>()
  #count = 0
  #stateBytes = 0
  /** The last sequence followed: every job event up to it has been applied to the lanes that existed then. */
  #position = 0
  #live = false
  #warmsRunning = 0
  readonly #stopping = new AbortController()
  #following: Promise<void> | undefined
  #unwatch: (() => void) | undefined
  #sweeper: NodeJS.Timeout | undefined

  constructor(deps: Deps, progress: ProjectionProgress, limits: ReadyIndexLimits) {
    this.#deps = deps
    this.#progress = progress
    this.#limits = limits
  }

  /** Follows the log from its current end: lanes opened later are cold until warmed. */
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
    this.#unwatch = this.#progress.watch((seq) => this.#onProjected(seq))
    this.#sweeper = setInterval(() => this.#dropIdleLanes(), laneIdleMs / 4)
    this.#sweeper.unref()
  }

  async stop(): Promise<void> {
    this.#stopping.abort()
    this.#unwatch?.()
    clearInterval(this.#sweeper)
    for (const project of this.#projects.values()) {
      for (const lane of project.lanes.values()) {
        this.#clearTimer(lane)
        if (lane.warmLater !== null) clearTimeout(lane.warmLater)
      }
    }
    await this.#following
  }

  /** The last stream sequence the index has followed. */
  get position(): number {
    return this.#position
  }

  /** Whether the follower is running (no stall known). */
  get isLive(): boolean {
    return this.#live && isNatsConnected(this.#deps.nats.nc)
  }

  /** Candidates held, all projects together (for tests and diagnostics). */
  get size(): number {
    return this.#count
  }

  /** Whether the index holds every claimable job of these queues of the project. */
  isComplete(projectId: string, queues: readonly string[]): boolean {
    const lanes = this.#projects.get(projectId)?.lanes
    return this.isLive && queues.every((q) => lanes?.get(q)?.gapSeq === null)
  }

  /**
   * True when the index knows the job has moved past `seq` (a row of the read model at `seq` is
   * stale): the read-model query skips such rows instead of paying a failed append for each.
   */
  isStale(jobId: string, seq: number): boolean {
    return this.#floor(jobId) > seq
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
      if (!this.#jobs.has(jobId) && !this.#projects.has(projectId)) return
      if (record.seq <= this.#floor(jobId)) return
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

  /** A long poll's session on the project's queues; tracking them from now on if none was. */
  open(projectId: string, queues: readonly string[], jobTypes: readonly string[] | null, capacity: number): PollSession {
    let project = this.#projects.get(projectId)
    if (project === undefined) this.#projects.set(projectId, (project = { lanes: new Map(), count: 0 }))
    const lanes = queues.map((queue) => project.lanes.get(queue) ?? this.#newLane(projectId, queue, project))
    const session: Session = { lanes, jobTypes: jobTypes === null ? null : new Set(jobTypes), capacity, offered: 0, fired: false, wake: undefined }
    for (const lane of lanes) {
      lane.sessions.add(session)
      if (lane.gapSeq !== null) this.#warm(lane)
    }
    return {
      take: (max) => this.#take(session, max),
      settle: (candidate, how) => this.#settle(candidate as HeldCandidate, how),
      isComplete: () => this.isLive && lanes.every((l) => l.gapSeq === null),
      wait: (ms, signal) => this.#wait(session, ms, signal),
      close: () => this.#close(session),
    }
  }

  /** A lane for the queue: followed from now on, or, past maxLanesPerProject, one that never is (always incomplete). */
  #newLane(projectId: string, queue: string, project: ProjectLanes): Lane {
    const followed = project.lanes.size < maxLanesPerProject
    const lane: Lane = {
      projectId,
      queue,
      project,
      queued: [],
      // Nothing of this queue has been kept so far: jobs up to the last message followed may be missing.
      gapSeq: followed ? this.#position : Number.POSITIVE_INFINITY,
      warming: false,
      lastWarmAt: 0,
      warmLater: null,
      sessions: new Set(),
      idleSince: Date.now(),
      timer: null,
      timerAt: 0,
      offeredThrough: this.#deps.now().getTime(),
    }
    if (followed) {
      project.lanes.set(queue, lane)
      this.#incomplete.add(lane)
    }
    return lane
  }

  /** The highest sequence known for the job: its candidate's, or the one that removed it. */
  #floor(jobId: string): number {
    return this.#jobs.get(jobId)?.seq ?? this.#tombstones.get(jobId) ?? 0
  }

  #onFollowed(event: FollowedEvent): void {
    this.#position = event.seq
    const where = parseEventSubject(this.#deps.config.namespace, event.subject)
    if (where !== null) this.#onJobMessage(where.projectId, where.aggregateId, event)
    this.#pruneTombstones()
  }

  #onJobMessage(projectId: string, jobId: string, event: FollowedEvent): void {
    const held = this.#jobs.get(jobId)
    if (held === undefined && !this.#projects.has(projectId)) return
    if (held === undefined && this.#creating.get(jobId) === null) return void this.#creating.set(jobId, event)
    if (held !== undefined && held.seq === event.seq) {
      // This process's own append, delivered back: now its size is known.
      if (held.job !== null) {
        // A create's message holds its payload; a later message's size comes on top of the payload carried.
        const isCreate = types(event).includes('job_created')
        const payload = held.heldPayload
        const bytes = isCreate || payload === null ? event.size : event.size + payload.bytes
        this.#stateBytes += bytes - held.bytes
        held.bytes = bytes
        if (isCreate && payload !== null) held.heldPayload = { ...payload, bytes }
      }
      return
    }
    if (event.seq <= this.#floor(jobId)) return
    const eventTypes = types(event)
    if (eventTypes.some((t) => mayMakeClaimable.has(t)) || (held !== undefined && eventTypes.includes(keepsClaimability))) {
      const message = event.decode<JobEvent, Job | null>()
      this.#apply(projectId, jobId, event.seq, message.state, message.events, event.size)
    } else {
      this.#remove(projectId, jobId, event.seq)
    }
  }

  /**
   * Takes the job's message at `seq`: holds the job if it is pending, with the payload its
   * `job_created` holds or the one held for it already; removes it otherwise.
   */
  #apply(projectId: string, jobId: string, seq: number, job: Job | null, events: readonly StoredEvent<JobEvent>[], size: number): void {
    if (job === null || job.state !== 'pending') return this.#remove(projectId, jobId, seq)
    const lane = this.#projects.get(projectId)?.lanes.get(job.queue)
    // A queue no poll of this process asked for: its warm-up will read the job from the read model.
    if (lane === undefined) return
    const created = createdPayloadOf(events, size)
    const carried = created === null ? (this.#jobs.get(jobId)?.heldPayload ?? null) : null
    const c = this.#hold(lane, viewOf(job, created ?? carried), seq, size + (carried?.bytes ?? 0))
    if (c !== null) this.#offer(lane, [c])
  }

  /**
   * Holds the job as the lane's candidate at `seq`, replacing an older one; null when a bound
   * leaves no room (the lane then cannot vouch for its queue up to `seq`).
   */
  #hold(lane: Lane, view: JobView, seq: number, bytes: number): HeldCandidate | null {
    const held = this.#jobs.get(view.id)
    if (held !== undefined) this.#detach(held)
    if (lane.project.count >= this.#limits.jobsPerProject || this.#count >= this.#limits.jobs) {
      if (lane.gapSeq === null) this.#incomplete.add(lane)
      lane.gapSeq = Math.max(lane.gapSeq ?? 0, seq)
      return null
    }
    const withState = view.job !== null && this.#stateBytes + bytes <= this.#limits.stateBytes
    const heldPayload = withState ? view.payload : null
    const c: HeldCandidate = {
      jobId: view.id,
      projectId: lane.projectId,
      seq,
      job: withState ? view.job : null,
      payload: heldPayload?.value ?? null,
      lane,
      jobType: view.jobType,
      dueAt: view.dueAt,
      bytes: withState ? bytes : 0,
      heldPayload,
      taken: false,
    }
    this.#jobs.set(c.jobId, c)
    lane.project.count++
    this.#count++
    this.#stateBytes += c.bytes
    lane.queued.splice(positionOf(lane.queued, c), 0, c)
    return c
  }

  /** Forgets a candidate (a newer message replaced it, or it left the lane). */
  #detach(c: HeldCandidate): void {
    if (this.#jobs.get(c.jobId) !== c) return
    this.#jobs.delete(c.jobId)
    c.lane.project.count--
    this.#count--
    this.#stateBytes -= c.bytes
    if (!c.taken) {
      const at = positionOf(c.lane.queued, c)
      if (c.lane.queued[at] === c) c.lane.queued.splice(at, 1)
    }
    const lane = c.lane
    if (lane.gapSeq !== null && this.#hasRoomFor(lane)) this.#warm(lane)
  }

  /** Room for a lane that dropped jobs to be read again: half its project's bound, and the total not reached. */
  #hasRoomFor(lane: Lane): boolean {
    return lane.project.count < this.#limits.jobsPerProject / 2 && this.#count < this.#limits.jobs
  }

  #remove(projectId: string, jobId: string, seq: number): void {
    const held = this.#jobs.get(jobId)
    if (held !== undefined) this.#detach(held)
    if (held !== undefined || this.#projects.has(projectId)) this.#tombstone(jobId, seq)
  }

  #tombstone(jobId: string, seq: number): void {
    if ((this.#tombstones.get(jobId) ?? 0) >= seq) return
    this.#tombstones.set(jobId, seq)
    this.#tombstoneOrder.push({ jobId, seq })
    if (this.#tombstones.size > maxTombstones) this.#pruneTombstones(Number.POSITIVE_INFINITY, this.#tombstones.size - maxTombstones)
  }

  /**
   * Forgets removals both the follower and the read model have passed. Not while a warm-up reads
   * the read model: its rows may predate a removal the projector has since committed.
   */
  #pruneTombstones(upTo = Math.min(this.#position, this.#progress.reached), atLeast = 0): void {
    if (this.#warmsRunning > 0 && atLeast === 0) return
    const order = this.#tombstoneOrder
    let dropped = 0
    while (this.#tombstoneHead < order.length && (order[this.#tombstoneHead]!.seq <= upTo || dropped < atLeast)) {
      const { jobId, seq } = order[this.#tombstoneHead++]!
      if (this.#tombstones.get(jobId) === seq) {
        this.#tombstones.delete(jobId)
        dropped++
      }
    }
    if (this.#tombstoneHead > 1024 && this.#tombstoneHead * 2 > order.length) {
      order.splice(0, this.#tombstoneHead)
      this.#tombstoneHead = 0
    }
  }

  #take(session: Session, max: number): Candidate[] {
    session.offered = 0
    session.fired = false
    const now = this.#deps.now().getTime()
    const picked: HeldCandidate[] = []
    /** Per lane, how far its scan went: whatever is taken from it lies before that. */
    const scanned = new Map<Lane, number>()
    for (const lane of session.lanes) {
      let n = 0
      let i = 0
      for (; i < lane.queued.length && n < max; i++) {
        const c = lane.queued[i]!
        if (c.dueAt > now) break
        if (!accepts(session, c.jobType)) continue
        picked.push(c)
        n++
      }
      if (n > 0) scanned.set(lane, i)
    }
    if (session.lanes.length > 1) picked.sort((a, b) => (isBefore(a, b) ? -1 : 1))
    picked.length = Math.min(picked.length, max)
    for (const c of picked) c.taken = true
    for (const [lane, end] of scanned) lane.queued.splice(0, end, ...lane.queued.slice(0, end).filter((c) => !c.taken))
    // The clock may have moved since the lanes' timers were set (and tests shift it).
    for (const lane of session.lanes) this.#arm(lane, now)
    return picked
  }

  #settle(c: HeldCandidate, how: Settlement): void {
    if (this.#jobs.get(c.jobId) !== c) return
    if (how === 'claimed') return this.#detach(c)
    if (how === 'lost') {
      this.#detach(c)
      // The job has moved past `seq`: nothing at or before it can make it claimable again.
      this.#tombstone(c.jobId, c.seq)
      return
    }
    c.taken = false
    c.lane.queued.splice(positionOf(c.lane.queued, c), 0, c)
    this.#offer(c.lane, [c])
  }

  /** Offers newly held candidates: those due now to waiting polls, the others to the lane's timer. */
  #offer(lane: Lane, candidates: readonly HeldCandidate[]): void {
    if (lane.sessions.size === 0 || candidates.length === 0) return
    const now = this.#deps.now().getTime()
    this.#wakeFor(
      lane,
      candidates.filter((c) => c.dueAt <= now),
    )
    if (candidates.some((c) => c.dueAt > now)) this.#arm(lane, now)
  }

  /**
   * Wakes, for each candidate, the first poll (in the order they came) that takes its job type
   * and has room left for what it was already offered: a job wakes one poll, not the herd.
   */
  #wakeFor(lane: Lane, candidates: readonly HeldCandidate[]): void {
    for (const c of candidates) {
      for (const s of lane.sessions) {
        if (s.offered >= s.capacity || !accepts(s, c.jobType)) continue
        s.offered++
        s.fired = true
        s.wake?.()
        break
      }
    }
  }

  /** Sets the lane's timer to its earliest candidate due after `now`, while polls wait on it. */
  #arm(lane: Lane, now: number): void {
    const next = lane.sessions.size === 0 ? undefined : lane.queued[firstDueAfter(lane.queued, now)]
    if (next === undefined) return this.#clearTimer(lane)
    if (lane.timer !== null && lane.timerAt <= next.dueAt && lane.timerAt > now) return
    this.#clearTimer(lane)
    lane.timerAt = next.dueAt
    lane.timer = setTimeout(() => this.#onDue(lane), Math.min(next.dueAt - now, maxTimerMs))
    lane.timer.unref()
  }

  #clearTimer(lane: Lane): void {
    if (lane.timer !== null) clearTimeout(lane.timer)
    lane.timer = null
  }

  #onDue(lane: Lane): void {
    lane.timer = null
    const now = this.#deps.now().getTime()
    const from = firstDueAfter(lane.queued, lane.offeredThrough)
    const to = firstDueAfter(lane.queued, now)
    lane.offeredThrough = Math.max(lane.offeredThrough, now)
    this.#wakeFor(lane, lane.queued.slice(from, to))
    this.#arm(lane, now)
  }

  #wait(session: Session, ms: number, signal: AbortSignal): Promise<'woken' | 'timeout' | 'aborted'> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve('aborted')
      if (session.fired) {
        session.fired = false
        return resolve('woken')
      }
      const done = (how: 'woken' | 'timeout' | 'aborted') => {
        clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        session.wake = undefined
        session.fired = false
        resolve(how)
      }
      const onAbort = () => done('aborted')
      const timer = setTimeout(() => done('timeout'), ms)
      signal.addEventListener('abort', onAbort, { once: true })
      session.wake = () => done('woken')
    })
  }

  #close(session: Session): void {
    session.wake = undefined
    for (const lane of session.lanes) {
      lane.sessions.delete(session)
      if (lane.sessions.size === 0) {
        lane.idleSince = Date.now()
        this.#clearTimer(lane)
      }
    }
    if (session.offered === 0) return
    // Woken for jobs it never took (it answered or gave up first): they go to the next polls.
    const now = this.#deps.now().getTime()
    for (const lane of session.lanes) this.#wakeFor(lane, lane.queued.slice(0, Math.min(firstDueAfter(lane.queued, now), session.offered)))
  }

  #onProjected(seq: number): void {
    for (const lane of this.#incomplete) {
      if (lane.gapSeq !== null && lane.gapSeq <= seq) this.#warm(lane)
    }
  }

  /** Reads the lane's queue from the read model, unless a read is running or ran a moment ago. */
  #warm(lane: Lane): void {
    if (lane.warming || lane.gapSeq === null || lane.warmLater !== null || lane.project.lanes.get(lane.queue) !== lane) return
    if (lane.lastWarmAt !== 0) {
      // A read before the projector passed the gap cannot complete the lane; the projector's next
      // announcement at or past it triggers the read (#onProjected). The first read goes ahead:
      // the projector may have passed the gap long ago and announce nothing until the log moves.
      if (this.#progress.reached < lane.gapSeq) return
      // A lane that dropped jobs past a bound is read again only once there is room for them.
      if (!this.#hasRoomFor(lane)) return
      const sinceLast = Date.now() - lane.lastWarmAt
      if (sinceLast < warmIntervalMs) {
        // Put off, not dropped: the announcement that asked for it may be the last for a while.
        lane.warmLater = setTimeout(() => {
          lane.warmLater = null
          this.#warm(lane)
        }, warmIntervalMs - sinceLast)
        lane.warmLater.unref()
        return
      }
    }
    // Past the reads at once, the next one to end starts this lane (see below).
    if (this.#warmsRunning >= warmsAtOnce) return
    lane.warming = true
    lane.lastWarmAt = Date.now()
    this.#warmsRunning++
    this.#readLane(lane)
      .catch((err) =>
        this.#deps.log.warn({ err, project_id: lane.projectId, queue: lane.queue }, 'ready index: reading a queue from the read model failed'),
      )
      .finally(() => {
        lane.warming = false
        this.#warmsRunning--
        // Reads are taken a few at a time: the next incomplete lane goes now.
        for (const next of this.#incomplete) {
          if (this.#warmsRunning >= warmsAtOnce) break
          this.#warm(next)
        }
      })
  }

  async #readLane(lane: Lane): Promise<void> {
    const gap = lane.gapSeq!
    // Payloads only as far as the state budget has room; the rest are held without state.
    const allowance = Math.max(0, this.#limits.stateBytes - this.#stateBytes)
    const snapshot = await readPendingQueue(this.#deps.sql, lane.projectId, lane.queue, this.#limits.jobsPerProject, allowance)
    if (lane.project.lanes.get(lane.queue) !== lane || snapshot.through < gap) return
    let fitted = snapshot.complete
    const added: HeldCandidate[] = []
    for (const row of snapshot.rows) {
      const held = this.#jobs.get(row.id)
      if ((held?.seq ?? this.#tombstones.get(row.id) ?? 0) >= row.seq) continue
      if (held === undefined && (lane.project.count >= this.#limits.jobsPerProject || this.#count >= this.#limits.jobs)) {
        fitted = false
        break
      }
      const payload = row.payload === null ? null : { value: row.payload, bytes: row.payloadBytes }
      const view = { id: row.id, jobType: row.jobType, dueAt: row.dueAt.getTime(), job: row.job, payload }
      const c = this.#hold(lane, view, row.seq, row.payloadBytes + provisionalStateBytes)
      if (c !== null) added.push(c)
    }
    // Every job pending at `through` is held now, and the follower has applied everything since
    // the gap: complete, unless a bound dropped a job meanwhile (the gap moved past `through`).
    if (fitted && snapshot.through >= lane.gapSeq!) {
      lane.gapSeq = null
      this.#incomplete.delete(lane)
    } else {
      lane.gapSeq = Math.max(lane.gapSeq!, snapshot.through)
    }
    this.#offer(lane, added)
  }

  #dropIdleLanes(): void {
    const now = Date.now()
    for (const [projectId, project] of this.#projects) {
      for (const [queue, lane] of project.lanes) {
        if (lane.sessions.size > 0 || now - lane.idleSince < laneIdleMs || lane.warming) continue
        for (const c of [...lane.queued]) this.#detach(c)
        this.#clearTimer(lane)
        if (lane.warmLater !== null) clearTimeout(lane.warmLater)
        project.lanes.delete(queue)
        this.#incomplete.delete(lane)
      }
      if (project.lanes.size === 0) this.#projects.delete(projectId)
    }
  }
}
