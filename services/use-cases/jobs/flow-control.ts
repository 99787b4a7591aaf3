import { gateNameOf, keyOf, queueOfGateName, type GateSpec } from '../../../domain/flow-gate.ts'
import type { Job } from '../../../domain/job.ts'
import { queueLimitsOf, type FlowLimits, type Project } from '../../../domain/project/index.ts'
import type { KeyPassOver } from '../../../projections/job-list.ts'
import type { LimitRefused } from '../../../domain/flow-gate.ts'
import type { FairTake } from './ready-index/index.ts'

/**
 * What one process knows of its projects' flow limits, for its polls (issue 29): each queue's
 * limits (from the project state the process follows already) and the gates its claims found
 * full, held or out of tokens lately. The gates themselves decide every claim on the log
 * (flow-gates.ts); this only keeps polls from asking a gate that just refused: a key at its
 * limit is passed over, by the ready index's turns (FairTake) and by the read-model query
 * (`passOver`), so it never blocks the keys behind it.
 *
 * A refusal for want of a slot blocks the gate until an attempt it held ends (this process's ack,
 * or another process's seen on the log), or `recheckAfterMs` at the latest (a slot freed by the
 * reaper's reconciliation makes no job event); one for want of a token, or a hold, until its time.
 */

/**
 * A gate passed over until `until`, unless slots were freed since: those are offered, one poll
 * each (so a freed slot wakes one claim per process, not every waiting poll at once).
 */
interface Blocked {
  until: number
  gate: GateSpec
  freedSlots: number
}

/** The longest a full gate stays passed over without news of a freed slot. */
const recheckAfterMs = 1_000
/** How long a contended gate is passed over. */
const contendedPassOverMs = 20

export class FlowControl {
  readonly #projectOf: (projectId: string) => Pick<Project, 'queue_limits'> | undefined
  readonly #now: () => number
  /** Per project, blocked gate names and until when (ms since the epoch). */
  readonly #blocked = new Map<string, Map<string, Blocked>>()

  /** Wakes the polls waiting on a queue whose gate opened again (the ready index's wakeQueue). */
  readonly #wake: (projectId: string, queue: string) => void

  constructor(
    projectOf: (projectId: string) => Pick<Project, 'queue_limits'> | undefined,
    wake: (projectId: string, queue: string) => void = () => undefined,
    now: () => number = Date.now,
  ) {
    this.#projectOf = projectOf
    this.#wake = wake
    this.#now = now
  }

  /** The queue's limits now; null when it has none. */
  limitsOf(projectId: string, queue: string): FlowLimits | null {
    const project = this.#projectOf(projectId)
    if (project === undefined || project.queue_limits.length === 0) return null
    const limits = queueLimitsOf(project, queue)
    return limits === null ? null : { concurrency: limits.concurrency, rate: limits.rate }
  }

