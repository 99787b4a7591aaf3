import type { Subscription } from '@nats-io/transport-node'
import { projectedThrough } from '../../../projections/checkpoints.ts'
import { keptProjections } from '../../../projections/index.ts'
import { checkpointSubject } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** Fallback re-read of the checkpoint table while a waiter waits, should an announcement be missed. */
const recheckMs = 50

/**
 * Knows how far the read models are: the projector announces each committed batch on a plain
 * subject; waiters for a sequence resolve as soon as it is reached (read-your-writes for lists).
 */
export class ProjectionWatcher {
  readonly #deps: Deps
  #reached = 0
  #subscription: Subscription | undefined
  readonly #listeners = new Set<(seq: number) => void>()

  constructor(deps: Deps) {
    this.#deps = deps
  }

  start(): void {
    this.#subscription = this.#deps.nats.nc.subscribe(checkpointSubject(this.#deps.config.namespace), {
      callback: (err, msg) => {
        if (err) return
        const seq = Number(msg.string())
        if (Number.isFinite(seq)) this.#advance(seq)
      },
    })
  }

  #advance(seq: number): void {
    if (seq <= this.#reached) return
    this.#reached = seq
    for (const listener of this.#listeners) listener(seq)
  }

  /** The highest sequence every read model is known to have applied (0 until the first news). */
  get reached(): number {
    return this.#reached
  }

  /** Calls `listener` with each new highest sequence; returns the unsubscribe. */
  watch(listener: (seq: number) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  stop(): void {
    this.#subscription?.unsubscribe()
  }

  /** Resolves once every read model has applied `seq`, or after `maxWaitMs` (lists then show what they have). */
  async waitFor(seq: number, maxWaitMs: number): Promise<boolean> {
    if (seq <= this.#reached) return true
    const deadline = Date.now() + maxWaitMs
    let nextRead = 0
    while (Date.now() < deadline) {
      if (Date.now() >= nextRead) {
        this.#advance(await projectedThrough(this.#deps.sql, keptProjections({ auditLog: this.#deps.config.tunables.audit_log_enabled })))
        nextRead = Date.now() + recheckMs
      }
      if (seq <= this.#reached) return true
      await new Promise((r) => setTimeout(r, 2))
    }
    return seq <= this.#reached
  }
}
