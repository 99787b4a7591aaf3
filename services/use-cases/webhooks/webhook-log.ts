import { decodeTime } from 'ulid'
import type { WebhookEventType } from '../../../domain/webhook.ts'
import { webhookEventOfMessage, type WebhookEventContent } from '../../../domain/webhook-payload.ts'
import { LogUnavailable } from '../../../streams/errors.ts'
import { decodeEventMessage, type EventMessage } from '../../../streams/event-store.ts'
import type { ScannedMessage } from '../../../streams/log-scan.ts'
import { NarrowingScan } from '../../../streams/narrowing-scan.ts'
import { eventsStreamName, projectKindFilter, projectSubjectsFilter } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * The webhook events the log holds, read back: what a redelivery sends again and what a replay
 * walks. A webhook event is made from a log event and the aggregate's state after its message
 * (domain/webhook-payload.ts), exactly as fan-out made it, so the body is the same text: the same
 * event id, time and data.
 */

/** A webhook event of the log: the message it is in, its id and time, and what it says. */
export interface LoggedWebhookEvent {
  seq: number
  id: string
  time: string
  content: WebhookEventContent
}

/** The log event each webhook event type is made from. */
const logEventTypeOf: Record<WebhookEventType, string> = {
  'job.created': 'job_created',
  'job.succeeded': 'job_succeeded',
  'job.failed': 'job_dead_lettered',
  'alert.triggered': 'alert_triggered',
  'alert.resolved': 'alert_resolved',
  'audit.checkpoint': 'checkpoint_issued',
  'queue.paused': 'queue_paused',
  'queue.resumed': 'queue_resumed',
  'job.expired': 'job_cancelled',
  'job.activated': 'job_activated',
}

/** The aggregate each webhook event type's log events are on. */
const aggregateOf = (type: WebhookEventType): 'job' | 'alert' | 'audit' | 'project' => {
  const prefix = type.split('.')[0]!
  return prefix === 'queue' ? 'project' : (prefix as 'job' | 'alert' | 'audit')
}

/**
 * An event's time comes from the deciding process's clock, the log's from the server's: a range
 * by event time is read from this much earlier, and read on this much past its end.
 */
const clockMarginMs = 10_000

/** Messages asked of the log at once. */
const readBatch = 256

/** Reads in a row the log leaves unanswered before a scan gives up (each is answered within 1.5 s). */
const maxUnansweredReads = 3

/** A redelivery of a delivery older than `event_seq` looks for its event among this many messages from its time. */
const maxMessagesSearched = 50_000

/** The webhook events of one message, in order (none when its aggregate sends none). */
export function webhookEventsOf(seq: number, message: EventMessage): LoggedWebhookEvent[] {
  const found: LoggedWebhookEvent[] = []
  for (const event of message.events) {
    const content = webhookEventOfMessage(message, event)
    if (content !== null) found.push({ seq, id: event.id, time: event.time, content })
  }
  return found
}

/** The range a replay reads: events of `types` whose time is within [since, until], in messages up to `throughSeq`. */
export interface WebhookEventRange {
  since: string
  until: string | null
  throughSeq: number
  types: readonly WebhookEventType[]
}

/** Opens a scan of the project's messages that may hold events of `types`: one kind of aggregate when every type is of it. */
async function openScan(deps: Deps, projectId: string, types: readonly WebhookEventType[], start: { seq: number } | { time: string }) {
  const ns = deps.config.namespace
  const kinds = new Set(types.map(aggregateOf))
  const subjects = kinds.size === 1 ? projectKindFilter(ns, projectId, [...kinds][0]!) : projectSubjectsFilter(ns, projectId)
  return NarrowingScan.open(deps.nats.nc, eventsStreamName(ns), subjects, start)
}

/** The next messages of a scan; empty once it has read everything the log holds. */
async function readOn(scan: NarrowingScan): Promise<ScannedMessage[]> {
  for (let unanswered = 0; ; unanswered++) {
    const messages = await scan.read(readBatch)
    if (messages.length > 0 || scan.atEnd) return messages
    if (unanswered + 1 >= maxUnansweredReads) throw new LogUnavailable('JetStream did not answer a read of the log in time')
  }
}

/** Whether a message may hold one of `logTypes`, from its header alone (a message without it is decoded to see). */
function mayHold(message: ScannedMessage, logTypes: ReadonlySet<string>): boolean {
  return message.eventTypes === '' || message.eventTypes.split(',').some((type) => logTypes.has(type))
}

