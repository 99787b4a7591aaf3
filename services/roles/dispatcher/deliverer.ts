import type { JsMsg } from '@nats-io/jetstream'
import {
  delivererConsumerName,
  deliveriesStreamName,
  deliveriesSubjectFilter,
  deliveriesWakeSubject,
  parseDeliverySubject,
  subscriptionDelivererConsumerName,
} from '../../../streams/names.ts'
import { consumeSubjectQueues } from '../../../streams/subject-queues.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { workItemOf, type DeliveryWorkItem } from './delivery-queue.ts'
import { SlotPool } from './slot-pool.ts'

/** Attempts a deliverer runs at once, shared between projects (slot-pool.ts). */
const parallelDeliveries = 64
/**
 * Deliveries to one subscription in flight at once, and the least share of the slots a project
 * gets. More wait in the subscription's own queue, so a slow or dead receiver holds a few slots,
 * never all of its project's.
 */
const perSubscriptionInFlight = 4
/**
 * Per subscription: its items waiting for a retry count here. Past it the subscription's new
 * items wait in the stream until some settle; other subscriptions have consumers of their own.
 */
const maxAckPendingPerSubscription = 10_000

/**
 * The deliverer: each subscription's work items are pulled from a consumer of its own
 * (streams/subject-queues.ts) and attempted in slots shared fairly between projects
 * (slot-pool.ts), a few per subscription at a time.
 */
export class Deliverer {
  readonly #deps: Deps
  readonly #attempt: (msg: JsMsg, item: DeliveryWorkItem) => Promise<void>
  readonly #signal: AbortSignal
  readonly #pool = new SlotPool(parallelDeliveries, perSubscriptionInFlight)
  readonly #inFlightBySubscription = new Map<string, number>()
  readonly #roomWaiters = new Map<string, () => void>()
  readonly #running = new Set<Promise<void>>()
  // Longer than an attempt's deadline plus its bookkeeping, so a slow receiver is not sent the same item twice.
  readonly #ackWaitMs: number

  /** `attempt` settles the item itself (ack or nak); the deliverer only naks one whose attempt threw. */
  constructor(deps: Deps, attempt: (msg: JsMsg, item: DeliveryWorkItem) => Promise<void>, signal: AbortSignal) {
    this.#deps = deps
    this.#attempt = attempt
    this.#signal = signal
    this.#ackWaitMs = deps.config.tunables.webhook_timeout_ms + 20_000
  }

  /** Pulls and attempts work items until the signal aborts. */
  run(): Promise<void> {
    const ns = this.#deps.config.namespace
    return consumeSubjectQueues(
      this.#deps.nats,
      {
        stream: deliveriesStreamName(ns),
        subjectsFilter: deliveriesSubjectFilter(ns),
        isQueueSubject: (subject) => parseDeliverySubject(ns, subject) !== null,
        consumerName: (subject) => {
          const { projectId, webhookId } = parseDeliverySubject(ns, subject)!
          return subscriptionDelivererConsumerName(ns, projectId, webhookId)
        },
        wakeSubject: deliveriesWakeSubject(ns),
        ackWaitMs: this.#ackWaitMs,
        maxAckPending: maxAckPendingPerSubscription,
        inactiveThresholdMs: 10 * 60_000,
        idlePollMs: 60_000,
        sweepIntervalMs: 10_000,
        obsoleteConsumers: [delivererConsumerName(ns)],
      },
      (_subject, msg) => this.#take(msg),
      this.#signal,
      (err, during) =>
        during === 'handling'
          ? this.#deps.log.error({ err }, 'dispatcher: delivery failed; it will be retried')
          : this.#deps.log.error({ err }, 'dispatcher: deliverer restarting'),
    )
  }

  /** Resolves once every attempt under way has ended. */
  async drain(): Promise<void> {
    await Promise.all(this.#running)
  }

  /**
   * Takes one item off a subscription's queue: starts its attempt once the project has a slot
   * (slot-pool.ts), and resolves once the subscription has room for another, so its queue's loop
   * fetches the next item only then and the rest wait in the stream.
   */
  async #take(msg: JsMsg): Promise<void> {
    const item = workItemOf(msg)
    // Every slot may be taken for up to an attempt's deadline: the item stays ours meanwhile.
    const keepAlive = setInterval(() => msg.working(), this.#ackWaitMs / 3)
    const release = await this.#pool.acquire(item.project_id, this.#signal).finally(() => clearInterval(keepAlive))
    if (release === null) return msg.nak()
    this.#inFlightBySubscription.set(item.webhook_id, (this.#inFlightBySubscription.get(item.webhook_id) ?? 0) + 1)
    const attempt = this.#attempt(msg, item)
      .catch((err) => {
        this.#deps.log.error({ err, delivery_id: item.delivery_id }, 'dispatcher: delivery failed; it will be retried')
        msg.nak(1_000)
      })
      .finally(() => {
        release()
        const left = (this.#inFlightBySubscription.get(item.webhook_id) ?? 1) - 1
        if (left <= 0) this.#inFlightBySubscription.delete(item.webhook_id)
        else this.#inFlightBySubscription.set(item.webhook_id, left)
        this.#roomWaiters.get(item.webhook_id)?.()
        this.#running.delete(attempt)
      })
    this.#running.add(attempt)
    await this.#roomFor(item.webhook_id)
  }

  /** Resolves once the subscription has fewer than its limit of attempts in flight, or on stop. */
  #roomFor(webhookId: string): Promise<void> {
    const signal = this.#signal
    if ((this.#inFlightBySubscription.get(webhookId) ?? 0) < perSubscriptionInFlight || signal.aborted) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener('abort', done)
        this.#roomWaiters.delete(webhookId)
        resolve()
      }
      this.#roomWaiters.set(webhookId, done)
      signal.addEventListener('abort', done, { once: true })
    })
  }
}
