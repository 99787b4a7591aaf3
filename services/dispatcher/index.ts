import { createHash, createHmac } from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import type { LookupFunction } from 'node:net'
import type { JsMsg } from '@nats-io/jetstream'
import { headers as natsHeaders } from '@nats-io/transport-node'
import { deliveryDecider, outcomeOf, type Delivery, type DeliveryCommand, type DeliveryEvent } from '../../domain/delivery.ts'
import type { Alert } from '../../domain/alert.ts'
import type { Job, JobEvent } from '../../domain/job.ts'
import { matchesFilter, type Webhook } from '../../domain/webhook.ts'
import { consumeBatches, consumeWorkQueue } from '../../streams/consume.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { handleCommand } from '../../streams/handle-command.ts'
import {
  aggregateKindFilter,
  delivererConsumerName,
  deliveriesStreamName,
  deliverySubject,
  dispatcherConsumerName,
  eventsStreamName,
} from '../../streams/names.ts'
import { decryptAtRest, deriveKey } from '../platform/secrets.ts'
import type { Deps } from '../runtime.ts'
import { checkWebhookUrl } from '../webhooks/url-safety.ts'
import { enqueueAlertMails, runMailSender } from './alert-mail.ts'
import { webhookRef } from '../webhooks/webhook-service.ts'

/** Work items a deliverer holds at once: one slow receiver occupies one slot, never the others. */
const parallelDeliveries = 64
/**
 * Deliveries to one subscription in flight at once. More wait in the stream (a short nak), so a
 * slow or dead receiver holds a few slots, never all of them.
 */
const perSubscriptionInFlight = 4
/** Webhook events of one batch scheduled at once. */
const fanOutConcurrency = 32
/** Connections to receivers are kept open between deliveries (a new TLS handshake per event adds up). */
const agents = { 'http:': new http.Agent({ keepAlive: true, maxSockets: 16 }), 'https:': new https.Agent({ keepAlive: true, maxSockets: 16 }) }
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
 * work item on the deliveries work queue. Delivery: a pull consumer sends each item, records the
 * attempt, and acks it when settled or naks it with the policy's wait, so pending retries live
 * in the stream and survive restarts. Several dispatchers may run: delivery ids are derived from
 * event and subscription, and a recorded attempt number is never recorded twice. Alert events
 * also become alert e-mails on their own work queue (alert-mail.ts).
 */
