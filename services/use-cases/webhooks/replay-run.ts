import { setTimeout as sleep } from 'node:timers/promises'
import { DomainError } from '../../../domain/errors.ts'
import type { Operation, OperationCommand } from '../../../domain/operation.ts'
import type { Webhook } from '../../../domain/webhook.ts'
import { webhookBody } from '../../../domain/webhook-payload.ts'
import type { WebhookReplayParams } from '../../../domain/webhook-replay.ts'
import { webhookDeliveries } from '../../../projections/deliveries.ts'
import { applyOperationRows } from '../../../projections/operations.ts'
import { deliveryHandler, operationHandler, webhookHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { enqueueDelivery } from './delivery-queue.ts'
import { chooseEvents, rangeOf, replayDeliveryIdOf, type ChosenEvent } from './replay.ts'
import { webhookEventsFrom } from './webhook-log.ts'

/**
 * A replay's deliveries waiting for their first attempt at once: past it the run waits, so a
 * deliverer whose slots are taken (the project's share of them, services/roles/dispatcher/
 * slot-pool.ts) slows the replay down rather than letting its work items pile up in front of the
 * subscription's live ones.
 */
const maxAwaitingFirstAttempt = 10

/** How often the run reads its deliveries' outcomes from the read model, and rereads the subscription. */
const tallyEveryMs = 1_000
const subscriptionEveryMs = 2_000
/** How often a run whose events are all handed on looks whether their deliveries settled. */
const settleEveryMs = 250
/** How often a full window is looked at again. */
const windowEveryMs = 50

/** The pace of requests to one endpoint, shared by every replay this process runs (the dispatcher's). */
export interface ReplayPace {
  /** Resolves true once `requests` more may go to `endpoint`, false if `signal` aborted first. */
  take(endpoint: string, requests: number, signal: AbortSignal): Promise<boolean>
}

/** The endpoint a subscription's pace is kept by: its URL's origin (scheme, host and port). */
export function endpointOf(hook: Webhook): string {
  try {
    return new URL(hook.url).origin
  } catch {
    return hook.url
  }
}

/**
 * Runs a webhook replay from where it stands until it ends, is stopped (cancelled: the next
 * record of progress is refused), or `signal` aborts (the role stops; the operation stays running
 * and the next run resumes it).
 *
 * Each message's chosen events are first counted on the operation (`processed`, the cursor at the
 * message), then scheduled as deliveries and queued for the dispatcher's deliverer, which sends
 * them as it sends live ones: in the project's slots, signed with the subscription's secrets of
 * the moment, retried by the policy. A run resuming handles the message at its cursor again: its
 * deliveries' ids are derived from the operation and the event, so what was scheduled before the
 * stop is not scheduled twice, and what was not is. Once every event is handed on, the run waits
 * for their deliveries to settle, then ends the operation with their outcomes.
 */
export async function runWebhookReplay(deps: Deps, operation: Operation, pace: ReplayPace, signal: AbortSignal): Promise<void> {
  await new ReplayRun(deps, operation, pace, signal).run()
}

class ReplayRun {
  readonly #deps: Deps
  readonly #pace: ReplayPace
  readonly #signal: AbortSignal
  readonly #params: WebhookReplayParams
  readonly #projectId: string
  #op: Operation
  #opSeq = 0
  #hook: Webhook | null = null
  #hookReadAt = 0
  #outcomes = { succeeded: 0, failed: 0 }
  #outcomesReadAt = 0
  readonly #awaitingFirstAttempt = new Set<string>()

  constructor(deps: Deps, operation: Operation, pace: ReplayPace, signal: AbortSignal) {
    this.#deps = deps
    this.#pace = pace
    this.#signal = signal
    this.#op = operation
    this.#params = operation.params as unknown as WebhookReplayParams
    this.#projectId = operation.project_id
    this.#outcomes = { succeeded: operation.succeeded, failed: operation.failed }
  }

  async run(): Promise<void> {
    const loaded = await operationHandler.load(this.#deps.store, this.#ref())
    if (loaded.state === null || loaded.state.status !== 'running') return
    this.#op = loaded.state
    this.#opSeq = loaded.seq
    if (!(await this.#subscriptionUsable())) return
    const resumeAt = this.#op.cursor === null ? null : Number(this.#op.cursor)
    let from: number | null = resumeAt
    const range = rangeOf(this.#params)
    for (;;) {
      if (this.#signal.aborted) return
      const { events, nextSeq } = await webhookEventsFrom(this.#deps, this.#projectId, range, from)
      const chosen = await chooseEvents(this.#deps, this.#projectId, this.#params, events)
      for (const [seq, ofMessage] of byMessage(chosen)) {
        if (seq === resumeAt) {
          // Counted before the run stopped: its deliveries are made now if they were not then.
          await this.#deliver(ofMessage)
          continue
        }
        if (!(await this.#handOn(seq, ofMessage))) return
      }
      if (nextSeq === null) break
      from = nextSeq
    }
    await this.#settle()
  }

  /** Counts a message's events on the operation, then delivers them; false when the run must stop. */
  async #handOn(seq: number, events: ChosenEvent[]): Promise<boolean> {
    if (!(await this.#subscriptionUsable())) return false
    if (!(await this.#roomToSend())) return false
    if (!(await this.#pace.take(endpointOf(this.#hook!), events.length, this.#signal))) return false
    const outcomes = await this.#readOutcomes()
    const recorded = await this.#record({
      type: 'record_progress',
      data: { cursor: String(seq), processed: this.#op.processed + events.length, ...outcomes },
      meta: { now: this.#deps.now().toISOString() },
    })
    if (!recorded) return false
    await this.#deliver(events)
    return true
  }

  /** Schedules and queues a delivery of each event (one already scheduled and settled is left alone). */
  async #deliver(events: ChosenEvent[]): Promise<void> {
    const deps = this.#deps
    const webhookId = this.#params.webhook_id
    for (const event of events) {
      const deliveryId = replayDeliveryIdOf(this.#op.id, event.id, webhookId)
      const result = await deliveryHandler.decide(deps, deliveryHandler.ref(this.#projectId, deliveryId), {
        type: 'schedule_delivery',
        data: {
          delivery_id: deliveryId,
          project_id: this.#projectId,
          webhook_id: webhookId,
          event_id: event.id,
          event_type: event.content.type,
          event_seq: event.seq,
          operation_id: this.#op.id,
          redelivery_of: event.redeliveryOf,
        },
        meta: { now: deps.now().toISOString() },
      })
      if (!result.appended && result.state?.status !== 'pending') continue
      await enqueueDelivery(deps, {
        delivery_id: deliveryId,
        project_id: this.#projectId,
        webhook_id: webhookId,
        body: webhookBody(event, event.content),
        event_id: event.id,
        event_type: event.content.type,
        redelivery_of: event.redeliveryOf,
        operation_id: this.#op.id,
      })
      this.#awaitingFirstAttempt.add(deliveryId)
    }
  }

  /** Waits until fewer than the window's deliveries await their first attempt; false if the run stops first. */
  async #roomToSend(): Promise<boolean> {
    while (this.#awaitingFirstAttempt.size >= maxAwaitingFirstAttempt) {
      for (const deliveryId of [...this.#awaitingFirstAttempt]) {
        const delivery = (await deliveryHandler.load(this.#deps.store, deliveryHandler.ref(this.#projectId, deliveryId))).state
        if (delivery === null || delivery.status !== 'pending' || delivery.attempt > 0) this.#awaitingFirstAttempt.delete(deliveryId)
      }
      if (this.#awaitingFirstAttempt.size < maxAwaitingFirstAttempt) break
      if (!(await pause(windowEveryMs, this.#signal))) return false
    }
    return !this.#signal.aborted
  }

  /**
   * Once every event is handed on: waits for the deliveries to settle, recording their outcomes
   * as they come, then ends the operation with them.
   */
  async #settle(): Promise<void> {
    for (;;) {
      if (this.#signal.aborted) return
      const tally = await webhookDeliveries.tallyOfOperation(this.#deps.sql, this.#op.id)
      const outcomes = { succeeded: tally.delivered, failed: tally.failed }
      if (tally.delivered + tally.failed >= this.#op.processed) {
        await this.#record({
          type: 'finish_operation',
          data: { matched: this.#op.processed, ...outcomes },
          meta: { now: this.#deps.now().toISOString() },
        })
        return
      }
      if (outcomes.succeeded !== this.#op.succeeded || outcomes.failed !== this.#op.failed) {
        const recorded = await this.#record({
          type: 'record_progress',
          data: { cursor: this.#op.cursor, processed: this.#op.processed, ...outcomes },
          meta: { now: this.#deps.now().toISOString() },
        })
        if (!recorded) return
      }
      if (!(await pause(settleEveryMs, this.#signal))) return
    }
  }

  /** The outcomes of the operation's deliveries so far, read again at most once a second. */
  async #readOutcomes(): Promise<{ succeeded: number; failed: number }> {
    if (Date.now() - this.#outcomesReadAt >= tallyEveryMs) {
      const tally = await webhookDeliveries.tallyOfOperation(this.#deps.sql, this.#op.id)
      this.#outcomes = { succeeded: Math.max(tally.delivered, this.#op.succeeded), failed: Math.max(tally.failed, this.#op.failed) }
      this.#outcomesReadAt = Date.now()
    }
    return this.#outcomes
  }

  /**
   * The subscription as the log holds it, read again every few seconds: a replay ends as failed
   * once its subscription is deleted or deactivated (an inactive subscription gets no new
   * deliveries). False then, or when the operation was stopped meanwhile.
   */
  async #subscriptionUsable(): Promise<boolean> {
    if (this.#hook === null || Date.now() - this.#hookReadAt >= subscriptionEveryMs) {
      this.#hook = (await webhookHandler.load(this.#deps.store, webhookHandler.ref(this.#projectId, this.#params.webhook_id))).state
      this.#hookReadAt = Date.now()
    }
    const hook = this.#hook
    if (hook !== null && !hook.deleted && hook.is_active) return true
    const error =
      hook === null || hook.deleted
        ? { code: 'webhook_not_found', message: 'the webhook subscription was deleted' }
        : { code: 'invalid_state', message: 'the webhook subscription was deactivated' }
    await this.#record({ type: 'fail_operation', data: { error }, meta: { now: this.#deps.now().toISOString() } })
    return false
  }

  /**
   * Decides `command` on the operation from the state this run holds (a load only when another
   * writer came between). False when the operation refuses it (it was stopped or has ended) or
   * decides nothing (another run is ahead of this one): the run stops either way.
   */
  async #record(command: OperationCommand): Promise<boolean> {
    try {
      const result = await operationHandler.decide(this.#deps, this.#ref(), command, { hint: { state: this.#op, seq: this.#opSeq } })
      if (!result.appended || result.state === null) return false
      // The list's row at once, as the API writes it on a start or a stop (the projector writes it too).
      await applyOperationRows(this.#deps.sql, [result.record])
      this.#op = result.state
      this.#opSeq = result.seq
      return true
    } catch (err) {
      if (err instanceof DomainError) return false
      throw err
    }
  }

  #ref() {
    return operationHandler.ref(this.#projectId, this.#op.id)
  }
}

/** The chosen events grouped by the message that holds them, in log order. */
function byMessage(events: readonly ChosenEvent[]): Map<number, ChosenEvent[]> {
  const groups = new Map<number, ChosenEvent[]>()
  for (const event of events) groups.set(event.seq, [...(groups.get(event.seq) ?? []), event])
  return groups
}

/** Waits `ms`; false when `signal` aborted first. */
async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal })
    return true
  } catch {
    return false
  }
}
