import { claimRankAtMs, dueAtMs, payloadInEvents, type Job, type JobEvent } from '../../../../domain/job.ts'
import type { PendingRow } from '../../../../projections/job-list.ts'
import type { StoredEvent } from '../../../../streams/event-store.ts'

export interface ReadyIndexLimits {
  /** Candidates one project may hold, all its queues together. */
  jobsPerProject: number
  /** Candidates of all projects together. */
  jobs: number
  /** Job states and payloads held in all, in encoded bytes; past it candidates are held without them. */
  stateBytes: number
}

/** A job the index proposes to a poll. Only the append at `seq` decides whether the poll gets it. */
export interface Candidate {
  readonly jobId: string
  readonly projectId: string
  /** The job's queue (its lane's). */
  readonly queue: string
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

/**
 * How a take shares a limited queue among its keys (issue 29; the API's FlowControl answers it
 * from the queue's limits and the gates this process saw refused).
 */
export interface FairTake {
  /** Whether the project's queue has limits that count by key: its keys then take turns. */
  appliesTo(projectId: string, queue: string): boolean
  /** The job's key for turns; null: it has none and takes a turn of its own. */
  keyOf(job: Job): string | null
  /** How many of the key's jobs one take may pick: its limit, 0 while it is known to be full or held. */
  room(projectId: string, key: string): number
}

/**
 * What a candidate's state is counted as until the log delivers its message and tells its size:
 * a job this process appended, before the log delivers it back.
 */
export const provisionalStateBytes = 1024
/** Removed jobs remembered at most (see Lanes#tombstones). */
const maxTombstones = 100_000
/**
 * Queues of one project the index follows at once. A poll names up to 50, and each new one costs
 * a read of the read model: past this, a project's other queues are not indexed and their polls
 * use the read-model query (through the claim line), as before the index.
 */
export const maxLanesPerProject = 1_000

/** What the index needs of a job to hold it. */
export interface JobView {
  id: string
  jobType: string
  /** available_at, in ms since the epoch. */
  dueAt: number
  /** claim_rank_at (due time − priority), in ms since the epoch: the claim order. */
  rankAt: number
  job: Job | null
  payload: Payload | null
}

/** A payload as the index holds it: the value, and what it counts against the state budget. */
export interface Payload {
  value: Record<string, unknown>
  bytes: number
}

export function viewOf(job: Job, payload: Payload | null): JobView {
  return { id: job.id, jobType: job.job_type, dueAt: dueAtMs(job), rankAt: claimRankAtMs(job), job, payload }
}

/**
 * The payload a message holds, its `job_created`'s or a `job_payload_replaced`'s (counted as the
 * message's `bytes`, most of which it is), or null.
 */
export function createdPayloadOf(events: readonly StoredEvent<JobEvent>[], bytes: number): Payload | null {
  const payload = payloadInEvents(events)
  return payload === null ? null : { value: payload, bytes }
}

/** A queue's pending jobs as the read model had them at `through` (projections/job-list.ts, jobList.pendingQueue). */
export interface QueueSnapshot {
  /** The job list's checkpoint: every job event up to it is in the rows. */
  readonly through: number
  /** The pending jobs, by (rankAt, id), at most a project's bound of them. */
  readonly rows: readonly PendingRow[]
  /** False when the queue holds more pending jobs than the rows. */
  readonly complete: boolean
}

export interface HeldCandidate<X = unknown> extends Candidate {
  readonly lane: Lane<X>
  readonly jobType: string
  /** available_at: when the job may be claimed, in ms since the epoch. */
  readonly dueAt: number
  /** Due time − priority, in ms since the epoch: where the job stands in its lane. */
  readonly rankAt: number
  bytes: number
  /** The payload held with the job (its bytes are part of `bytes`), carried to the job's later messages. */
  heldPayload: Payload | null
  taken: boolean
}

export interface ProjectLanes<X = unknown> {
  readonly lanes: Map<string, Lane<X>>
  /** Candidates held for the project, taken ones included. */
  count: number
}

/**
 * A lane: one project and queue as the index holds it, the claimable jobs in claim order. This is
 * the one meaning of "lane" in the claim path.
 */
export interface Lane<X = unknown> {
  readonly projectId: string
  readonly queue: string
  readonly project: ProjectLanes<X>
  /** Candidates not taken, by (rankAt, jobId): the read model's claim order. */
  readonly queued: HeldCandidate<X>[]
  /**
   * Bounds of the priorities (as ms: dueAt − rankAt) of the queued candidates: 0 and 0 while none
   * has one. A candidate's due time lies within them around its rank, which is how the scans by
   * due time (`take`, `dueBetween`, `nextDueAfter`) know where to stop in a lane ordered by rank.
   * Widened by every candidate queued, reset when the lane empties.
   */
  spread: PrioritySpread
  /**
   * null: complete, every job of the queue claimable by the last message followed is here.
   * Otherwise the sequence up to which pending jobs may be missing (not followed yet, or dropped
   * past a bound): a snapshot of the read model at or past it makes the lane complete.
   */
  gapSeq: number | null
  /** When the last poll left, on the housekeeping clock (see index.ts). */
  idleSince: number
  /** What the index's other parts keep per lane (its waiting polls, its warm-up). */
  readonly parts: X
}

/** The lowest and the highest priority of a lane's candidates, in ms; never above 0 and never below 0 respectively. */
export interface PrioritySpread {
  lowestMs: number
  highestMs: number
}

function noSpread(): PrioritySpread {
  return { lowestMs: 0, highestMs: 0 }
}

export function isBefore(a: HeldCandidate, b: HeldCandidate): boolean {
  return a.rankAt < b.rankAt || (a.rankAt === b.rankAt && a.jobId < b.jobId)
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

/** Index of the first candidate of `list` ranked after `at`. */
function firstRankedAfter(list: readonly HeldCandidate[], at: number): number {
  let lo = 0
  let hi = list.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (list[mid]!.rankAt <= at) lo = mid + 1
    else hi = mid
  }
  return lo
}

/**
 * The lane's queued candidates due after `after` and by `through`, in claim order, at most `max`.
 * A due time is the rank plus the priority, so only ranks after `after − highest` and up to
 * `through − lowest` can hold them; without priorities that is exactly the due ones.
 */
export function dueBetween(lane: Lane, after: number, through: number, max = Number.POSITIVE_INFINITY): HeldCandidate[] {
  const { queued, spread } = lane
  const found: HeldCandidate[] = []
  const lastRank = through - spread.lowestMs
  for (let i = firstRankedAfter(queued, after - spread.highestMs); i < queued.length && found.length < max; i++) {
    const c = queued[i]!
    if (c.rankAt > lastRank) break
    if (c.dueAt > after && c.dueAt <= through) found.push(c)
  }
  return found
}

/** The earliest due time after `at` of the lane's queued candidates; undefined when none is due after it. */
export function nextDueAfter(lane: Lane, at: number): number | undefined {
  const { queued, spread } = lane
  let next: number | undefined
  for (let i = firstRankedAfter(queued, at - spread.highestMs); i < queued.length; i++) {
    const c = queued[i]!
    // Every later candidate is due at its rank plus at least the lowest priority.
    if (next !== undefined && c.rankAt + spread.lowestMs >= next) break
    if (c.dueAt > at && (next === undefined || c.dueAt < next)) next = c.dueAt
  }
  return next
}

export interface LanesHooks<X> {
  /** A lane that dropped jobs past a bound (or is cold) has room to be read again. */
  hasRoom(lane: Lane<X>): void
}

/**
 * The candidates of the index, lane by lane: pure bookkeeping, no I/O, no timers; whatever time
 * it needs is passed in. It keeps the bounds (per project and in all, in candidates and in state
 * bytes), the gap of each lane (up to which sequence jobs may be missing), the tombstones of
 * removed jobs, and what the index knows of each job's latest sequence (staleness).
 *
 * `X` is what the index's other parts keep per lane.
 */
export class Lanes<X> {
  readonly #limits: ReadyIndexLimits
  readonly #hooks: LanesHooks<X>
  readonly #projects = new Map<string, ProjectLanes<X>>()
  readonly #jobs = new Map<string, HeldCandidate<X>>()
  /**
   * Jobs removed from the index, by the sequence that removed them, so that an older message of
   * theirs (this process's own append answered before the log delivered an earlier one, or a row
   * of a lagging read model) cannot bring them back. Needed only until both the follower and the
   * projector have passed that sequence.
   */
  readonly #tombstones = new Map<string, number>()
  readonly #tombstoneOrder: Array<{ jobId: string; seq: number }> = []
  #tombstoneHead = 0
  readonly #incomplete = new Set<Lane<X>>()
  #count = 0
  #stateBytes = 0

