import type { Job } from '../../../../domain/job.ts'
import type { Deps } from '../../../infrastructure/runtime.ts'
import type { JobAppendObserver } from '../job-service.ts'
import { Lanes, type ReadyIndexLimits } from './lanes.ts'
import { LogFollower } from './log-follower.ts'
import { newLaneWakeups, PollSession, Wakeups, type HasWakeups, type SessionScope } from './poll-session.ts'
import { newLaneWarmUp, WarmUp, type HasWarmUp, type ProjectionProgress } from './warm-up.ts'

export { maxLanesPerProject, type Candidate, type FairTake, type ReadyIndexLimits, type Settlement } from './lanes.ts'
export { PollSession } from './poll-session.ts'
export type { ProjectionProgress } from './warm-up.ts'

/** What the index keeps per lane beside its candidates. */
type LaneParts = HasWakeups & HasWarmUp

/** A lane no poll has asked for in this long is dropped from the index (it is warmed again on its next poll). */
const laneIdleMs = 120_000
/** How often idle lanes are looked for: a lane is dropped at most a quarter of laneIdleMs late. */
const idleSweepIntervalMs = laneIdleMs / 4

/**
 * The housekeeping clock: the process's own, in ms, never shifted by tests. It spaces warm-ups
 * and tells idle lanes. Due times are on the other clock, the service's (`deps.now`), which tests
 * shift to bring a retry's backoff to its end.
 */
const housekeepingNow: () => number = Date.now

/**
 * The claimable jobs of this API process's polls, found from the log rather than the read
 * model, so a job can be claimed as soon as its `job_created` is stored, with no Postgres
 * round trip and no wait for the projector.
 *
 * Per project and queue that some poll of this process asked for (a lane), the index holds the
 * pending jobs ordered by due time (`available_at`), each with its last stream sequence and, within
 * a byte budget, its state: what a claim's append needs. Its parts:
 *
 * - lanes.ts: the candidates, their bounds, gaps and tombstones (pure);
 * - log-follower.ts: follows the job events of the log into the lanes, and takes the process's
 *   own appends from their answers;
 * - warm-up.ts: a lane starts cold (jobs pending before it was followed are not in it); it is
 *   warmed from the read model once the projector has passed the sequence the lane started from;
 *   until then, and whenever a bound made it drop a job, the lane is incomplete and polls also run
 *   the read-model query (the claim line's `FOR UPDATE SKIP LOCKED`);
 * - poll-session.ts: a poll's session and the wake-ups, one poll per job that became claimable.
 *
 * Correctness never rests on the index: it only proposes, the claim's append at the proposed
 * sequence decides, and a proposal that conflicts is dropped; the log delivers the job's newer
 * state anyway.
 */
export class ReadyIndex {
  readonly #progress: ProjectionProgress
  readonly #lanes: Lanes<LaneParts>
  readonly #wakeups: Wakeups
  readonly #warmUp: WarmUp<LaneParts>
  readonly #follower: LogFollower<LaneParts>
  readonly #scope: SessionScope
  readonly #ownPendingThrough: (projectId: string) => number
  #unwatch: (() => void) | undefined
  #sweeper: NodeJS.Timeout | undefined
  /** Per job, the waits of workers' signal polls (`watchSignals`). */
  readonly #signalWatchers = new Map<string, Set<() => void>>()
  /** Told of every attempt another process (or this one) ended, for the flow gates it freed (the API's FlowControl). */
  onAttemptEnded: ((projectId: string, decode: () => Job | null) => void) | null = null

