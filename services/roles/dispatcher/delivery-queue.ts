import type { JsMsg } from '@nats-io/jetstream'
import type { DeliveryWorkItem } from '../../use-cases/webhooks/delivery-queue.ts'

export type { DeliveryWorkItem } from '../../use-cases/webhooks/delivery-queue.ts'

/** The work item a message of the deliveries queue carries (services/use-cases/webhooks/delivery-queue.ts). */
export function workItemOf(msg: JsMsg): DeliveryWorkItem {
  return JSON.parse(new TextDecoder().decode(msg.data)) as DeliveryWorkItem
}
