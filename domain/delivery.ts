import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { maxDeliveryAttempts } from './delivery-policy.ts'
import { InvalidState } from './errors.ts'

/**
 * One event's delivery to one webhook subscription: scheduled once (its id is derived from the
 * event and the subscription), then one event per attempt, so the deliveries list is a
 * projection and a restart loses nothing.
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
}

export type DeliveryAggregate = Delivery | null

export type DeliveryEvent =
  | {
      type: 'delivery_scheduled'
      data: { delivery_id: string; project_id: string; webhook_id: string; event_id: string; event_type: string; scheduled_at: string }
    }
  | { type: 'delivery_attempted'; data: { attempt: number; status: DeliveryStatus; response_status: number | null; attempted_at: string } }

export type DeliveryCommand =
  | {
      type: 'schedule_delivery'
      data: { delivery_id: string; project_id: string; webhook_id: string; event_id: string; event_type: string }
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
