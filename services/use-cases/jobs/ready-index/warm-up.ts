import { jobList } from '../../../../projections/job-list.ts'
import type { Deps } from '../../../infrastructure/runtime.ts'
import type { HeldCandidate, Lane, Lanes } from './lanes.ts'

/** How far the read models are: a queue is warmed from a snapshot taken at or past its gap. */
export interface ProjectionProgress {
  readonly reached: number
  watch(listener: (seq: number) => void): () => void
}

/** What the warm-up keeps per lane. */
export interface LaneWarmUp {
  warming: boolean
  /** When the last read from Postgres started, on the housekeeping clock; 0: none yet. */
  lastWarmAt: number
  /** A read put off by warmIntervalMs, to run when it ends. */
  warmLater: NodeJS.Timeout | null
}

/** What a new lane starts with: never read. */
export function newLaneWarmUp(): LaneWarmUp {
  return { warming: false, lastWarmAt: 0, warmLater: null }
}

export interface HasWarmUp {
  readonly warmUp: LaneWarmUp
}

/**
 * A queue is read from Postgres at most this often while it stays incomplete. The projector
 * announces every commit, and a lane whose gap keeps moving (its project at the bound, jobs
 * dropped faster than it is read) would otherwise cost a query per commit; at 250 ms that is four
 * a second per queue at most, while a lane still completes a moment after the projector passes
 * its gap.
 */
const warmIntervalMs = 250
/** Queues read from Postgres at once: each read holds a pooled connection. */
const warmsAtOnce = 2

/**
 * Warms cold and incomplete lanes from the read model: the queue's pending rows and the job
 * list's checkpoint, read in one snapshot, once the projector has passed the lane's gap; a few
 * queues at a time, each at most every warmIntervalMs.
 */
export class WarmUp<X extends HasWarmUp> {
  readonly #deps: Deps
  readonly #progress: ProjectionProgress
  readonly #lanes: Lanes<X>
  readonly #jobsPerProject: number
  readonly #added: (lane: Lane<X>, added: HeldCandidate<X>[]) => void
  /** The housekeeping clock (see index.ts): reads are spaced on it. */
  readonly #now: () => number
  #running = 0

  /** `added` is told the candidates each read added to its lane. */
  constructor(
    deps: Deps,
    progress: ProjectionProgress,
    lanes: Lanes<X>,
    jobsPerProject: number,
    now: () => number,
    added: (lane: Lane<X>, added: HeldCandidate<X>[]) => void,
  ) {
    this.#deps = deps
    this.#progress = progress
    this.#lanes = lanes
    this.#jobsPerProject = jobsPerProject
    this.#now = now
    this.#added = added
  }

  /** Reads running now: while any does, removals are not forgotten (Lanes.forgetRemovalsThrough). */
  get running(): number {
    return this.#running
  }

  /** The projector reached `seq`: the lanes whose gap it passed can be read. */
  onProjected(seq: number): void {
    for (const lane of this.#lanes.incomplete) {
      if (lane.gapSeq !== null && lane.gapSeq <= seq) this.warm(lane)
    }
  }

  /** Reads the lane's queue from the read model, unless a read is running or ran a moment ago. */
  warm(lane: Lane<X>): void {
    const w = lane.parts.warmUp
    if (w.warming || lane.gapSeq === null || w.warmLater !== null || !this.#lanes.isFollowed(lane)) return
    if (w.lastWarmAt !== 0) {
      // A read before the projector passed the gap cannot complete the lane; the projector's next
      // announcement at or past it triggers the read (onProjected). The first read goes ahead:
      // the projector may have passed the gap long ago and announce nothing until the log moves.
      if (this.#progress.reached < lane.gapSeq) return
      // A lane that dropped jobs past a bound is read again only once there is room for them.
      if (!this.#lanes.hasRoomFor(lane)) return
      const sinceLast = this.#now() - w.lastWarmAt
      if (sinceLast < warmIntervalMs) {
        // Put off, not dropped: the announcement that asked for it may be the last for a while.
        w.warmLater = setTimeout(() => {
          w.warmLater = null
          this.warm(lane)
        }, warmIntervalMs - sinceLast)
        w.warmLater.unref()
        return
      }
    }
    // Past the reads at once, the next one to end starts this lane (see below).
    if (this.#running >= warmsAtOnce) return
    w.warming = true
    w.lastWarmAt = this.#now()
    this.#running++
    this.#read(lane)
      .catch((err) =>
        this.#deps.log.warn({ err, project_id: lane.projectId, queue: lane.queue }, 'ready index: reading a queue from the read model failed'),
      )
      .finally(() => {
        w.warming = false
        this.#running--
        // Reads are taken a few at a time: the next incomplete lane goes now.
        for (const next of this.#lanes.incomplete) {
          if (this.#running >= warmsAtOnce) break
          this.warm(next)
        }
      })
  }

  /** Stops the lane's put-off read (the lane is dropped, or the index stops). */
  cancel(lane: Lane<X>): void {
    if (lane.parts.warmUp.warmLater !== null) clearTimeout(lane.parts.warmUp.warmLater)
  }

  /** The one read of the read model: the lane's queue, with payloads only as far as the state budget has room (the rest are held without state). */
  async #read(lane: Lane<X>): Promise<void> {
    const gap = lane.gapSeq!
    const snapshot = await jobList.pendingQueue(this.#deps.sql, lane.projectId, lane.queue, this.#jobsPerProject, this.#lanes.stateBytesLeft)
    const added = this.#lanes.fill(lane, gap, snapshot)
    if (added !== null) this.#added(lane, added)
  }
}
