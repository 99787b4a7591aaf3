import { createHash, createHmac } from 'node:crypto'
import type { LookupFunction } from 'node:net'
import type { JsMsg } from '@nats-io/jetstream'
import { headers as natsHeaders } from '@nats-io/transport-node'
import { deliveryDecider, type Delivery, type DeliveryCommand, type DeliveryEvent } from '../../../domain/delivery.ts'
import { outcomeOf, retryWaitMs } from '../../../domain/delivery-policy.ts'
import type { Alert } from '../../../domain/alert.ts'
import type { Job, JobEvent } from '../../../domain/job.ts'
import { matchesFilter, maxDeliveriesPerEvent, type Webhook } from '../../../domain/webhook.ts'
import { consumeBatches } from '../../../streams/consume.ts'
import type { EventRecord } from '../../../streams/event-store.ts'
import { handleCommand } from '../../../streams/handle-command.ts'
import {
  aggregateKindFilter,
  alertDispatcherConsumerName,
  delivererConsumerName,
  deliveriesStreamName,
  deliveriesSubjectFilter,
  deliveriesWakeSubject,
  deliverySubject,
  dispatcherConsumerName,
  eventsStreamName,
  parseDeliverySubject,
  parseEventSubject,
  subscriptionDelivererConsumerName,
} from '../../../streams/names.ts'
import { consumeSubjectQueues, wakeSubjectQueue } from '../../../streams/subject-queues.ts'
import { decryptAtRest, deriveKey } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { checkWebhookUrl } from '../../infrastructure/url-safety.ts'
import { enqueueAlertMails, runMailSender } from './alert-mail.ts'
import { SlotPool } from './slot-pool.ts'
import { beforeDeadline, postWebhook, type AttemptResult } from './webhook-request.ts'
import { webhookRef } from '../../use-cases/webhooks/webhook-service.ts'

/** Attempts a deliverer runs at once, shared between projects (slot-pool.ts). */
const parallelDeliveries = 64
/**
 * Deliveries to one subscription in flight at once, and the least share of the slots a project
 * gets. More wait in the subscription's own queue, so a slow or dead receiver holds a few slots,
 * never all of its project's.
 */
const perSubscriptionInFlight = 4
/**
 * Per subscription: its items waiting for a retry count here. Past it the subscription's new
 * items wait in the stream until some settle; other subscriptions have consumers of their own.
 */
const maxAckPendingPerSubscription = 10_000
/** Webhook events of one batch scheduled at once. */
const fanOutConcurrency = 32
/** A project's subscriptions are read again after this even if no change was seen (see start). */
const cacheLifetimeMs = 5 * 60_000
export const userAgent = 'Service-Webhooks/1.0'

interface WorkItem {
  delivery_id: string
  project_id: string
  webhook_id: string
  body: string
  event_id: string
  event_type: string
}

/** Which job events are webhook events, and their `data` (spec, Outbound webhooks). */
export function webhookEventOf(event: { type: string; data: unknown }, job: Job | null): { type: string; data: Record<string, unknown> } | null {
  if (job === null) return null
  switch (event.type) {
    case 'job_created':
      return { type: 'job.created', data: { schema_version: 1, job_id: job.id, queue: job.queue } }
    case 'job_succeeded': {
      const d = event.data as Extract<JobEvent, { type: 'job_succeeded' }>['data']
      return {
        type: 'job.succeeded',
        data: { schema_version: 1, job_id: job.id, project_id: job.project_id, job_type: job.job_type, queue: job.queue, state: 'succeeded', duration_ms: d.duration_ms, completed_at: d.completed_at },
      }
    }
    case 'job_dead_lettered': {
      const d = event.data as Extract<JobEvent, { type: 'job_dead_lettered' }>['data']
      return {
        type: 'job.failed',
        data: {
          schema_version: 1,
          job_id: job.id,
          project_id: job.project_id,
          job_type: job.job_type,
          queue: job.queue,
          state: 'dead_letter',
          attempt_number: d.attempt,
          max_attempts: job.max_attempts,
          error_type: d.error?.type ?? null,
          error_message: d.error?.message ?? null,
          duration_ms: d.duration_ms,
          completed_at: d.completed_at,
        },
      }
    }
    default:
      return null
  }
}

