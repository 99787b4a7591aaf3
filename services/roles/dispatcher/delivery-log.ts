import { deliveryDecider, type Delivery, type DeliveryCommand, type DeliveryEvent } from '../../../domain/delivery.ts'
import type { AggregateRef } from '../../../streams/event-store.ts'
import { handleCommand, type CommandResult } from '../../../streams/handle-command.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

function deliveryRef(projectId: string, deliveryId: string): AggregateRef {
  return { aggregate: 'delivery', projectId, id: deliveryId }
}

/** A delivery's state on the log, or null when it was never scheduled. */
export async function loadDelivery(deps: Deps, projectId: string, deliveryId: string): Promise<Delivery | null> {
  return (await deps.store.load<Delivery>(deliveryRef(projectId, deliveryId))).state
}

/** Decides `command` on the delivery and appends what it decides (fan-out schedules, the deliverer records attempts). */
export function decideDelivery(
  deps: Deps,
  projectId: string,
  deliveryId: string,
  command: DeliveryCommand,
): Promise<CommandResult<DeliveryEvent, Delivery>> {
  return handleCommand<DeliveryCommand, DeliveryEvent, Delivery>(
    deps.store,
    deliveryDecider,
    deliveryRef(projectId, deliveryId),
    command,
    () => `evt_${deps.newUlid()}`,
  )
}