  /**
   * `ownPendingThrough` tells the last sequence at which this process left a job of the project
   * pending (JobService.lastPendingSeq): a queue opened later is cold up to it at least.
   */
  constructor(deps: Deps, progress: ProjectionProgress, limits: ReadyIndexLimits, ownPendingThrough: (projectId: string) => number) {
    this.#progress = progress
    this.#ownPendingThrough = ownPendingThrough
    this.#lanes = new Lanes<LaneParts>(limits, { hasRoom: (lane) => this.#warmUp.warm(lane) })
    // The service clock: due times are on it (a job's available_at), and tests shift it.
    this.#wakeups = new Wakeups(() => deps.now().getTime())
    this.#warmUp = new WarmUp(deps, progress, this.#lanes, limits.jobsPerProject, housekeepingNow, (lane, added) => this.#wakeups.offer(lane, added))
    this.#follower = new LogFollower(deps, this.#lanes, {
      offer: (lane, candidates) => this.#wakeups.offer(lane, candidates),
      followed: (position) => this.#forgetPassedRemovals(position),
      signalled: (jobId) => {
        for (const wake of this.#signalWatchers.get(jobId) ?? []) wake()
      },
      attemptEnded: (projectId, decode) => this.onAttemptEnded?.(projectId, decode),
    })
    this.#scope = { lanes: this.#lanes, wakeups: this.#wakeups, isLive: () => this.isLive, idleNow: housekeepingNow }
  }

  /** Follows the log from its current end: lanes opened later are cold until warmed. */
  async start(): Promise<void> {
    await this.#follower.start()
    this.#unwatch = this.#progress.watch((seq) => this.#warmUp.onProjected(seq))
    this.#sweeper = setInterval(() => this.#dropIdleLanes(), idleSweepIntervalMs)
    this.#sweeper.unref()
  }

  async stop(): Promise<void> {
    const following = this.#follower.stop()
    this.#unwatch?.()
    clearInterval(this.#sweeper)
    for (const lane of this.#lanes.all()) {
      this.#wakeups.clear(lane)
      this.#warmUp.cancel(lane)
    }
    await following
  }

  /** The last stream sequence the index has followed. */
  get position(): number {
    return this.#follower.position
  }

  /** Whether the follower is running (no stall known). */
  get isLive(): boolean {
    return this.#follower.isLive
  }

  /** Candidates held, all projects together (for tests and diagnostics). */
  get size(): number {
    return this.#lanes.size
  }

  /** Whether the index holds every claimable job of these queues of the project. */
  isComplete(projectId: string, queues: readonly string[]): boolean {
    return this.isLive && this.#lanes.isComplete(projectId, queues)
  }

  /**
   * True when the index knows the job has moved past `seq` (a row of the read model at `seq` is
   * stale): the read-model query skips such rows instead of paying a failed append for each.
   */
  isStale(jobId: string, seq: number): boolean {
    return this.#lanes.isStale(jobId, seq)
  }

  /** This process's own appends, as soon as they are answered (JobService.observer). */
  get observer(): JobAppendObserver {
    return this.#follower.observer
  }

  /**
   * A long poll's session on the project's queues; tracking them from now on if none was. A new
   * queue is cold up to the last message followed, or up to this process's last append that left
   * a job of the project pending if the log has not delivered that one back yet: its answer came
   * before the queue was followed, so only the log or the read model can bring the job, and the
   * queue must not read as complete on a snapshot taken before it.
   */
  open(projectId: string, queues: readonly string[], jobTypes: readonly string[] | null, capacity: number): PollSession {
    const coldThrough = Math.max(this.#follower.position, this.#ownPendingThrough(projectId))
    const lanes = this.#lanes.open(projectId, queues, coldThrough, housekeepingNow(), () => ({
      wakeups: newLaneWakeups(this.#wakeups.now()),
      warmUp: newLaneWarmUp(),
    }))
    const session = new PollSession(this.#scope, lanes, jobTypes, capacity)
    for (const lane of lanes) {
      if (lane.gapSeq !== null) this.#warmUp.warm(lane)
    }
    return session
  }

  /**
   * Calls `wake` when the log stores a message that asks one of the jobs' workers to stop (a
   * cancel asked for, or the job cancelled), whichever API process appended it. Returns the
   * function that stops watching. A worker's signal poll watches first and reads the jobs' states
   * after, so nothing appended in between is missed.
   */
  watchSignals(jobIds: readonly string[], wake: () => void): () => void {
    for (const id of jobIds) {
      let set = this.#signalWatchers.get(id)
      if (set === undefined) this.#signalWatchers.set(id, (set = new Set()))
      set.add(wake)
    }
    return () => {
      for (const id of jobIds) {
        const set = this.#signalWatchers.get(id)
        set?.delete(wake)
        if (set?.size === 0) this.#signalWatchers.delete(id)
      }
    }
  }

  /**
   * Wakes every poll of this process waiting on the queue (it was resumed): each claims what it
   * can, from the index or, where the index cannot vouch for the queue, from the read model.
   */
  wakeQueue(projectId: string, queue: string): void {
    const lane = this.#lanes.laneOf(projectId, queue)
    for (const session of lane?.parts.wakeups.sessions ?? []) session.wake()
  }

  /**
   * Forgets removals both the follower and the read model have passed. Not while a warm-up reads
   * the read model: its rows may predate a removal the projector has since committed.
   */
  #forgetPassedRemovals(position: number): void {
    if (this.#warmUp.running > 0) return
    this.#lanes.forgetRemovalsThrough(Math.min(position, this.#progress.reached))
  }

  #dropIdleLanes(): void {
    this.#lanes.dropIdle(
      housekeepingNow(),
      laneIdleMs,
      (lane) => lane.parts.wakeups.sessions.size > 0 || lane.parts.warmUp.warming,
      (lane) => {
        this.#wakeups.clear(lane)
        this.#warmUp.cancel(lane)
      },
    )
  }
}