/** The range's webhook events among `messages` (in log order), and whether the range ends within them. */
function eventsAmong(
  projectId: string,
  range: WebhookEventRange,
  messages: readonly ScannedMessage[],
): { events: LoggedWebhookEvent[]; ended: boolean } {
  const logTypes = new Set(range.types.map((type) => logEventTypeOf[type]))
  const pastUntil = range.until === null ? null : new Date(Date.parse(range.until) + clockMarginMs).toISOString()
  const events: LoggedWebhookEvent[] = []
  for (const scanned of messages) {
    if (scanned.seq > range.throughSeq) return { events, ended: true }
    if (!mayHold(scanned, logTypes)) continue
    const message = decodeEventMessage(scanned.data, scanned.seq)
    if (message.project_id !== projectId) continue
    let ended = false
    for (const event of webhookEventsOf(scanned.seq, message)) {
      if (pastUntil !== null && event.time > pastUntil) ended = true
      if (!range.types.includes(event.content.type) || event.time < range.since) continue
      if (range.until !== null && event.time > range.until) continue
      events.push(event)
    }
    if (ended) return { events, ended: true }
  }
  return { events, ended: false }
}

/** Where a read of a range starts: at a message's sequence, or (null) at the range's start. */
function startOf(range: WebhookEventRange, fromSeq: number | null): { seq: number } | { time: string } {
  return fromSeq !== null ? { seq: fromSeq } : { time: new Date(Date.parse(range.since) - clockMarginMs).toISOString() }
}

/** The range's webhook events, in log order, a batch of messages at a time, through one scan (a count). */
export async function* webhookEventsInRange(
  deps: Deps,
  projectId: string,
  range: WebhookEventRange,
  signal?: AbortSignal,
): AsyncGenerator<LoggedWebhookEvent[]> {
  const scan = await openScan(deps, projectId, range.types, startOf(range, null))
  try {
    for (;;) {
      if (signal?.aborted) return
      const messages = await readOn(scan)
      if (messages.length === 0) return
      const { events, ended } = eventsAmong(projectId, range, messages)
      if (events.length > 0) yield events
      if (ended) return
    }
  } finally {
    scan.close()
  }
}

/**
 * One batch of the range's webhook events from the message at `fromSeq` on (null: from the range's
 * start), through a scan of its own, and the sequence the next batch starts at (null: the range
 * is read). A run that waits between batches (its pace) holds no consumer on the log meanwhile.
 */
export async function webhookEventsFrom(
  deps: Deps,
  projectId: string,
  range: WebhookEventRange,
  fromSeq: number | null,
): Promise<{ events: LoggedWebhookEvent[]; nextSeq: number | null }> {
  const scan = await openScan(deps, projectId, range.types, startOf(range, fromSeq))
  try {
    const messages = await readOn(scan)
    if (messages.length === 0) return { events: [], nextSeq: null }
    const { events, ended } = eventsAmong(projectId, range, messages)
    return { events, nextSeq: ended ? null : messages.at(-1)!.seq + 1 }
  } finally {
    scan.close()
  }
}

/**
 * The webhook event `eventId` of the project: read at `eventSeq` (one direct get) when the
 * delivery kept it, else looked for from the time its id encodes (deliveries scheduled before
 * `event_seq` was kept). Null when the log no longer holds it (retention removed its job).
 */
export async function findWebhookEvent(deps: Deps, projectId: string, eventId: string, eventSeq: number | null): Promise<LoggedWebhookEvent | null> {
  const ns = deps.config.namespace
  if (eventSeq !== null) {
    const record = await deps.store.nextOn(projectSubjectsFilter(ns, projectId), eventSeq)
    if (record === null || record.seq !== eventSeq) return null
    return webhookEventsOf(record.seq, record.message).find((e) => e.id === eventId) ?? null
  }
  let decidedAt: number
  try {
    decidedAt = decodeTime(eventId.replace(/^evt_/, ''))
  } catch {
    return null
  }
  const logTypes = new Set(Object.values(logEventTypeOf))
  const notAfter = new Date(decidedAt + clockMarginMs).toISOString()
  const scan = await openScan(deps, projectId, Object.keys(logEventTypeOf) as WebhookEventType[], {
    time: new Date(decidedAt - clockMarginMs).toISOString(),
  })
  try {
    for (let searched = 0; searched < maxMessagesSearched;) {
      const messages = await readOn(scan)
      if (messages.length === 0) return null
      searched += messages.length
      for (const scanned of messages) {
        if (!mayHold(scanned, logTypes)) continue
        const message = decodeEventMessage(scanned.data, scanned.seq)
        const found = webhookEventsOf(scanned.seq, message).find((e) => e.id === eventId)
        if (found !== undefined) return found
        if ((message.events[0]?.time ?? '') > notAfter) return null
      }
    }
    return null
  } finally {
    scan.close()
  }
}
