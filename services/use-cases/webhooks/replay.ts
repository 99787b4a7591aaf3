import { createHash } from 'node:crypto'
import type { Actor } from '../../../domain/decider.ts'
import type { Webhook } from '../../../domain/webhook.ts'
import { deliveryAsOf, isReplayed, webhookReplayKind, type ReplayMode, type WebhookReplayParams } from '../../../domain/webhook-replay.ts'
import type { WebhookEventType } from '../../../domain/webhook.ts'
import { webhookDeliveries } from '../../../projections/deliveries.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { OperationService } from '../operations/operation-service.ts'
import { webhookEventsInRange, type LoggedWebhookEvent, type WebhookEventRange } from './webhook-log.ts'

/**
 * Replays of a subscription's webhook events from the log (docs/api-notes.md, "Webhook
 * redelivery and replay"): counted here when asked, then run as an operation by the dispatcher
 * role (replay-run.ts).
 */

/** A replay's event: the one it sends, and the earlier delivery of it that this one repeats (null: none). */
export interface ChosenEvent extends LoggedWebhookEvent {
  redeliveryOf: string | null
}

/** What a replay is asked for, its types already checked against the subscription (domain/webhook-replay.ts, replayedTypes). */
export interface ReplayRequest {
  mode: ReplayMode
  since: string
  until: string | null
  types: WebhookEventType[]
}

/** The range of the log a replay reads. */
export function rangeOf(params: WebhookReplayParams): WebhookEventRange {
  return { since: params.since, until: params.until, throughSeq: params.through_seq, types: params.event_types }
}

/** A replay's delivery of an event: derived from the operation, the event and the subscription, so a resumed run schedules it once. */
export function replayDeliveryIdOf(operationId: string, eventId: string, webhookId: string): string {
  return `del_${createHash('sha256').update(`${operationId}/${eventId}/${webhookId}`).digest('hex').slice(0, 26)}`
}

/** The events of `batch` a replay sends, by what the deliveries read model holds as of the replay's position. */
export async function chooseEvents(
  deps: Deps,
  projectId: string,
  params: WebhookReplayParams,
  batch: readonly LoggedWebhookEvent[],
): Promise<ChosenEvent[]> {
  const recorded = await webhookDeliveries.ofEvents(
    deps.sql,
    projectId,
    params.webhook_id,
    batch.map((e) => e.id),
  )
  const chosen: ChosenEvent[] = []
  for (const event of batch) {
    const prior = deliveryAsOf(recorded.get(event.id) ?? [], params.through_seq)
    if (isReplayed(params.mode, prior)) chosen.push({ ...event, redeliveryOf: prior?.id ?? null })
  }
  return chosen
}

export class WebhookReplays {
  readonly #deps: Deps
  readonly #operations: OperationService

  constructor(deps: Deps, operations: OperationService) {
    this.#deps = deps
    this.#operations = operations
  }

  /**
   * The replay of `request` as of the log's position `throughSeq` (its last sequence when asked,
   * which the deliveries read model should have reached), and how many events it sends: every
   * webhook event of the range is read from the log and judged against the deliveries of it.
   */
  async count(
    projectId: string,
    hook: Webhook,
    request: ReplayRequest,
    throughSeq: number,
  ): Promise<{ params: WebhookReplayParams; matched: number }> {
    const params: WebhookReplayParams = {
      webhook_id: hook.id,
      mode: request.mode,
      since: request.since,
      until: request.until,
      event_types: request.types,
      through_seq: throughSeq,
    }
    let matched = 0
    if (params.event_types.length > 0) {
      for await (const batch of webhookEventsInRange(this.#deps, projectId, rangeOf(params))) {
        matched += (await chooseEvents(this.#deps, projectId, params, batch)).length
      }
    }
    return { params, matched }
  }

  /** Starts the replay counted by `count` as an operation; the dispatcher role runs it. */
  start(projectId: string, params: WebhookReplayParams, matched: number, actor?: Actor) {
    return this.#operations.start(projectId, webhookReplayKind, { ...params }, matched, actor)
  }
}
