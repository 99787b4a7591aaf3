import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { maxDeliveryAttempts } from './delivery-policy.ts'
import { InvalidState } from './errors.ts'

/**
 * One event's delivery to one webhook subscription: scheduled once (a live delivery's id is
 * derived from the event and the subscription, a replay's from the operation too), then one event
 * per attempt, so the deliveries list is a projection and a restart loses nothing. A redelivery
 * (by hand, or by a replay of events delivered before) is a delivery of its own that names the
 * one it repeats.
 */

export const deliveryStatuses = ['pending', 'delivered', 'failed'] as const
export type DeliveryStatus = (typeof deliveryStatuses)[number]

export interface Delivery {
  id: string
  project_id: string
  webhook_id: string
  event_id: string
  event_type: string
  status: DeliveryStatus
  response_status: number | null
  attempt: number
  attempted_at: string
  created_at: string
  /** The stream sequence of the message holding the event; null on deliveries scheduled before it was kept. */
  event_seq: number | null
  /** The operation (a webhook replay, domain/operation.ts) that made it; null for live deliveries and redeliveries by hand. */
  operation_id: string | null
  /** The earlier delivery of the same event to the same subscription that this one repeats. */
  redelivery_of: string | null
}

/** A delivery's state as messages written before `event_seq`, `operation_id` and `redelivery_of` hold it. */
export type StoredDelivery = Omit<Delivery, 'event_seq' | 'operation_id' | 'redelivery_of'> & Partial<Delivery>

/** Today's shape of a stored state: what older messages lack is null (a live delivery, its event's place unknown). */
export function upgradeDelivery(stored: StoredDelivery): Delivery {
  return { ...stored, event_seq: stored.event_seq ?? null, operation_id: stored.operation_id ?? null, redelivery_of: stored.redelivery_of ?? null }
}

/** What a delivery is of, beyond its event and subscription (absent on events written before they were kept). */
export interface DeliveryOrigin {
  event_seq?: number | null
  operation_id?: string | null
  redelivery_of?: string | null
}

export type DeliveryAggregate = Delivery | null

export type DeliveryEvent =
  | {
      type: 'delivery_scheduled'
      data: {
        delivery_id: string
        project_id: string
        webhook_id: string
        event_id: string
        event_type: string
        scheduled_at: string
      } & DeliveryOrigin
    }
  | { type: 'delivery_attempted'; data: { attempt: number; status: DeliveryStatus; response_status: number | null; attempted_at: string } }

export type DeliveryCommand =
  | {
      type: 'schedule_delivery'
      data: { delivery_id: string; project_id: string; webhook_id: string; event_id: string; event_type: string } & DeliveryOrigin
      meta: CommandMeta
    }
  /** `outcome`: what the receiver's answer means under the policy (the edge classifies it with delivery-policy.ts). */
  | {
      type: 'record_attempt'
      data: { attempt: number; outcome: 'delivered' | 'permanent_failure' | 'retryable_failure'; response_status: number | null }
      meta: CommandMeta
    }

function decide(command: DeliveryCommand, state: DeliveryAggregate): DeliveryEvent[] {
  const now = command.meta.now
  switch (command.type) {
    case 'schedule_delivery':
      return state === null ? [{ type: 'delivery_scheduled', data: { ...command.data, scheduled_at: now } }] : []
    case 'record_attempt': {
      if (state === null) throw new InvalidState('no such delivery')
      // A repeated attempt number (a redelivered work item) or a settled delivery records nothing.
      if (state.status !== 'pending' || command.data.attempt <= state.attempt) return []
      const { attempt, outcome, response_status } = command.data
      const status: DeliveryStatus =
        outcome === 'delivered' ? 'delivered' : outcome === 'permanent_failure' || attempt >= maxDeliveryAttempts ? 'failed' : 'pending'
      return [{ type: 'delivery_attempted', data: { attempt, status, response_status, attempted_at: now } }]
    }
  }
}

function evolve(state: DeliveryAggregate, event: DeliveryEvent): DeliveryAggregate {
  if (event.type === 'delivery_scheduled') {
    const d = event.data
    return {
      id: d.delivery_id,
      project_id: d.project_id,
      webhook_id: d.webhook_id,
      event_id: d.event_id,
      event_type: d.event_type,
      status: 'pending',
      response_status: null,
      attempt: 0,
      attempted_at: d.scheduled_at,
      created_at: d.scheduled_at,
      event_seq: d.event_seq ?? null,
      operation_id: d.operation_id ?? null,
      redelivery_of: d.redelivery_of ?? null,
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'delivery_scheduled')
  return {
    ...state,
    attempt: event.data.attempt,
    status: event.data.status,
    response_status: event.data.response_status,
    attempted_at: event.data.attempted_at,
  }
}

export const deliveryDecider: Decider<DeliveryCommand, DeliveryEvent, DeliveryAggregate> = { initialState: null, decide, evolve }