export async function start(deps: Deps): Promise<() => Promise<void>> {
  const controller = new AbortController()
  const ns = deps.config.namespace
  const sealKey = deriveKey(deps.config.secret, 'webhook-secret-at-rest')
  const onDelivery = (projectId: string, id: string, command: DeliveryCommand) =>
    handleCommand<DeliveryCommand, DeliveryEvent, Delivery>(deps.store, deliveryDecider, { aggregate: 'delivery', projectId, id }, command, () => `evt_${deps.newUlid()}`)

  // Active subscriptions per project, read once a second at most and dropped as soon as any of
  // the project's subscriptions changes on the log (most job events have none to go to).
  const subscriptions = new Map<string, { at: number; subs: Array<{ id: string; events: string }> }>()
  // A change is announced on the log before its row is written: for a moment after it, the
  // project's subscriptions are read afresh every time rather than cached.
  const changedUntil = new Map<string, number>()
  const changes = deps.nats.nc.subscribe(aggregateKindFilter(ns, 'webhook'), {
    callback: (_err, msg) => {
      const projectId = msg.subject.split('.')[2] ?? ''
      subscriptions.delete(projectId)
      changedUntil.set(projectId, Date.now() + 2_000)
    },
  })
  const isFresh = (projectId: string, cached: { at: number } | undefined) =>
    cached !== undefined && Date.now() - cached.at < 1_000 && (changedUntil.get(projectId) ?? 0) < Date.now()
  async function subscriptionsOf(projectId: string): Promise<Array<{ id: string; events: string }>> {
    const cached = subscriptions.get(projectId)
    if (cached && isFresh(projectId, cached)) return cached.subs
    const subs = await deps.sql<{ id: string; events: string }[]>`
      SELECT id, events FROM webhooks WHERE project_id = ${projectId} AND is_active AND NOT deleted`
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

  /** One webhook event to every active subscription of the project whose filter lets it through. */
  async function fanOutEvent(projectId: string, event: { id: string; time: string }, hook: { type: string; data: Record<string, unknown> }): Promise<void> {
    for (const sub of await subscriptionsOf(projectId)) {
      if (!matchesFilter(JSON.parse(sub.events), hook.type)) continue
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
      await deps.nats.js.publish(deliverySubject(ns, projectId, sub.id), JSON.stringify(item), { headers: h })
    }
  }

  /** One attempt at one work item; resolves to the receiver's status, or null when nothing was received. */
  async function send(hook: Webhook, item: WorkItem): Promise<number | null> {
    const verdict = await checkWebhookUrl(hook.url, deps.config.webhookAllowHosts, deps.resolveHost)
    if (!verdict.ok) return null
    const now = deps.now()
    const secrets = [decryptAtRest(sealKey, hook.secret_encrypted)]
    if (hook.previous_secret_encrypted && hook.previous_secret_expires_at && Date.parse(hook.previous_secret_expires_at) > now.getTime()) {
      secrets.push(decryptAtRest(sealKey, hook.previous_secret_encrypted))
    }
    // Connect to the address that was checked, not to the name again (DNS rebinding).
    const pinned = verdict.addresses[0]
    const lookup: LookupFunction | undefined =
      pinned === undefined ? undefined : (_host, options, callback) => {
        const family = pinned.includes(':') ? 6 : 4
        if ((options as { all?: boolean }).all) (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [{ address: pinned, family }])
        else callback(null, pinned, family)
      }
    const client = verdict.url.protocol === 'https:' ? https : http
    return new Promise((resolve) => {
      const request = client.request(
        verdict.url,
        {
          method: 'POST',
          agent: agents[verdict.url.protocol as 'http:' | 'https:'],
          lookup,
          timeout: deps.config.tunables.webhook_timeout_ms,
          headers: {
            'Content-Type': 'application/json',
            'Content-Length': Buffer.byteLength(item.body),
            'User-Agent': userAgent,
            'X-Service-Signature': signatureHeader(secrets, item.body, now),
            'X-Service-Event-Id': item.event_id,
            'X-Service-Event-Type': item.event_type,
          },
        },
        (response) => {
          response.resume()
          response.on('end', () => resolve(response.statusCode ?? null))
          response.on('error', () => resolve(response.statusCode ?? null))
        },
      )
      request.on('timeout', () => request.destroy(new Error('timeout')))
      request.on('error', () => resolve(null))
      request.end(item.body)
    })
  }

  const busy = new Map<string, number>()

  async function deliver(msg: JsMsg): Promise<void> {
    const item = JSON.parse(new TextDecoder().decode(msg.data)) as WorkItem
    const inFlight = busy.get(item.webhook_id) ?? 0
    if (inFlight >= perSubscriptionInFlight) return msg.nak(250)
    busy.set(item.webhook_id, inFlight + 1)
    try {
      await attemptDelivery(msg, item)
    } finally {
      const left = (busy.get(item.webhook_id) ?? 1) - 1
      if (left <= 0) busy.delete(item.webhook_id)
      else busy.set(item.webhook_id, left)
    }
  }

  async function attemptDelivery(msg: JsMsg, item: WorkItem): Promise<void> {
    const delivery = (await deps.store.load<Delivery>({ aggregate: 'delivery', projectId: item.project_id, id: item.delivery_id })).state
    if (delivery === null || delivery.status !== 'pending') return msg.ack()
    // Spec: deleting a subscription leaves pending deliveries alone, so a deleted one still receives.
    const hook = (await deps.store.load<Webhook>(webhookRef(item.project_id, item.webhook_id))).state
    const responseStatus = hook === null ? null : await send(hook, item)
    const attempt = delivery.attempt + 1
    const result = await onDelivery(item.project_id, item.delivery_id, {
      type: 'record_attempt',
      data: { attempt, outcome: outcomeOf(responseStatus), response_status: responseStatus },
      meta: { now: deps.now().toISOString() },
    })
    if (result.state?.status === 'pending') msg.nak(deps.config.tunables.webhook_retry_delays_ms[attempt - 1] ?? 3_600_000)
    else msg.ack()
  }

  function runDeliverer(signal: AbortSignal): Promise<void> {
    return consumeWorkQueue(
      deps.nats,
      {
        stream: deliveriesStreamName(ns),
        durable: delivererConsumerName(ns),
        // Longer than an attempt's time limit, so a slow receiver is not sent the same item twice.
        ackWaitMs: deps.config.tunables.webhook_timeout_ms + 20_000,
        maxAckPending: 10_000,
        parallel: parallelDeliveries,
      },
      deliver,
      signal,
      (err, during) =>
        during === 'handling' ? deps.log.error({ err }, 'dispatcher: delivery failed; it will be retried') : deps.log.error({ err }, 'dispatcher: deliverer restarting'),
    )
  }

  // Most job events are not webhook events, and most projects have no subscription: both are
  // known from the headers and the subject, without decoding the message.
  const accept = ({ subject, eventTypes }: { subject: string; eventTypes: string }) => {
    if (!/job_created|job_succeeded|job_dead_lettered/.test(eventTypes)) return false
    const projectId = subject.split('.')[2] ?? ''
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
      durable: `${dispatcherConsumerName(ns)}_alerts`,
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
  }
}