  constructor(limits: ReadyIndexLimits, hooks: LanesHooks<X>) {
    this.#limits = limits
    this.#hooks = hooks
  }

  /** Candidates held, all projects together. */
  get size(): number {
    return this.#count
  }

  /** State and payload bytes held, all candidates together. */
  get stateBytes(): number {
    return this.#stateBytes
  }

  /** State bytes the budget has room for still. */
  get stateBytesLeft(): number {
    return Math.max(0, this.#limits.stateBytes - this.#stateBytes)
  }

  /** Lanes whose gap is open, in the order they became incomplete. */
  get incomplete(): ReadonlySet<Lane<X>> {
    return this.#incomplete
  }

  /** Whether some poll of this process asked for a queue of the project. */
  hasProject(projectId: string): boolean {
    return this.#projects.has(projectId)
  }

  /** The lane of the project's queue, when the index follows it. */
  laneOf(projectId: string, queue: string): Lane<X> | undefined {
    return this.#projects.get(projectId)?.lanes.get(queue)
  }

  /** The job's candidate, taken or not. */
  held(jobId: string): HeldCandidate<X> | undefined {
    return this.#jobs.get(jobId)
  }

  /** Whether the lane is still the one the index follows for its queue (not dropped, not past maxLanesPerProject). */
  isFollowed(lane: Lane<X>): boolean {
    return lane.project.lanes.get(lane.queue) === lane
  }

  /** Whether the index holds every claimable job of these queues of the project (as far as the lanes know). */
  isComplete(projectId: string, queues: readonly string[]): boolean {
    const lanes = this.#projects.get(projectId)?.lanes
    return queues.every((q) => lanes?.get(q)?.gapSeq === null)
  }

  /** The highest sequence known for the job: its candidate's, or the one that removed it. */
  floor(jobId: string): number {
    return this.#jobs.get(jobId)?.seq ?? this.#tombstones.get(jobId) ?? 0
  }

  /**
   * True when the index knows the job has moved past `seq` (a row of the read model at `seq` is
   * stale): the read-model query skips such rows instead of paying a failed append for each.
   */
  isStale(jobId: string, seq: number): boolean {
    return this.floor(jobId) > seq
  }

  /**
   * The lanes of the project's queues, new ones opened cold (missing jobs up to `position`, the
   * last sequence followed or a later one), or, past maxLanesPerProject, never followed (always
   * incomplete).
   * `idleNow` is the housekeeping clock's time; `partsOf` makes a new lane's parts.
   */
  open(projectId: string, queues: readonly string[], position: number, idleNow: number, partsOf: () => X): Lane<X>[] {
    let project = this.#projects.get(projectId)
    if (project === undefined) this.#projects.set(projectId, (project = { lanes: new Map(), count: 0 }))
    return queues.map((queue) => project.lanes.get(queue) ?? this.#newLane(projectId, queue, project, position, idleNow, partsOf()))
  }

  #newLane(projectId: string, queue: string, project: ProjectLanes<X>, position: number, idleNow: number, parts: X): Lane<X> {
    const followed = project.lanes.size < maxLanesPerProject
    const lane: Lane<X> = {
      projectId,
      queue,
      project,
      queued: [],
      spread: noSpread(),
      // Nothing of this queue has been kept so far: jobs up to the last message followed may be missing.
      gapSeq: followed ? position : Number.POSITIVE_INFINITY,
      idleSince: idleNow,
      parts,
    }
    if (followed) {
      project.lanes.set(queue, lane)
      this.#incomplete.add(lane)
    }
    return lane
  }

  /** Whether a bound leaves the lane no room for another candidate. */
  isFull(lane: Lane<X>): boolean {
    return lane.project.count >= this.#limits.jobsPerProject || this.#count >= this.#limits.jobs
  }

  /**
   * Holds the job as the lane's candidate at `seq`, replacing an older one; null when a bound
   * leaves no room (the lane then cannot vouch for its queue up to `seq`).
   */
  hold(lane: Lane<X>, view: JobView, seq: number, bytes: number): HeldCandidate<X> | null {
    const held = this.#jobs.get(view.id)
    if (held !== undefined) this.#detach(held)
    if (this.isFull(lane)) {
      if (lane.gapSeq === null) this.#incomplete.add(lane)
      lane.gapSeq = Math.max(lane.gapSeq ?? 0, seq)
      return null
    }
    const withState = view.job !== null && this.#stateBytes + bytes <= this.#limits.stateBytes
    const heldPayload = withState ? view.payload : null
    const c: HeldCandidate<X> = {
      jobId: view.id,
      projectId: lane.projectId,
      queue: lane.queue,
      seq,
      job: withState ? view.job : null,
      payload: heldPayload?.value ?? null,
      lane,
      jobType: view.jobType,
      dueAt: view.dueAt,
      rankAt: view.rankAt,
      bytes: withState ? bytes : 0,
      heldPayload,
      taken: false,
    }
    this.#jobs.set(c.jobId, c)
    lane.project.count++
    this.#count++
    this.#stateBytes += c.bytes
    this.#enqueue(c)
    return c
  }

  /** Puts a candidate in its place in its lane's queue, widening the lane's spread to its priority. */
  #enqueue(c: HeldCandidate<X>): void {
    const { lane } = c
    const priorityMs = c.dueAt - c.rankAt
    if (priorityMs < lane.spread.lowestMs) lane.spread.lowestMs = priorityMs
    if (priorityMs > lane.spread.highestMs) lane.spread.highestMs = priorityMs
    lane.queued.splice(positionOf(lane.queued, c), 0, c)
  }

