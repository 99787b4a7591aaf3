import type { Subscription } from '@nats-io/transport-node'
import { webhookSubscriptions, type ActiveSubscription } from '../../../projections/webhooks.ts'
import { aggregateKindFilter, parseEventSubject } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** A project's subscriptions are read again after this even if no change was seen. */
const cacheLifetimeMs = 5 * 60_000
/** A change is announced on the log before its row is written: for this long after one, the project's subscriptions are read afresh every time. */
const rowCatchUpMs = 2_000

/**
 * Active subscriptions per project, kept until any of the project's subscriptions changes on
 * the log (most projects have none: their job events are then skipped by subject, never decoded
 * nor looked up). A change reaches this process as a core NATS message, which can only be missed
 * while the connection is down: the whole cache is dropped at every reconnect, and an entry is
 * read again after `cacheLifetimeMs` in any case.
 */
export class ActiveSubscriptions {
  readonly #deps: Deps
  readonly #cached = new Map<string, { at: number; subs: ActiveSubscription[] }>()
  readonly #changedUntil = new Map<string, number>()
  readonly #changes: Subscription

  constructor(deps: Deps) {
    this.#deps = deps
    const ns = deps.config.namespace
    this.#changes = deps.nats.nc.subscribe(aggregateKindFilter(ns, 'webhook'), {
      callback: (_err, msg) => {
        const projectId = parseEventSubject(ns, msg.subject)?.projectId
        if (projectId === undefined) return
        this.#cached.delete(projectId)
        this.#changedUntil.set(projectId, Date.now() + rowCatchUpMs)
      },
    })
    void (async () => {
      for await (const status of deps.nats.nc.status()) if (status.type === 'reconnect') this.#cached.clear()
    })()
  }

  /** The project's active subscriptions, oldest first: an install with more than an event may go to serves the oldest. */
  async of(projectId: string): Promise<ActiveSubscription[]> {
    const cached = this.#fresh(projectId)
    if (cached !== undefined) return cached
    const subs = await webhookSubscriptions.active(this.#deps.sql, projectId)
    this.#cached.set(projectId, { at: Date.now(), subs })
    return subs
  }

  /** True when the project is known, without a query, to have no active subscription. */
  isKnownEmpty(projectId: string): boolean {
    return this.#fresh(projectId)?.length === 0
  }

  close(): void {
    this.#changes.unsubscribe()
  }

  #fresh(projectId: string): ActiveSubscription[] | undefined {
    const cached = this.#cached.get(projectId)
    const isFresh = cached !== undefined && Date.now() - cached.at < cacheLifetimeMs && (this.#changedUntil.get(projectId) ?? 0) < Date.now()
    return isFresh ? cached.subs : undefined
  }
}
