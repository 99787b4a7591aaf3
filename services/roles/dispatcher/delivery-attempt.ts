import type { JsMsg } from '@nats-io/jetstream'
import type { Delivery } from '../../../domain/delivery.ts'
import { outcomeOf, retryWaitMs } from '../../../domain/delivery-policy.ts'
import { webhookHandler } from '../../../streams/aggregates.ts'
import { webhookDeliveryAttempts, webhookDeliveryDuration } from '../../infrastructure/metrics.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { decideDelivery, loadDelivery } from './delivery-log.ts'
import type { DeliveryWorkItem } from './delivery-queue.ts'
import type { SendResult, WebhookSender } from './webhook-sender.ts'

/** The policy's wait after `attempt`, or configuration's override of it. */
function retryWaitAfter(deps: Deps, attempt: number): number {
  return retryWaitMs(attempt, deps.config.tunables.webhook_retry_delays_ms)
}

/**
 * What is left of the wait before a delivery's next attempt, by its last one. The item's nak
 * carries the same wait, but a re-created consumer (after all deliverers were down longer than
 * its inactivity limit, or the move from the single consumer of earlier versions) hands its
 * items out again at once, and no attempt may come before its time.
 */
function waitLeftMs(deps: Deps, delivery: Delivery): number {
  return delivery.attempt === 0 ? 0 : Date.parse(delivery.attempted_at) + retryWaitAfter(deps, delivery.attempt) - deps.now().getTime()
}

/**
 * One attempt at a work item, recorded on the log: the item is acked once its delivery is
 * settled, or nak'ed with the policy's wait (domain/delivery-policy.ts), so pending retries live
 * in the stream and survive restarts. A recorded attempt number is never recorded twice, so
 * several dispatchers may take the same item.
 */
export async function attemptDelivery(deps: Deps, sender: WebhookSender, msg: JsMsg, item: DeliveryWorkItem): Promise<void> {
  const delivery = await loadDelivery(deps, item.project_id, item.delivery_id)
  if (delivery === null || delivery.status !== 'pending') return msg.ack()
  const wait = waitLeftMs(deps, delivery)
  if (wait > 0) return msg.nak(wait)
  // Spec: deleting a subscription leaves pending deliveries alone, so a deleted one still receives.
  const hook = (await webhookHandler.load(deps.store, webhookHandler.ref(item.project_id, item.webhook_id))).state
  const sendStarted = performance.now()
  const result: SendResult = hook === null ? { status: null, reason: 'no_subscription' } : await sender.send(hook, item)
  const attempt = delivery.attempt + 1
  const outcome = result.status === null && result.reason === 'unsealable' ? 'permanent_failure' : outcomeOf(result.status)
  webhookDeliveryAttempts.inc({ outcome })
  if (hook !== null) webhookDeliveryDuration.observe({ outcome }, (performance.now() - sendStarted) / 1000)
  const recorded = await decideDelivery(deps, item.project_id, item.delivery_id, {
    type: 'record_attempt',
    data: { attempt, outcome, response_status: result.status },
    meta: { now: deps.now().toISOString() },
  })
  if (result.status === null) deps.log.debug({ delivery_id: item.delivery_id, attempt, reason: result.reason }, 'dispatcher: attempt sent nothing')
  if (recorded.state?.status === 'pending') msg.nak(retryWaitAfter(deps, attempt))
  else msg.ack()
}