/** Alert notifications as webhook events, for alerts that ask for them (`webhook: true`). */
export function alertWebhookEventOf(event: { type: string; data: unknown }, alert: Alert | null): { type: string; data: Record<string, unknown> } | null {
  if (alert === null || !alert.webhook) return null
  if (event.type !== 'alert_triggered' && event.type !== 'alert_resolved') return null
  const d = event.data as { value: number; threshold: number; triggered_at?: string; resolved_at?: string }
  return {
    type: event.type === 'alert_triggered' ? 'alert.triggered' : 'alert.resolved',
    data: {
      schema_version: 1,
      alert_id: alert.id,
      project_id: alert.project_id,
      name: alert.name,
      kind: alert.kind,
      queue: alert.queue,
      threshold: d.threshold,
      value: d.value,
      status: event.type === 'alert_triggered' ? 'firing' : 'ok',
      at: d.triggered_at ?? d.resolved_at,
    },
  }
}

/** `t=<unix>,v1=<hex>[,v1=<hex of the previous secret>]` over `<t>.<body>`, new secret first. */
export function signatureHeader(secrets: string[], body: string, at: Date): string {
  const t = Math.floor(at.getTime() / 1000)
  return [`t=${t}`, ...secrets.map((s) => `v1=${createHmac('sha256', s).update(`${t}.${body}`).digest('hex')}`)].join(',')
}

function deliveryIdOf(eventId: string, webhookId: string): string {
  return `del_${createHash('sha256').update(`${eventId}/${webhookId}`).digest('hex').slice(0, 26)}`
}

/**
 * The dispatcher role. Fan-out: a durable consumer of the job events turns each webhook event
 * and each matching active subscription into a scheduled delivery (an event on the log) and a
 * work item on the deliveries work queue. Delivery: each subscription's items are pulled from a
 * consumer of its own (streams/subject-queues.ts), sent within a total deadline
 * (webhook-request.ts) in slots shared fairly between projects (slot-pool.ts); each attempt is
 * recorded, and the item acked when settled or nak'ed with the policy's wait, so pending retries
 * live in the stream and survive restarts. Several dispatchers may run: delivery ids are derived from
 * event and subscription, and a recorded attempt number is never recorded twice. Alert events
 * also become alert e-mails on their own work queue (alert-mail.ts).
 */
