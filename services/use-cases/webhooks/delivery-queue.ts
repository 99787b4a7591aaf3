import { headers as natsHeaders } from '@nats-io/transport-node'
import { deliveriesWakeSubject, deliverySubject } from '../../../streams/names.ts'
import { wakeSubjectQueue } from '../../../streams/subject-queues.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * One message of the deliveries work queue: one event for one subscription, with the body as
 * it is signed and sent on every attempt. Fan-out, a redelivery and a replay put it there; the
 * dispatcher's deliverer acks it once the delivery is settled, or naks it for the next attempt.
 */
export interface DeliveryWorkItem {
  delivery_id: string
  project_id: string
  webhook_id: string
  body: string
  event_id: string
  event_type: string
  /** The delivery this one repeats (sent as `X-Jobsvc-Redelivery`); absent or null for a first delivery. */
  redelivery_of?: string | null
  /** The replay that made it (sent as `X-Jobsvc-Operation`); absent or null otherwise. */
  operation_id?: string | null
}

/**
 * Queues `item` on its subscription's subject and wakes the deliverers. The delivery id is the
 * message id, so a fan-out (or a replay) repeated after a crash queues nothing twice.
 */
export async function enqueueDelivery(deps: Deps, item: DeliveryWorkItem): Promise<void> {
  const ns = deps.config.namespace
  const h = natsHeaders()
  h.set('Nats-Msg-Id', item.delivery_id)
  const subject = deliverySubject(ns, item.project_id, item.webhook_id)
  await deps.nats.js.publish(subject, JSON.stringify(item), { headers: h })
  wakeSubjectQueue(deps.nats, deliveriesWakeSubject(ns), subject)
}
