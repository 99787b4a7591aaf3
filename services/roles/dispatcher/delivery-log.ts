import type { Delivery, DeliveryCommand, DeliveryEvent } from '../../../domain/delivery.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { deliveryHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** A delivery's state on the log, or null when it was never scheduled. */
export async function loadDelivery(deps: Deps, projectId: string, deliveryId: string): Promise<Delivery | null> {
  return (await deliveryHandler.load(deps.store, deliveryHandler.ref(projectId, deliveryId))).state
}

/** Decides `command` on the delivery and appends what it decides (fan-out schedules, the deliverer records attempts). */
export function decideDelivery(
  deps: Deps,
  projectId: string,
  deliveryId: string,
  command: DeliveryCommand,
): Promise<CommandResult<DeliveryEvent, Delivery>> {
  return deliveryHandler.decide(deps, deliveryHandler.ref(projectId, deliveryId), command)
}