  /** Counts a held candidate at its message's real size, once the log tells it. */
  resize(c: HeldCandidate<X>, bytes: number): void {
    this.#stateBytes += bytes - c.bytes
    c.bytes = bytes
  }

  /** Forgets a candidate (a newer message replaced it, or it left the lane). */
  #detach(c: HeldCandidate<X>): void {
    if (this.#jobs.get(c.jobId) !== c) return
    this.#jobs.delete(c.jobId)
    c.lane.project.count--
    this.#count--
    this.#stateBytes -= c.bytes
    if (!c.taken) {
      const at = positionOf(c.lane.queued, c)
      if (c.lane.queued[at] === c) c.lane.queued.splice(at, 1)
      if (c.lane.queued.length === 0) c.lane.spread = noSpread()
    }
    const lane = c.lane
    if (lane.gapSeq !== null && this.hasRoomFor(lane)) this.#hooks.hasRoom(lane)
  }

  /** Room for a lane that dropped jobs to be read again: half its project's bound, and the total not reached. */
  hasRoomFor(lane: Lane<X>): boolean {
    return lane.project.count < this.#limits.jobsPerProject / 2 && this.#count < this.#limits.jobs
  }

  /** The job's message at `seq` says it is not claimable: it leaves its lane and is remembered as removed. */
  remove(projectId: string, jobId: string, seq: number): void {
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
   * Forgets removals at or before `upTo`: what both the follower and the read model have passed.
   * Not while a warm-up reads the read model (the caller's to check): its rows may predate a
   * removal the projector has since committed.
   */
  forgetRemovalsThrough(upTo: number): void {
    this.#pruneTombstones(upTo, 0)
  }

  #pruneTombstones(upTo: number, atLeast: number): void {
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

  /**
   * Takes up to `max` candidates of `lanes` due by `now` whose job type `jobTypes` (null: any)
   * holds, in claim order (due time − priority); they leave their lanes' queues until settled.
   * A lane's scan passes over candidates ranked early but not due yet (a high priority does not
   * make a job due sooner) and stops past the last rank a due candidate can have.
   */
  take(lanes: readonly Lane<X>[], jobTypes: ReadonlySet<string> | null, max: number, now: number, fair: FairTake | null = null): HeldCandidate<X>[] {
    const picked: HeldCandidate<X>[] = []
    /** Per lane, how far its scan went: whatever is taken from it lies before that. */
    const scanned = new Map<Lane<X>, number>()
    for (const lane of lanes) {
      if (fair?.appliesTo(lane.projectId, lane.queue)) {
        const end = this.#takeByTurns(lane, jobTypes, max, now, fair, picked)
        if (end > 0) scanned.set(lane, end)
        continue
      }
      let n = 0
      let i = 0
      const lastRank = now - lane.spread.lowestMs
      for (; i < lane.queued.length && n < max; i++) {
        const c = lane.queued[i]!
        if (c.rankAt > lastRank) break
        if (c.dueAt > now) continue
        if (jobTypes !== null && !jobTypes.has(c.jobType)) continue
        // Past its ttl: the claim would refuse it; it stays until its expiry's event removes it.
        if (c.job?.expires_at !== undefined && Date.parse(c.job.expires_at) <= now) continue
        picked.push(c)
        n++
      }
      if (n > 0) scanned.set(lane, i)
    }
    // Across queues, claim order; a limited queue's turns are kept as dealt (a stable sort of lanes apart).
    if (lanes.length > 1 && fair === null) picked.sort((a, b) => (isBefore(a, b) ? -1 : 1))
    for (const c of picked.splice(max)) c.taken = false
    for (const c of picked) c.taken = true
    for (const [lane, end] of scanned) {
      lane.queued.splice(0, end, ...lane.queued.slice(0, end).filter((c) => !c.taken))
      if (lane.queued.length === 0) lane.spread = noSpread()
    }
    return picked
  }

  /**
   * A limited queue's take (issue 29): its keys take turns. The lane is scanned in claim order,
   * each key collecting up to its room (none while it is at its limit, so a key with thousands
   * of waiting jobs is passed over, never blocking the keys behind it), then the keys' candidates
   * are dealt one per key per round, the key with the earliest candidate first. The scan stops
   * once `max` keys have a candidate: a later key could not get a turn in this take anyway.
   * Returns where the scan ended (0: nothing picked).
   */
  #takeByTurns(lane: Lane<X>, jobTypes: ReadonlySet<string> | null, max: number, now: number, fair: FairTake, picked: HeldCandidate<X>[]): number {
    const turns: HeldCandidate<X>[][] = []
    const byKey = new Map<string, { room: number; queue: HeldCandidate<X>[] | null }>()
    const lastRank = now - lane.spread.lowestMs
    let i = 0
    for (; i < lane.queued.length && turns.length < max; i++) {
      const c = lane.queued[i]!
      if (c.rankAt > lastRank) break
      if (c.dueAt > now) continue
      if (jobTypes !== null && !jobTypes.has(c.jobType)) continue
      if (c.job?.expires_at !== undefined && Date.parse(c.job.expires_at) <= now) continue
      const key = c.job === null ? null : fair.keyOf(c.job)
      if (key === null) {
        turns.push([c])
        continue
      }
      let entry = byKey.get(key)
      if (entry === undefined) {
        const room = Math.min(fair.room(lane.projectId, key), max)
        entry = { room, queue: room > 0 ? [] : null }
        byKey.set(key, entry)
        if (entry.queue !== null) turns.push(entry.queue)
      }
      if (entry.queue !== null && entry.queue.length < entry.room) entry.queue.push(c)
    }
    const before = picked.length
    for (let round = 0; picked.length - before < max; round++) {
      let dealt = false
      for (const turn of turns) {
        const c = turn[round]
        if (c === undefined) continue
        dealt = true
        picked.push(c)
        if (picked.length - before === max) break
      }
      if (!dealt) break
    }
    for (let k = before; k < picked.length; k++) picked[k]!.taken = true
    return picked.length > before ? i : 0
  }

  /**
   * After the claim of a taken candidate: `claimed` forgets it, `lost` forgets it and remembers
   * that nothing at or before its sequence can bring it back, `unknown` puts it back in its
   * lane's queue. True when it went back (to be offered again).
   */
  settle(c: HeldCandidate<X>, how: Settlement): boolean {
    if (this.#jobs.get(c.jobId) !== c) return false
    if (how === 'claimed') {
      this.#detach(c)
      return false
    }
    if (how === 'lost') {
      this.#detach(c)
      // The job has moved past `seq`: nothing at or before it can make it claimable again.
      this.#tombstone(c.jobId, c.seq)
      return false
    }
    c.taken = false
    this.#enqueue(c)
    return true
  }

  /**
   * Takes a snapshot of the lane's queue read from the read model once the lane's gap was
   * `gap`: holds the rows newer than what the index knows, as far as the bounds let it, and
   * closes the gap when every pending job is held and the snapshot reached the gap. Returns the
   * candidates added, or null when the snapshot is of no use (the lane was dropped meanwhile, or
   * the read model had not reached the gap).
   */
  fill(lane: Lane<X>, gap: number, snapshot: QueueSnapshot): HeldCandidate<X>[] | null {
    if (!this.isFollowed(lane) || snapshot.through < gap) return null
    let fitted = snapshot.complete
    const added: HeldCandidate<X>[] = []
    for (const row of snapshot.rows) {
      const held = this.#jobs.get(row.id)
      if ((held?.seq ?? this.#tombstones.get(row.id) ?? 0) >= row.seq) continue
      if (held === undefined && this.isFull(lane)) {
        fitted = false
        break
      }
      const payload = row.payload === null ? null : { value: row.payload, bytes: row.payloadBytes }
      const view = { id: row.id, jobType: row.jobType, dueAt: row.dueAt.getTime(), rankAt: row.rankAt.getTime(), job: row.job, payload }
      const c = this.hold(lane, view, row.seq, row.payloadBytes + provisionalStateBytes)
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
    return added
  }

  /**
   * Drops the lanes no poll has asked for in `idleMs` (by `idleNow`, the housekeeping clock),
   * except those `isBusy` keeps; `dropped` is told each one, after its queued candidates are
   * forgotten. A dropped queue is warmed again on its next poll.
   */
  dropIdle(idleNow: number, idleMs: number, isBusy: (lane: Lane<X>) => boolean, dropped: (lane: Lane<X>) => void): void {
    for (const [projectId, project] of this.#projects) {
      for (const [queue, lane] of project.lanes) {
        if (isBusy(lane) || idleNow - lane.idleSince < idleMs) continue
        for (const c of [...lane.queued]) this.#detach(c)
        dropped(lane)
        project.lanes.delete(queue)
        this.#incomplete.delete(lane)
      }
      if (project.lanes.size === 0) this.#projects.delete(projectId)
    }
  }

  /** Every lane followed, for stopping their timers. */
  *all(): IterableIterator<Lane<X>> {
    for (const project of this.#projects.values()) yield* project.lanes.values()
  }
}
