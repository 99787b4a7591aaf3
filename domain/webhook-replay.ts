import type { DeliveryStatus } from './delivery.ts'
import { matchesFilter, webhookEventTypes, type EventFilter, type WebhookEventType } from './webhook.ts'

/**
 * A replay of a subscription's webhook events from the log (`POST /jobsvc/v1/webhooks/{id}/replay`,
 * run as an operation of kind `webhook_replay`, domain/operation.ts): which events of a range it
 * sends again. Whether an event was delivered is judged as of one position of the log, the one the
 * replay was counted at, so counting it and running it (later, perhaps after a restart) choose the
 * same events, and the replay's own deliveries never count as earlier ones.
 */

export const replayModes = ['failed', 'missing', 'all'] as const
/** `failed`: events whose delivery ended failed; `missing`: events never delivered to the subscription; `all`: every event. */
export type ReplayMode = (typeof replayModes)[number]

export const webhookReplayKind = 'webhook_replay'

/** What a replay operation's `params` hold. */
export interface WebhookReplayParams {
  webhook_id: string
  mode: ReplayMode
  /** The events' own times (ISO 8601): from `since`, up to and including `until` (null: no bound but `through_seq`). */
  since: string
  until: string | null
  /** The webhook event types replayed: those asked for, within the subscription's filter. */
  event_types: WebhookEventType[]
  /** The log's last sequence when the replay was counted: later events and deliveries are not its business. */
  through_seq: number
}

/** A delivery of an event to the subscription, as the deliveries read model holds it. */
export interface RecordedDelivery {
  id: string
  status: DeliveryStatus
  /** The sequence of the message that scheduled it (0 when not known: rows older than the column). */
  scheduled_seq: number
  /** The sequence of its latest message. */
  last_seq: number
}

/**
 * The event's latest delivery to the subscription as it stood at `throughSeq`: scheduled by then,
 * with its status then (a delivery changed since was still pending then, as settled deliveries
 * never change); null when none was scheduled by then.
 */
export function deliveryAsOf(deliveries: readonly RecordedDelivery[], throughSeq: number): { id: string; status: DeliveryStatus } | null {
  let latest: RecordedDelivery | null = null
  for (const d of deliveries) {
    if (d.scheduled_seq > throughSeq) continue
    if (latest === null || d.scheduled_seq > latest.scheduled_seq) latest = d
  }
  if (latest === null) return null
  return { id: latest.id, status: latest.last_seq <= throughSeq ? latest.status : 'pending' }
}

/** Whether a replay in `mode` sends an event whose delivery stood as `prior` (deliveryAsOf). */
export function isReplayed(mode: ReplayMode, prior: { status: DeliveryStatus } | null): boolean {
  switch (mode) {
    case 'all':
      return true
    case 'missing':
      return prior === null
    case 'failed':
      return prior?.status === 'failed'
  }
}

/**
 * The types a replay sends: those asked for (every webhook type when none is named), each of which
 * the subscription's filter must let through; `refused` names the first one it does not.
 */
export function replayedTypes(filter: EventFilter, asked: readonly WebhookEventType[] | null): { types: WebhookEventType[] } | { refused: string } {
  if (asked === null) return { types: webhookEventTypes.filter((type) => matchesFilter(filter, type)) }
  const refused = asked.find((type) => !matchesFilter(filter, type))
  if (refused !== undefined) return { refused }
  return { types: webhookEventTypes.filter((type) => asked.includes(type)) }
}
