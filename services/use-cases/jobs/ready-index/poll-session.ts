import { dueBetween, nextDueAfter, type Candidate, type FairTake, type HeldCandidate, type Lane, type Lanes, type Settlement } from './lanes.ts'

/** What the wake-ups keep per lane: the polls waiting on it, and the timer of its next due candidate. */
export interface LaneWakeups {
  readonly sessions: Set<PollSession>
  timer: NodeJS.Timeout | null
  /** When `timer` fires, on the service clock. */
  timerAt: number
  /** Candidates due by this instant (ms, service clock) have been offered to the waiting polls. */
  offeredThrough: number
}

/** What a new lane starts with: nothing waiting, nothing offered before `now`. */
export function newLaneWakeups(now: number): LaneWakeups {
  return { sessions: new Set(), timer: null, timerAt: 0, offeredThrough: now }
}

export interface HasWakeups {
  readonly wakeups: LaneWakeups
}

type WakingLane = Lane<HasWakeups>

const noQueues: ReadonlySet<string> = new Set()

/** Longest timer Node keeps exact (about 24.8 days); a later due time re-arms when it fires. */
const maxTimerMs = 2 ** 31 - 1

/** The parts of the index a poll's session works with. */
export interface SessionScope {
  readonly lanes: Lanes<HasWakeups>
  readonly wakeups: Wakeups
  /** Whether the index follows the log now. */
  isLive(): boolean
  /** The housekeeping clock (see index.ts). */
  idleNow(): number
}

/**
 * Wakes waiting polls: one poll per job that became claimable (created pending, retried,
 * released by the reaper, activated, promoted, or a retry's backoff ending: a timer per lane at
 * the earliest future due time), never all of them.
 */
export class Wakeups {
  /** The service clock, in ms: due times are on it (and tests shift it). */
  readonly #now: () => number

  constructor(now: () => number) {
    this.#now = now
  }

  /** Offers newly held candidates: those due now to waiting polls, the others to the lane's timer. */
  offer(lane: WakingLane, candidates: readonly HeldCandidate<HasWakeups>[]): void {
    if (lane.parts.wakeups.sessions.size === 0 || candidates.length === 0) return
    const now = this.#now()
    this.wakeFor(
      lane,
      candidates.filter((c) => c.dueAt <= now),
    )
    if (candidates.some((c) => c.dueAt > now)) this.arm(lane, now)
  }

  /**
   * Wakes, for each candidate, the first poll (in the order they came) that takes its job type
   * and has room left for what it was already offered: a job wakes one poll, not the herd.
   */
  wakeFor(lane: WakingLane, candidates: readonly HeldCandidate[]): void {
    for (const c of candidates) {
      for (const s of lane.parts.wakeups.sessions) {
        if (s.wakeFor(c.jobType)) break
      }
    }
  }

  /** Sets the lane's timer to its earliest candidate due after `now`, while polls wait on it. */
  arm(lane: WakingLane, now: number): void {
    const w = lane.parts.wakeups
    const nextAt = w.sessions.size === 0 ? undefined : nextDueAfter(lane, now)
    if (nextAt === undefined) return this.clear(lane)
    if (w.timer !== null && w.timerAt <= nextAt && w.timerAt > now) return
    this.clear(lane)
    w.timerAt = nextAt
    w.timer = setTimeout(() => this.#onDue(lane), Math.min(nextAt - now, maxTimerMs))
    w.timer.unref()
  }

  /** Stops the lane's timer (its last poll left, the lane is dropped, or the index stops). */
  clear(lane: WakingLane): void {
    const w = lane.parts.wakeups
    if (w.timer !== null) clearTimeout(w.timer)
    w.timer = null
  }

  #onDue(lane: WakingLane): void {
    const w = lane.parts.wakeups
    w.timer = null
    const now = this.#now()
    const due = dueBetween(lane, w.offeredThrough, now)
    w.offeredThrough = Math.max(w.offeredThrough, now)
    this.wakeFor(lane, due)
    this.arm(lane, now)
  }

  /** The service clock's time, in ms. */
  now(): number {
    return this.#now()
  }
}

/**
 * One long poll's view of the index, from its first claim to its answer: the lanes of its queues,
 * the job types it takes, and, while it waits, its wake-up and its deadline.
 */