  /** After a claim its gate refused. */
  refused(projectId: string, refused: LimitRefused): void {
    const { refusal, gate } = refused
    const until = refusal.retryAtMs ?? this.#now() + recheckAfterMs
    let blocked = this.#blocked.get(projectId)
    if (blocked === undefined) this.#blocked.set(projectId, (blocked = new Map()))
    blocked.set(gateNameOf(gate), { until, gate, freedSlots: 0 })
    // A waiting poll is woken when the gate opens by itself: no job event says so.
    setTimeout(() => this.#wake(projectId, gate.queue), Math.max(0, until - this.#now())).unref()
  }

  /**
   * A gate that lost every re-decision to other claims of its key: passed over for a moment, so
   * the polls woken together do not all try it again at once.
   */
  contended(projectId: string, gate: GateSpec): void {
    let blocked = this.#blocked.get(projectId)
    if (blocked === undefined) this.#blocked.set(projectId, (blocked = new Map()))
    const name = gateNameOf(gate)
    if (blocked.has(name)) return
    const until = this.#now() + contendedPassOverMs
    blocked.set(name, { until, gate, freedSlots: 0 })
    setTimeout(() => this.#wake(projectId, gate.queue), contendedPassOverMs).unref()
  }

  /** Gates an ended attempt freed: their keys are offered again at once. */
  freed(projectId: string, gates: readonly string[]): void {
    const blocked = this.#blocked.get(projectId)
    if (blocked === undefined) return
    for (const name of gates) {
      // A hold or an empty bucket is not ended by a freed slot.
      const entry = blocked.get(name)
      if (entry === undefined || entry.gate.concurrency === null) continue
      entry.freedSlots++
      this.#wake(projectId, entry.gate.queue)
    }
    if (blocked.size === 0) this.#blocked.delete(projectId)
  }

  /** Whether the process has gates blocked for the project (so the log follower decodes an ended attempt only then). */
  hasBlocked(projectId: string): boolean {
    return this.#blocked.has(projectId)
  }

  /** An attempt ended somewhere, as the log says: the gates its state names are freed. */
  attemptEnded(projectId: string, decode: () => Job | null): void {
    if (!this.hasBlocked(projectId)) return
    const gates = decode()?.gates
    if (gates !== undefined) this.freed(projectId, gates)
  }

  /** The gate's entry while it is passed over; an expired one is forgotten. */
  #entry(projectId: string, name: string): Blocked | undefined {
    const entry = this.#blocked.get(projectId)?.get(name)
    if (entry === undefined || entry.until > this.#now()) return entry
    this.#blocked.get(projectId)!.delete(name)
    return undefined
  }

  #isBlocked(projectId: string, name: string): boolean {
    const entry = this.#entry(projectId, name)
    return entry !== undefined && entry.freedSlots === 0
  }

  /** The queues of `queues` whose own gate is blocked now: a poll leaves them alone, as it does paused ones. */
  blockedQueues(projectId: string, queues: readonly string[]): Set<string> {
    const blocked = new Set<string>()
    if (!this.#blocked.has(projectId)) return blocked
    for (const queue of queues) if (this.#isBlocked(projectId, gateNameOf({ queue, by: null, key: null }))) blocked.add(queue)
    return blocked
  }

  /** The keys of `queues` the read-model query passes over now. */
  passOver(projectId: string, queues: readonly string[]): KeyPassOver[] {
    const blocked = this.#blocked.get(projectId)
    if (blocked === undefined) return []
    const byQueue = new Map<string, KeyPassOver>()
    for (const [name, { gate }] of [...blocked]) {
      if (gate.by === null || gate.key === null || !queues.includes(gate.queue) || !this.#isBlocked(projectId, name)) continue
      const id = JSON.stringify([gate.queue, gate.by])
      const entry = byQueue.get(id) ?? { queue: gate.queue, by: gate.by, keys: [] }
      entry.keys.push(gate.key)
      byQueue.set(id, entry)
    }
    return [...byQueue.values()]
  }

  /**
   * The ready index's turns for one take: a queue with per-key limits (or a rate by key) shares
   * its turns among its keys, each key taking up to its limit, none while its gate is blocked.
   */
  fairTake(): FairTake {
    const turnsOf = (projectId: string, queue: string) => {
      const limits = this.limitsOf(projectId, queue)
      const by = limits?.concurrency?.per_key?.by ?? limits?.rate?.by ?? null
      return by === null ? null : { by, room: limits?.concurrency?.per_key?.limit ?? Number.POSITIVE_INFINITY }
    }
    let current: { projectId: string; queue: string; turns: ReturnType<typeof turnsOf> } | null = null
    const turns = (projectId: string, queue: string) => {
      if (current === null || current.projectId !== projectId || current.queue !== queue)
        current = { projectId, queue, turns: turnsOf(projectId, queue) }
      return current.turns
    }
    return {
      appliesTo: (projectId, queue) => turns(projectId, queue) !== null,
      keyOf: (job) => {
        const t = turns(job.project_id, job.queue)
        if (t === null) return null
        const key = keyOf(job, t.by)
        return key === null ? null : gateNameOf({ queue: job.queue, by: t.by, key })
      },
      room: (projectId, name) => {
        const limit = turns(projectId, queueOfGateName(name))?.room ?? Number.POSITIVE_INFINITY
        const entry = this.#entry(projectId, name)
        if (entry === undefined) return limit
        // The slots freed since the refusal are taken by this take; the next waits for more.
        const room = Math.min(entry.freedSlots, limit)
        entry.freedSlots -= room
        return room
      },
    }
  }
}
