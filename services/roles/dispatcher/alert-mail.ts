/**
 * Alert e-mails, driven by the log like webhooks: the dispatcher's consumer of alert events turns
 * each `alert_triggered` / `alert_resolved` into one work item per address on the `<ns>_mail`
 * work queue, and a sender takes items off it, sends them over SMTP, and acks each once sent.
 * An SMTP server that refuses or cannot be reached gets the item again after
 * `mail_retry_delays_ms`, in turn; after the last wait the item is given up and logged. A crash
 * anywhere in between loses nothing: the alert event is redelivered until its items are on the
 * queue (a message id per event and address drops the repeats), and an item is redelivered until
 * it is acked.
 */
import type { JsMsg } from '@nats-io/jetstream'
import { headers as natsHeaders } from '@nats-io/transport-node'
import type { Alert, AlertEvent } from '../../../domain/alert.ts'
import { consumeWorkQueue } from '../../../streams/consume.ts'
import type { EventRecord, StoredEvent } from '../../../streams/event-store.ts'
import { alertMailSubject, mailerConsumerName, mailStreamName } from '../../../streams/names.ts'
import { projectHandler } from '../../../streams/aggregates.ts'
import { quotedLine, type Mail } from '../../infrastructure/mailer.ts'
import { alertRecipient } from '../../use-cases/alerts/alert-recipients.ts'
import { mailUser } from '../../use-cases/platform/user-mail.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** Items sent at once: one slow SMTP exchange does not hold up the others. */
const parallelSends = 4
/** Longer than nodemailer's own socket timeout (10 min), so a slow send is not handed out twice. */
const sendAckWaitMs = 11 * 60 * 1000

interface MailItem extends Mail {
  project_id: string
  alert_id: string
  event_id: string
}

const describe = (a: Alert) =>
  `${a.kind === 'dead_letter_count' ? `dead-lettered jobs in the last ${a.window_minutes} min` : a.kind === 'queue_depth' ? 'pending jobs' : 'age of the oldest pending job (s)'}` +
  `${a.queue === null ? '' : ` in queue ${a.queue}`}`

/** Longest alert name a subject shows; the whole name is in the body. */
const maxSubjectName = 60
/** Longest project name a subject shows. */
const maxSubjectProject = 40

/** The e-mails an alert event sends: one per address of the alert, none for other events. */
export function alertMailsOf(alert: Alert, event: AlertEvent, projectName: string | null): Mail[] {
  if (event.type !== 'alert_triggered' && event.type !== 'alert_resolved') return []
  const firing = event.type === 'alert_triggered'
  const { value, threshold } = event.data
  const project = projectName === null ? alert.project_id : quotedLine(projectName, maxSubjectProject)
  const subject = `${firing ? '[alert] ' : '[resolved] '}${quotedLine(alert.name, maxSubjectName)} in project ${project}`
  const name = quotedLine(alert.name, Number.MAX_SAFE_INTEGER)
  const text = firing
    ? `The alert ${name} of project ${alert.project_id} is firing: ${describe(alert)} is ${value}, above the threshold of ${threshold}.\n`
    : `The alert ${name} of project ${alert.project_id} is resolved: ${describe(alert)} is ${value}, at or below the threshold of ${threshold}.\n`
  return alert.email.map((to) => ({ to, subject, text }))
}

/** Puts the e-mails of a batch of alert events on the work queue (handler of the alerts consumer). */
export async function enqueueAlertMails(deps: Deps, records: readonly EventRecord[]): Promise<void> {
  const ns = deps.config.namespace
  for (const record of records) {
    const alert = record.message.state as Alert | null
    if (record.message.aggregate !== 'alert' || alert === null || alert.email.length === 0) continue
    for (const event of record.message.events as StoredEvent<AlertEvent>[]) {
      if (event.type !== 'alert_triggered' && event.type !== 'alert_resolved') continue
      const project = (await projectHandler.load(deps.store, projectHandler.ref(alert.project_id))).state
      for (const mail of alertMailsOf(alert, event, project?.name ?? null)) {
        const item: MailItem = { ...mail, project_id: alert.project_id, alert_id: alert.id, event_id: event.id }
        const h = natsHeaders()
        h.set('Nats-Msg-Id', `${event.id}:${mail.to}`)
        await deps.nats.js.publish(alertMailSubject(ns, alert.project_id), JSON.stringify(item), { headers: h })
      }
    }
  }
}

/**
 * Sends one item; acks it once sent, or leaves it for its next wait, or gives it up after the
 * last. An address that is no longer a member's (removed from the project, account deleted or
 * address changed since the alert was written) gets nothing: the item is dropped and logged; so
 * does a member who turned alert e-mails off or whose address is undeliverable (user-mail.ts).
 */
async function sendItem(deps: Deps, msg: JsMsg): Promise<void> {
  const item = JSON.parse(msg.string()) as MailItem
  try {
    const recipient = await alertRecipient(deps, item.project_id, item.to)
    if (recipient === null) {
      deps.log.warn(
        { alert_id: item.alert_id, project_id: item.project_id, event_id: item.event_id },
        "alert e-mail not sent: the address is no longer a member's",
      )
      msg.ack()
      return
    }
    await mailUser(deps, recipient, 'alert_emails', { to: item.to, subject: item.subject, text: item.text })
    msg.ack()
  } catch (err) {
    const delays = deps.config.tunables.mail_retry_delays_ms
    const attempt = msg.info.deliveryCount
    const context = { err, alert_id: item.alert_id, project_id: item.project_id, event_id: item.event_id, attempt }
    if (attempt > delays.length) {
      deps.log.error(context, 'alert e-mail given up after its last attempt')
      msg.term()
      return
    }
    deps.log.warn({ ...context, retry_in_ms: delays[attempt - 1] }, 'alert e-mail not sent; it will be tried again')
    msg.nak(delays[attempt - 1])
  }
}

/** The sender: a durable consumer of the mail work queue, until `signal` aborts. */
export function runMailSender(deps: Deps, signal: AbortSignal): Promise<void> {
  const ns = deps.config.namespace
  return consumeWorkQueue(
    deps.nats,
    { stream: mailStreamName(ns), durable: mailerConsumerName(ns), ackWaitMs: sendAckWaitMs, maxAckPending: 1_000, parallel: parallelSends },
    (msg) => sendItem(deps, msg),
    signal,
    (err, during) =>
      deps.log.error({ err }, during === 'handling' ? 'dispatcher: an alert e-mail item could not be handled' : 'dispatcher: mail sender restarting'),
  )
}
