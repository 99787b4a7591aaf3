import type { Actor } from '../../../domain/decider.ts'
import type { Delivery, DeliveryEvent } from '../../../domain/delivery.ts'
import { DeliveryNotFound, InvalidState } from '../../../domain/errors.ts'
import type { Webhook } from '../../../domain/webhook.ts'
import { webhookBody } from '../../../domain/webhook-payload.ts'
import { applyDeliveryRows } from '../../../projections/deliveries.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { deliveryHandler } from '../../../streams/aggregates.ts'
import { commandWithRows } from '../../infrastructure/command-with-rows.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { enqueueDelivery } from './delivery-queue.ts'
import { findWebhookEvent } from './webhook-log.ts'

/** Live deliveries' ids are 26 hex digits (derived), redeliveries' a lower-cased ULID. */
const deliveryIdPattern = /^del_[0-9a-z]{26}$/

/** A delivery of `hook`, as the log holds it; DeliveryNotFound when it has none of that id. */
export async function loadDelivery(deps: Deps, projectId: string, hook: Webhook, deliveryId: string): Promise<Delivery> {
  const delivery = deliveryIdPattern.test(deliveryId)
    ? (await deliveryHandler.load(deps.store, deliveryHandler.ref(projectId, deliveryId))).state
    : null
  if (delivery === null || delivery.webhook_id !== hook.id) throw new DeliveryNotFound(`delivery ${deliveryId} of webhook ${hook.id} was not found`)
  return delivery
}

/**
 * Sends a settled delivery's event again, as a new delivery naming the one it repeats: the same
 * event id and body (read back from the log), signed when it is sent with the subscription's
 * secrets of that moment, tried by the normal policy. Refused (`invalid_state`) while the
 * delivery is still pending (its own retries are under way), while the subscription is inactive,
 * and once retention removed the event from the log.
 */
export async function redeliver(
  deps: Deps,
  projectId: string,
  hook: Webhook,
  deliveryId: string,
  actor?: Actor,
): Promise<CommandResult<DeliveryEvent, Delivery>> {
  const original = await loadDelivery(deps, projectId, hook, deliveryId)
  if (!hook.is_active) throw new InvalidState('the webhook subscription is inactive: activate it to redeliver')
  if (original.status === 'pending') throw new InvalidState('the delivery is still pending: its own attempts are under way')
  const event = await findWebhookEvent(deps, projectId, original.event_id, original.event_seq)
  if (event === null) throw new InvalidState(`event ${original.event_id} is no longer in the log (retention removed it)`)
  const redeliveryId = `del_${deps.newUlid().toLowerCase()}`
  const result = await commandWithRows(
    deps,
    deliveryHandler,
    deliveryHandler.ref(projectId, redeliveryId),
    {
      type: 'schedule_delivery',
      data: {
        delivery_id: redeliveryId,
        project_id: projectId,
        webhook_id: hook.id,
        event_id: event.id,
        event_type: event.content.type,
        event_seq: event.seq,
        operation_id: null,
        redelivery_of: original.id,
      },
      meta: { now: deps.now().toISOString(), actor },
    },
    applyDeliveryRows,
  )
  await enqueueDelivery(deps, {
    delivery_id: redeliveryId,
    project_id: projectId,
    webhook_id: hook.id,
    body: webhookBody(event, event.content),
    event_id: event.id,
    event_type: event.content.type,
    redelivery_of: original.id,
  })
  return result
}
