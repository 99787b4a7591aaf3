import { alertEventsSent, projectEventsSent } from '../../../domain/webhook-payload.ts'
import { consumeBatches } from '../../../streams/consume.ts'
import {
  aggregateKindFilter,
  alertDispatcherConsumerName,
  auditDispatcherConsumerName,
  dispatcherConsumerName,
  eventsStreamName,
  formerDispatcherConsumerName,
  projectDispatcherConsumerName,
} from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { ActiveSubscriptions } from './active-subscriptions.ts'
import { enqueueAlertMails, runMailSender } from './alert-mail.ts'
import { attemptDelivery } from './delivery-attempt.ts'
import { Deliverer } from './deliverer.ts'
import { FanOut } from './fan-out.ts'
import { runOperations } from './operation-runner.ts'
import { WebhookSender } from './webhook-sender.ts'

/** The alert events that send webhooks are also those that send e-mails (alert-mail.ts). */
const mentionsAlertEventSent = new RegExp(alertEventsSent.join('|'))
const mentionsProjectEventSent = new RegExp(projectEventsSent.join('|'))

/**
 * The dispatcher role. Fan-out (fan-out.ts): durable consumers of the job, alert, audit and project events turn
 * each webhook event and each matching active subscription into a scheduled delivery and a work
 * item on the deliveries queue (delivery-queue.ts). The deliverer (deliverer.ts) takes the items
 * off the queue and attempts them (delivery-attempt.ts) with the sender (webhook-sender.ts).
 * Several dispatchers may run: delivery ids are derived from event and subscription. Alert events
 * also become alert e-mails on their own work queue (alert-mail.ts). The leading dispatcher also
 * runs the project's operations, webhook replays among them (operation-runner.ts), whose
 * deliveries go through the same queue, deliverer and slots.
 */
export async function start(deps: Deps): Promise<() => Promise<void>> {
  const controller = new AbortController()
  const ns = deps.config.namespace
  const subscriptions = new ActiveSubscriptions(deps)
  const fanOut = new FanOut(deps, subscriptions)
  const sender = new WebhookSender(deps)
  const deliverer = new Deliverer(deps, (msg, item) => attemptDelivery(deps, sender, msg, item), controller.signal)

  const jobEventsDone = consumeBatches(
    deps.nats,
    {
      stream: eventsStreamName(ns),
      durable: dispatcherConsumerName(ns),
      filterSubject: aggregateKindFilter(ns, 'job'),
      maxBatch: 200,
      accept: (message) => fanOut.acceptsJobEvent(message),
      // Nearly every job message is left out by its header (no webhook event, or a project without
      // subscriptions): the bodies of the few kept are read by sequence. A fan-out taken twice
      // (beside a dispatcher of an earlier version, on the durable this one replaces) schedules
      // each delivery once: delivery ids derive from event and subscription.
      headersOnly: true,
      replaces: formerDispatcherConsumerName(ns),
    },
    (records) => fanOut.handle(records),
    controller.signal,
    (err) => deps.log.error({ err }, 'dispatcher: fan-out failed; retrying'),
  )
  const alertEventsDone = consumeBatches(
    deps.nats,
    {
      stream: eventsStreamName(ns),
      durable: alertDispatcherConsumerName(ns),
      filterSubject: aggregateKindFilter(ns, 'alert'),
      maxBatch: 200,
      accept: ({ eventTypes }) => mentionsAlertEventSent.test(eventTypes),
    },
    async (records) => {
      await fanOut.handle(records)
      await enqueueAlertMails(deps, records)
    },
    controller.signal,
    (err) => deps.log.error({ err }, 'dispatcher: alert fan-out failed; retrying'),
  )
  const checkpointsDone = consumeBatches(
    deps.nats,
    { stream: eventsStreamName(ns), durable: auditDispatcherConsumerName(ns), filterSubject: aggregateKindFilter(ns, 'audit'), maxBatch: 200 },
    (records) => fanOut.handle(records),
    controller.signal,
    (err) => deps.log.error({ err }, 'dispatcher: checkpoint fan-out failed; retrying'),
  )
  const queueEventsDone = consumeBatches(
    deps.nats,
    {
      stream: eventsStreamName(ns),
      durable: projectDispatcherConsumerName(ns),
      filterSubject: aggregateKindFilter(ns, 'project'),
      maxBatch: 200,
      accept: ({ eventTypes }) => mentionsProjectEventSent.test(eventTypes),
    },
    (records) => fanOut.handle(records),
    controller.signal,
    (err) => deps.log.error({ err }, 'dispatcher: queue pause fan-out failed; retrying'),
  )
  const deliverDone = deliverer.run()
  const mailDone = runMailSender(deps, controller.signal)
  const operationsDone = runOperations(deps, controller.signal)
  return async () => {
    controller.abort()
    subscriptions.close()
    await Promise.all([jobEventsDone, alertEventsDone, checkpointsDone, queueEventsDone, deliverDone, mailDone, operationsDone])
    await deliverer.drain()
  }
}