export async function start(deps: Deps): Promise<() => Promise<void>> {
  const controller = new AbortController()
  const ns = deps.config.namespace
  const sealKey = deriveKey(deps.config.secret, 'webhook-secret-at-rest')
  const onDelivery = (projectId: string, id: string, command: DeliveryCommand) =>
    handleCommand<DeliveryCommand, DeliveryEvent, Delivery>(deps.store, deliveryDecider, { aggregate: 'delivery', projectId, id }, command, () => `evt_${deps.newUlid()}`)

  // Active subscriptions per project, kept until any of the project's subscriptions changes on
  // the log (most projects have none: their job events are then skipped by subject, never
  // decoded nor looked up). A change reaches this process as a core NATS message, which can only
  // be missed while the connection is down: the whole cache is dropped at every reconnect, and
  // an entry is read again after cacheLifetimeMs in any case.
  const subscriptions = new Map<string, { at: number; subs: Array<{ id: string; events: string }> }>()
  // A change is announced on the log before its row is written: for a moment after it, the
  // project's subscriptions are read afresh every time rather than cached.
  const changedUntil = new Map<string, number>()
  const changes = deps.nats.nc.subscribe(aggregateKindFilter(ns, 'webhook'), {
    callback: (_err, msg) => {
      const projectId = parseEventSubject(ns, msg.subject)?.projectId
      if (projectId === undefined) return
      subscriptions.delete(projectId)
      changedUntil.set(projectId, Date.now() + 2_000)
    },
  })
  void (async () => {
    for await (const status of deps.nats.nc.status()) if (status.type === 'reconnect') subscriptions.clear()
  })()
  const isFresh = (projectId: string, cached: { at: number } | undefined) =>
    cached !== undefined && Date.now() - cached.at < cacheLifetimeMs && (changedUntil.get(projectId) ?? 0) < Date.now()
  async function subscriptionsOf(projectId: string): Promise<Array<{ id: string; events: string }>> {
    const cached = subscriptions.get(projectId)
    if (cached && isFresh(projectId, cached)) return cached.subs
    // Oldest first: an install with more subscriptions than an event may go to serves the oldest.
    const subs = await deps.sql<{ id: string; events: string }[]>`
      SELECT id, events FROM webhooks WHERE project_id = ${projectId} AND is_active AND NOT deleted ORDER BY created_at, id`
    subscriptions.set(projectId, { at: Date.now(), subs })
    return subs
  }

  /** A batch's webhook events fan out concurrently: their deliveries are independent of each other. */
  async function fanOut(records: EventRecord[]): Promise<void> {
    const work: Array<() => Promise<void>> = []
    for (const record of records) {
      for (const event of record.message.events) {
        const hook = record.message.aggregate === 'job' ? webhookEventOf(event, record.message.state as Job) : alertWebhookEventOf(event, record.message.state as Alert)
        if (hook !== null) work.push(() => fanOutEvent(record.message.project_id, event, hook))
      }
    }
    let next = 0
    const lane = async () => {
      while (next < work.length) await work[next++]!()
    }
    await Promise.all(Array.from({ length: Math.min(fanOutConcurrency, work.length) }, lane))
  }

  const overCapWarned = new Set<string>()

  /**
   * One webhook event to every active subscription of the project whose filter lets it through,
   * `maxDeliveriesPerEvent` at most. Only an install that had more subscriptions before that cap
   * existed can match more; it serves the oldest, and says so once.
   */
  async function fanOutEvent(projectId: string, event: { id: string; time: string }, hook: { type: string; data: Record<string, unknown> }): Promise<void> {
    const matching = (await subscriptionsOf(projectId)).filter((sub) => matchesFilter(JSON.parse(sub.events), hook.type))
    if (matching.length > maxDeliveriesPerEvent && !overCapWarned.has(projectId)) {
      overCapWarned.add(projectId)
      deps.log.warn(
        { project_id: projectId, matching: matching.length, cap: maxDeliveriesPerEvent },
        'dispatcher: more active subscriptions match an event than an event is delivered to; the oldest are served',
      )
    }
    for (const sub of matching.slice(0, maxDeliveriesPerEvent)) {
      const deliveryId = deliveryIdOf(event.id, sub.id)
      const result = await onDelivery(projectId, deliveryId, {
        type: 'schedule_delivery',
        data: { delivery_id: deliveryId, project_id: projectId, webhook_id: sub.id, event_id: event.id, event_type: hook.type },
        meta: { now: deps.now().toISOString() },
      })
      if (!result.appended && result.state?.status !== 'pending') continue
      const body = JSON.stringify({ event_id: event.id, event_type: hook.type, created_at: event.time, data: hook.data })
      const item: WorkItem = { delivery_id: deliveryId, project_id: projectId, webhook_id: sub.id, body, event_id: event.id, event_type: hook.type }
      const h = natsHeaders()
      h.set('Nats-Msg-Id', deliveryId)
      const subject = deliverySubject(ns, projectId, sub.id)
      await deps.nats.js.publish(subject, JSON.stringify(item), { headers: h })
      wakeSubjectQueue(deps.nats, deliveriesWakeSubject(ns), subject)
    }
  }

  const unsealableReported = new Set<string>()

  /** The plaintext of a sealed secret, or null when this install's key cannot open it. */
  function unseal(sealed: string): string | null {
    try {
      return decryptAtRest(sealKey, sealed)
    } catch {
      return null
    }
  }

  /**
   * The secrets to sign with, newest first; null when the current one cannot be opened. A secret
   * sealed under another JOBSVC_SECRET (a restart with a generated one, or roles given different
   * ones) never opens here, so retrying is pointless: the attempt fails for good, and each such
   * secret is reported once per process, not once per delivery. A previous secret that cannot be
   * opened is left out of the header; the current one still signs.
   */
  function secretsOf(hook: Webhook, now: Date): string[] | null {
    const current = unseal(hook.secret_encrypted)
    if (current === null) {
      if (!unsealableReported.has(hook.secret_encrypted)) {
        unsealableReported.add(hook.secret_encrypted)
        deps.log.error(
          { project_id: hook.project_id, webhook_id: hook.id },
          'dispatcher: the subscription secret was sealed with another JOBSVC_SECRET and cannot be opened; its deliveries fail until the secret is rotated',
        )
      }
      return null
    }
    const secrets = [current]
    if (hook.previous_secret_encrypted && hook.previous_secret_expires_at && Date.parse(hook.previous_secret_expires_at) > now.getTime()) {
      const previous = unseal(hook.previous_secret_encrypted)
      if (previous !== null) secrets.push(previous)
      else if (!unsealableReported.has(hook.previous_secret_encrypted)) {
        unsealableReported.add(hook.previous_secret_encrypted)
        deps.log.warn(
          { project_id: hook.project_id, webhook_id: hook.id },
          'dispatcher: the previous secret of a rotated subscription was sealed with another JOBSVC_SECRET; deliveries are signed with the current secret only',
        )
      }
    }
    return secrets
  }

  type SendResult = AttemptResult | { status: null; reason: 'blocked' | 'unsealable' | 'no_subscription' }

  /** One attempt at one work item, under one deadline from the address check to the last byte read. */
  async function send(hook: Webhook, item: WorkItem): Promise<SendResult> {
    const now = deps.now()
    const secrets = secretsOf(hook, now)
    if (secrets === null) return { status: null, reason: 'unsealable' }
    const deadline = AbortSignal.timeout(deps.config.tunables.webhook_timeout_ms)
    const verdict = await beforeDeadline(checkWebhookUrl(hook.url, deps.config.webhookAllowHosts, deps.resolveHost, deadline), deadline)
    if (verdict === 'timeout') return { status: null, reason: 'timeout' }
    if (!verdict.ok) return { status: null, reason: 'blocked' }
    // Connect to the address that was checked, not to the name again (DNS rebinding).
    const pinned = verdict.addresses[0]
    const lookup: LookupFunction | undefined =
      pinned === undefined ? undefined : (_host, options, callback) => {
        const family = pinned.includes(':') ? 6 : 4
        if ((options as { all?: boolean }).all) (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [{ address: pinned, family }])
        else callback(null, pinned, family)
      }
    const headers = {
      'Content-Type': 'application/json',
      'Content-Length': Buffer.byteLength(item.body),
      'User-Agent': userAgent,
      'X-Service-Signature': signatureHeader(secrets, item.body, now),
      'X-Service-Event-Id': item.event_id,
      'X-Service-Event-Type': item.event_type,
    }
    return postWebhook(verdict.url, { body: item.body, headers, lookup }, deadline)
  }

  const retryDelayMs = (attempt: number) => retryWaitMs(attempt, deps.config.tunables.webhook_retry_delays_ms)

  /**
   * What is left of the wait before a delivery's next attempt, by its last one. The item's nak
   * carries the same wait, but a re-created consumer (after all deliverers were down longer than
   * its inactivity limit, or the move from the single consumer of earlier versions) hands its
   * items out again at once, and no attempt may come before its time.
   */
  const waitLeftMs = (delivery: Delivery) =>
    delivery.attempt === 0 ? 0 : Date.parse(delivery.attempted_at) + retryDelayMs(delivery.attempt) - deps.now().getTime()

  async function attemptDelivery(msg: JsMsg, item: WorkItem): Promise<void> {
    const delivery = (await deps.store.load<Delivery>({ aggregate: 'delivery', projectId: item.project_id, id: item.delivery_id })).state
    if (delivery === null || delivery.status !== 'pending') return msg.ack()
    const wait = waitLeftMs(delivery)
    if (wait > 0) return msg.nak(wait)
    // Spec: deleting a subscription leaves pending deliveries alone, so a deleted one still receives.
    const hook = (await deps.store.load<Webhook>(webhookRef(item.project_id, item.webhook_id))).state
    const result: SendResult = hook === null ? { status: null, reason: 'no_subscription' } : await send(hook, item)
    const attempt = delivery.attempt + 1
    const outcome = result.status === null && result.reason === 'unsealable' ? 'permanent_failure' : outcomeOf(result.status)
    const recorded = await onDelivery(item.project_id, item.delivery_id, {
      type: 'record_attempt',
      data: { attempt, outcome, response_status: result.status },
      meta: { now: deps.now().toISOString() },
    })
    if (result.status === null) deps.log.debug({ delivery_id: item.delivery_id, attempt, reason: result.reason }, 'dispatcher: attempt sent nothing')
    if (recorded.state?.status === 'pending') msg.nak(retryDelayMs(attempt))
    else msg.ack()
  }

  const pool = new SlotPool(parallelDeliveries, perSubscriptionInFlight)
  const inFlightBySubscription = new Map<string, number>()
  const roomWaiters = new Map<string, () => void>()
  const attempts = new Set<Promise<void>>()
  // Longer than an attempt's deadline plus its bookkeeping, so a slow receiver is not sent the same item twice.
  const ackWaitMs = deps.config.tunables.webhook_timeout_ms + 20_000

  /** Resolves once the subscription has fewer than its limit of attempts in flight, or on stop. */
  function roomFor(webhookId: string): Promise<void> {
    if ((inFlightBySubscription.get(webhookId) ?? 0) < perSubscriptionInFlight || controller.signal.aborted) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        controller.signal.removeEventListener('abort', done)
        roomWaiters.delete(webhookId)
        resolve()
      }
      roomWaiters.set(webhookId, done)
      controller.signal.addEventListener('abort', done, { once: true })
    })
  }

  /**
   * Takes one item off a subscription's queue: starts its attempt once the project has a slot
   * (slot-pool.ts), and resolves once the subscription has room for another, so its queue's loop
   * fetches the next item only then and the rest wait in the stream.
   */
  async function take(_subject: string, msg: JsMsg): Promise<void> {
    const item = JSON.parse(new TextDecoder().decode(msg.data)) as WorkItem
    // Every slot may be taken for up to an attempt's deadline: the item stays ours meanwhile.
    const keepAlive = setInterval(() => msg.working(), ackWaitMs / 3)
    const release = await pool.acquire(item.project_id, controller.signal).finally(() => clearInterval(keepAlive))
    if (release === null) return msg.nak()
    inFlightBySubscription.set(item.webhook_id, (inFlightBySubscription.get(item.webhook_id) ?? 0) + 1)
    const attempt = attemptDelivery(msg, item)
      .catch((err) => {
        deps.log.error({ err, delivery_id: item.delivery_id }, 'dispatcher: delivery failed; it will be retried')
        msg.nak(1_000)
      })
      .finally(() => {
        release()
        const left = (inFlightBySubscription.get(item.webhook_id) ?? 1) - 1
        if (left <= 0) inFlightBySubscription.delete(item.webhook_id)
        else inFlightBySubscription.set(item.webhook_id, left)
        roomWaiters.get(item.webhook_id)?.()
        attempts.delete(attempt)
      })
    attempts.add(attempt)
    await roomFor(item.webhook_id)
  }

  function runDeliverer(signal: AbortSignal): Promise<void> {
    return consumeSubjectQueues(
      deps.nats,
      {
        stream: deliveriesStreamName(ns),
        subjectsFilter: deliveriesSubjectFilter(ns),
        isQueueSubject: (subject) => parseDeliverySubject(ns, subject) !== null,
        consumerName: (subject) => {
          const { projectId, webhookId } = parseDeliverySubject(ns, subject)!
          return subscriptionDelivererConsumerName(ns, projectId, webhookId)
        },
        wakeSubject: deliveriesWakeSubject(ns),
        ackWaitMs,
        maxAckPending: maxAckPendingPerSubscription,
        inactiveThresholdMs: 10 * 60_000,
        idlePollMs: 60_000,
        sweepIntervalMs: 10_000,
        obsoleteConsumers: [delivererConsumerName(ns)],
      },
      take,
      signal,
      (err, during) =>
        during === 'handling' ? deps.log.error({ err }, 'dispatcher: delivery failed; it will be retried') : deps.log.error({ err }, 'dispatcher: deliverer restarting'),
    )
  }

  // Most job events are not webhook events, and most projects have no subscription: both are
  // known from the headers and the subject, without decoding the message.
  const accept = ({ subject, eventTypes }: { subject: string; eventTypes: string }) => {
    if (!/job_created|job_succeeded|job_dead_lettered/.test(eventTypes)) return false
    const projectId = parseEventSubject(ns, subject)?.projectId ?? ''
    const cached = subscriptions.get(projectId)
    return !(isFresh(projectId, cached) && cached!.subs.length === 0)
  }
  const fanOutDone = consumeBatches(
    deps.nats,
    { stream: eventsStreamName(ns), durable: dispatcherConsumerName(ns), filterSubject: aggregateKindFilter(ns, 'job'), maxBatch: 200, accept },
    fanOut,
    controller.signal,
    (err) => deps.log.error({ err }, 'dispatcher: fan-out failed; retrying'),
  )
  const alertsDone = consumeBatches(
    deps.nats,
    {
      stream: eventsStreamName(ns),
      durable: alertDispatcherConsumerName(ns),
      filterSubject: aggregateKindFilter(ns, 'alert'),
      maxBatch: 200,
      accept: ({ eventTypes }) => /alert_triggered|alert_resolved/.test(eventTypes),
    },
    async (records) => {
      await fanOut(records)
      await enqueueAlertMails(deps, records)
    },
    controller.signal,
    (err) => deps.log.error({ err }, 'dispatcher: alert fan-out failed; retrying'),
  )
  const deliverDone = runDeliverer(controller.signal)
  const mailDone = runMailSender(deps, controller.signal)
  return async () => {
    controller.abort()
    changes.unsubscribe()
    await Promise.all([fanOutDone, alertsDone, deliverDone, mailDone])
    await Promise.all(attempts)
  }
}
