import { createHash } from 'node:crypto'
import { matchesFilter, maxDeliveriesPerEvent } from '../../../domain/webhook.ts'
import { jobEventsSent, webhookBody, webhookEventOfMessage, type WebhookEventContent } from '../../../domain/webhook-payload.ts'
import type { EventRecord } from '../../../streams/event-store.ts'
import { parseEventSubject } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { enqueueDelivery } from '../../use-cases/webhooks/delivery-queue.ts'
import type { ActiveSubscriptions } from './active-subscriptions.ts'
import { decideDelivery } from './delivery-log.ts'

/** Webhook events of one batch scheduled at once. */
const fanOutConcurrency = 32

const mentionsJobEventSent = new RegExp(jobEventsSent.join('|'))

/** Derived from event and subscription, so that several dispatchers schedule one delivery, not two. */
function deliveryIdOf(eventId: string, webhookId: string): string {
  return `del_${createHash('sha256').update(`${eventId}/${webhookId}`).digest('hex').slice(0, 26)}`
}

/**
 * Fan-out: each webhook event of the log, and each active subscription of its project whose
 * filter lets it through, become a scheduled delivery (an event on the log) and a work item on
 * the deliveries queue.
 */
export class FanOut {
  readonly #deps: Deps
  readonly #subscriptions: ActiveSubscriptions
  readonly #overCapWarned = new Set<string>()

  constructor(deps: Deps, subscriptions: ActiveSubscriptions) {
    this.#deps = deps
    this.#subscriptions = subscriptions
  }

  /**
   * Whether a job event message may need fan-out. Most job events are not webhook events, and
   * most projects have no subscription: both are known from the headers and the subject,
   * without decoding the message.
   */
  acceptsJobEvent({ subject, eventTypes }: { subject: string; eventTypes: string }): boolean {
    if (!mentionsJobEventSent.test(eventTypes)) return false
    return !this.#subscriptions.isKnownEmpty(parseEventSubject(this.#deps.config.namespace, subject)?.projectId ?? '')
  }

  /** A batch's webhook events fan out concurrently: their deliveries are independent of each other. */
  async handle(records: readonly EventRecord[]): Promise<void> {
    const work: Array<() => Promise<void>> = []
    for (const record of records) {
      for (const event of record.message.events) {
        const content = webhookEventOfMessage(record.message, event)
        if (content !== null) work.push(() => this.#fanOutEvent(record.message.project_id, record.seq, event, content))
      }
    }
    let next = 0
    const runner = async () => {
      while (next < work.length) await work[next++]!()
    }
    await Promise.all(Array.from({ length: Math.min(fanOutConcurrency, work.length) }, runner))
  }

  /**
   * One webhook event to every active subscription of the project whose filter lets it through,
   * `maxDeliveriesPerEvent` at most. Only an install that had more subscriptions before that cap
   * existed can match more; it serves the oldest, and says so once.
   */
  async #fanOutEvent(projectId: string, eventSeq: number, event: { id: string; time: string }, content: WebhookEventContent): Promise<void> {
    const deps = this.#deps
    const matching = (await this.#subscriptions.of(projectId)).filter((sub) => matchesFilter(JSON.parse(sub.events), content.type))
    if (matching.length > maxDeliveriesPerEvent && !this.#overCapWarned.has(projectId)) {
      this.#overCapWarned.add(projectId)
      deps.log.warn(
        { project_id: projectId, matching: matching.length, cap: maxDeliveriesPerEvent },
        'dispatcher: more active subscriptions match an event than an event is delivered to; the oldest are served',
      )
    }
    for (const sub of matching.slice(0, maxDeliveriesPerEvent)) {
      const deliveryId = deliveryIdOf(event.id, sub.id)
      const result = await decideDelivery(deps, projectId, deliveryId, {
        type: 'schedule_delivery',
        data: {
          delivery_id: deliveryId,
          project_id: projectId,
          webhook_id: sub.id,
          event_id: event.id,
          event_type: content.type,
          event_seq: eventSeq,
          operation_id: null,
          redelivery_of: null,
        },
        meta: { now: deps.now().toISOString() },
      })
      // Scheduled already (a batch handled again after a crash) and still pending: queued again,
      // as the crash may have come before the queueing; the message id drops a repeat.
      if (!result.appended && result.state?.status !== 'pending') continue
      const body = webhookBody(event, content)
      await enqueueDelivery(deps, {
        delivery_id: deliveryId,
        project_id: projectId,
        webhook_id: sub.id,
        body,
        event_id: event.id,
        event_type: content.type,
      })
    }
  }
}