export class PollSession {
  readonly #scope: SessionScope
  readonly #lanes: readonly WakingLane[]
  readonly #jobTypes: ReadonlySet<string> | null
  readonly #capacity: number
  /** Candidates offered to this poll since its last take. */
  #offered = 0
  /** Woken since its last take, whether or not it was waiting then. */
  #fired = false
  #wake: (() => void) | undefined

  constructor(scope: SessionScope, lanes: readonly WakingLane[], jobTypes: readonly string[] | null, capacity: number) {
    this.#scope = scope
    this.#lanes = lanes
    this.#jobTypes = jobTypes === null ? null : new Set(jobTypes)
    this.#capacity = capacity
    for (const lane of lanes) lane.parts.wakeups.sessions.add(this)
  }

  /**
   * Takes up to `max` claimable candidates of the poll's queues and job types, in claim order (due time − priority),
   * out of every other poll's reach until `settle`d, none of the `paused` queues. Also counts as
   * the poll having seen what it was woken for.
   */
  take(max: number, paused: ReadonlySet<string> = noQueues, fair: FairTake | null = null): Candidate[] {
    this.#offered = 0
    this.#fired = false
    const now = this.#scope.wakeups.now()
    const lanes = paused.size === 0 ? this.#lanes : this.#lanes.filter((l) => !paused.has(l.queue))
    const picked = this.#scope.lanes.take(lanes, this.#jobTypes, max, now, fair)
    // The clock may have moved since the lanes' timers were set (and tests shift it).
    for (const lane of this.#lanes) this.#scope.wakeups.arm(lane, now)
    return picked
  }

  /**
   * After the claim of a taken candidate: `claimed` (this process appended the claim), `lost` (the
   * append conflicted or was refused: the job moved on, and the log will say where) or `unknown`
   * (the append failed: the candidate goes back).
   */
  settle(candidate: Candidate, how: Settlement): void {
    const c = candidate as HeldCandidate<HasWakeups>
    if (this.#scope.lanes.settle(c, how)) this.#scope.wakeups.offer(c.lane, [c])
  }

  /**
   * True when the index holds every claimable job of the poll's queues, so a take that finds
   * fewer than wanted means there are no more: false while a queue is cold, past a bound, or the
   * index has stopped following the log. Polls ask the read model only when this is false.
   */
  isComplete(): boolean {
    return this.#scope.isLive() && this.#lanes.every((l) => l.gapSeq === null)
  }

  /** Whether the poll takes jobs of this type. */
  accepts(jobType: string): boolean {
    return this.#jobTypes === null || this.#jobTypes.has(jobType)
  }

  /**
   * The wake-ups offer the poll a job of `jobType`: false when it does not take the type or was
   * offered as many as its capacity already; otherwise it is woken (or will not wait, if it is
   * not waiting now).
   */
  wakeFor(jobType: string): boolean {
    if (this.#offered >= this.#capacity || !this.accepts(jobType)) return false
    this.#offered++
    this.#fired = true
    this.#wake?.()
    return true
  }

  /** Wakes the poll whatever it takes: a queue of it was resumed, and its jobs may be claimable now. */
  wake(): void {
    this.#fired = true
    this.#wake?.()
  }

  /** Resolves when a job becomes claimable for this poll (or did since its last take), after `ms`, or on abort. */
  wait(ms: number, signal: AbortSignal): Promise<'woken' | 'timeout' | 'aborted'> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve('aborted')
      if (this.#fired) {
        this.#fired = false
        return resolve('woken')
      }
      const done = (how: 'woken' | 'timeout' | 'aborted') => {
        clearTimeout(deadline)
        signal.removeEventListener('abort', onAbort)
        this.#wake = undefined
        this.#fired = false
        resolve(how)
      }
      const onAbort = () => done('aborted')
      const deadline = setTimeout(() => done('timeout'), ms)
      signal.addEventListener('abort', onAbort, { once: true })
      this.#wake = () => done('woken')
    })
  }

  close(): void {
    const { wakeups } = this.#scope
    this.#wake = undefined
    for (const lane of this.#lanes) {
      const waiting = lane.parts.wakeups.sessions
      waiting.delete(this)
      if (waiting.size === 0) {
        lane.idleSince = this.#scope.idleNow()
        wakeups.clear(lane)
      }
    }
    if (this.#offered === 0) return
    // Woken for jobs it never took (it answered or gave up first): they go to the next polls.
    const now = wakeups.now()
    for (const lane of this.#lanes) wakeups.wakeFor(lane, dueBetween(lane, Number.NEGATIVE_INFINITY, now, this.#offered))
  }
}
