import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node'
import { isNatsConnected } from './connection.ts'
import { LogUnavailable } from './errors.ts'
import {
  consumerCreateApiSubject,
  consumerDeleteApiSubject,
  consumerNextApiSubject,
  messageGetApiSubject,
  replySubject,
  replySubjectsFilter,
} from './names.ts'

/** One message of a scan, as stored. */
export interface ScannedMessage {
  seq: number
  subject: string
  /** The `Jobsvc-Event-Type` header: the message's event types, comma-separated. */
  eventTypes: string
  /** The subject's previous sequence (`Nats-Expected-Last-Subject-Sequence`; 0: the first), null when absent. */
  previousSeq: number | null
  /** When the log stored it (the server's clock), in ms since the epoch. */
  storedAtMs: number
  data: Uint8Array
}

/** Where a scan starts: at a sequence, or at the first message stored at or after an instant (ISO). */
export type LogScanStart = { seq: number } | { time: string }

/** How long a request of the scan may go unanswered before the log counts as unavailable. */
const answerWithinMs = 5_000

/**
 * How long a read waits for the server to end it. It answers at once; past this the read returns
 * what came, and the scan does not claim to have reached the end.
 */
const noWaitAnswerMs = 1_500

/**
 * The server-side bound of a filtered scan's read (1 s): it ends the pull once the server has
 * looked through the log, whatever its count of pending messages says (see #drained).
 */
const filteredReadExpiresNs = 1_000_000_000

/** The server-side bound of the pull that follows a live wait's first message (20 ms). */
const followUpExpiresNs = 20_000_000

/**
 * How long the scan waits for the server to end that pull before going on without it (what it
 * delivers later still joins the queue): a live reader is held no longer than this by a lost answer.
 */
const followUpAnswerMs = 250

/**
 * A scan's consumer outlives a reader that vanished (a killed process) by this much; a live one
 * pulls at least every `maxWaitMs`.
 */
const inactiveThresholdNs = 60_000_000_000

/** The longest one wait for the next message may last (a long poll, a live feed's keep-alive). */
export const maxWaitMs = 30_000

/**
 * Reads a range of a stream in order, from a start on, through an ephemeral pull consumer without
 * acks, with or without a subject filter (the parts of streams/narrowing-scan.ts, which the
 * tenants' event feed and webhook replays read with). Why not nats.js's ordered consumer: a page
 * must know that it has reached the end of what the log holds *now* without waiting, which a pull
 * with `no_wait` on a consumer without a filter says (the server answers 404 once it has nothing
 * more; see #drained for a filtered one) and nats.js's consumers do not expose.
 *
 * Every message the consumer delivers reaches one subscription, in stream order, and waits in
 * the scan's queue until read; so a pull that ends after its caller stopped waiting (a long
 * poll's deadline) loses nothing, its messages are read by the next call.
 */
export class LogScan {
  readonly #nc: NatsConnection
  readonly #stream: string
  readonly #consumer: string
  readonly #inbox: string
  readonly #subscription: Subscription
  /** Delivered and not yet read: a message the scan keeps, or the sequence of one it passed over. */
  readonly #queue: (ScannedMessage | PassedOver)[] = []
  /** Which delivered messages the scan keeps, by subject (null: all). */
  readonly #keeps: ((subject: string) => boolean) | null
  readonly #filtered: boolean
  /** The last message read or passed over: everything up to it was answered by a read. */
  #through = 0
  #looked = 0
  /**
   * The server said it had nothing more (a 404 or 408 ending a pull) and no message came since.
   * The server answers a `no_wait` pull from its count of the consumer's pending messages, which
   * NATS 2.9 keeps exactly for a consumer without a filter (the messages after its position, less
   * those deleted; retention deleting some later makes it too high, so a pull then waits until
   * the scan gives up on it, and nothing is skipped). For a filtered consumer it counts wrongly
   * from a start inside a block of the stream, too high or too low (test/streams/log-scan.test.ts
   * shows it), and a 404 from too low a count would skip messages. So a filtered scan's reads
   * carry an expiry instead: the server then ends them after looking through the log (a 408 once
   * it delivered some), or at the expiry when nothing came. Its `atEnd` is not proof of the end:
   * a caller learns that otherwise (streams/narrowing-scan.ts asks for the filter's last message).
   */
  #drained = false
  #pulls = 0
  /** Pulls not yet ended by the server (a status) or by having delivered their batch. */
  readonly #open = new Map<string, { remaining: number; done: () => void }>()
  /** A pull was given up on before the server ended it: it may still deliver, so the scan is not reused. */
  #abandoned = false
  #wake: (() => void) | null = null
  #closed = false

  /**
   * Messages on the scan's subjects from its start, as the server counted them when the scan
   * began (a lag figure: NATS 2.9 may count too many once messages were deleted in the range).
   */
  readonly pendingAtOpen: number

  private constructor(
    nc: NatsConnection,
    stream: string,
    consumer: string,
    inbox: string,
    subscription: Subscription,
    pendingAtOpen: number,
    keeps: ((subject: string) => boolean) | null,
    filtered: boolean,
  ) {
    this.pendingAtOpen = pendingAtOpen
    this.#keeps = keeps
    this.#filtered = filtered
    this.#nc = nc
    this.#stream = stream
    this.#consumer = consumer
    this.#inbox = inbox
    this.#subscription = subscription
  }

  /**
   * Starts a scan of `stream`'s messages on `filterSubject` (null: all of them) from a sequence,
   * or from the first stored at or after a time. `keeps`: which of the delivered messages reads
   * answer, by subject (the others are passed over before their headers are parsed).
   */
  static async open(
    nc: NatsConnection,
    stream: string,
    filterSubject: string | null,
    start: LogScanStart,
    keeps: ((subject: string) => boolean) | null = null,
  ): Promise<LogScan> {
    if (!isNatsConnected(nc)) throw new LogUnavailable('the NATS connection is down; the log cannot be read')
    const config = {
      ...('seq' in start
        ? { deliver_policy: 'by_start_sequence', opt_start_seq: Math.max(1, start.seq) }
        : { deliver_policy: 'by_start_time', opt_start_time: start.time }),
      ack_policy: 'none',
      ...(filterSubject === null ? {} : { filter_subject: filterSubject }),
      inactive_threshold: inactiveThresholdNs,
      mem_storage: true,
      num_replicas: 1,
      max_waiting: 16,
    }
    const answer = await request(nc, consumerCreateApiSubject(stream), JSON.stringify({ stream_name: stream, config }), 'creating a log scan')
    const info = JSON.parse(new TextDecoder().decode(answer.data)) as { name?: string; num_pending?: number; error?: { description: string } }
    if (info.error !== undefined || info.name === undefined)
      throw new LogUnavailable(`JetStream refused a log scan: ${info.error?.description ?? 'no consumer name'}`)
    const inbox = createInbox()
    let deliver: (msg: Msg) => void = () => undefined
    const subscription = nc.subscribe(replySubjectsFilter(inbox), { callback: (_err, msg) => deliver(msg) })
    const scan = new LogScan(nc, stream, info.name, inbox, subscription, info.num_pending ?? 0, keeps, filterSubject !== null)
    deliver = (msg) => scan.#onMessage(msg)
    return scan
  }

  /**
   * Whether the scan has read everything the log held when the server last said it had nothing
   * more. False after a read the server did not answer in time: then nothing is known of the end.
   */
  get atEnd(): boolean {
    return this.#queue.length === 0 && this.#drained
  }

  /** Whether no pull may still be open at the server: only such a scan can be kept for a later page. */
  get isSettled(): boolean {
    return !this.#abandoned && this.#open.size === 0 && !this.#closed
  }

  /** Forgets that the end was reached: the next read asks the server again (a kept scan's next page). */
  askAgain(): void {
    this.#drained = false
  }

  /** The sequence of the last message a read answered or passed over (0: none yet). */
  get through(): number {
    return this.#through
  }

  /** Messages reads answered or passed over. */
  get looked(): number {
    return this.#looked
  }

  /**
   * Up to `max` messages the log holds now, without waiting for new ones: on a scan without a
   * filter, an empty answer with `atEnd` means it has read everything stored when it asked. With
   * `keeps`, the answer may be empty without it because every message delivered was passed over
   * (`through` moved). A filtered scan is read only when a message is known to follow its
   * position: with none, the read lasts until its expiry (see #drained). `pullSize`: messages
   * asked of the server at once when none is delivered yet (a skim asks more than it keeps).
   */
  async read(max: number, pullSize = max): Promise<ScannedMessage[]> {
    if (this.#queue.length === 0 && !this.#drained) {
      const batch = Math.max(max, pullSize)
      const body = this.#filtered ? { batch, no_wait: true, expires: filteredReadExpiresNs } : { batch, no_wait: true }
      await this.#pull(body, noWaitAnswerMs)
    }
    return this.#taken(max)
  }

  /**
   * Waits up to `ms` (at most maxWaitMs) for at least one message, then answers up to `max` of
   * those that arrived; empty when none came in time or `signal` aborted.
   */
  async wait(max: number, ms: number, signal?: AbortSignal): Promise<ScannedMessage[]> {
    if (this.#queue.length > 0) return this.#taken(max)
    const waitMs = Math.min(Math.max(ms, 0), maxWaitMs)
    if (waitMs > 0 && signal?.aborted !== true) {
      const onAbort = () => {
        // The pull stays open at the server until its message or its expiry.
        this.#abandoned = true
        this.#wake?.()
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      try {
        // One message per pull: it ends with the message, so none is left open to deliver later.
        this.#drained = false
        await this.#pull({ batch: 1, expires: waitMs * 1_000_000 }, waitMs + answerWithinMs)
      } finally {
        signal?.removeEventListener('abort', onAbort)
      }
    }
    // What else is stored already comes with it. The server's own short expiry bounds this pull
    // even where its count of pending messages is wrong (see #drained), so none stays open.
    if (this.#queue.length > 0 && this.#queue.length < max) {
      await this.#pull({ batch: max - this.#queue.length, no_wait: true, expires: followUpExpiresNs }, followUpAnswerMs)
    }
    return this.#taken(max)
  }

  /** The first `max` delivered messages, without those passed over. */
  #taken(max: number): ScannedMessage[] {
    const taken = this.#queue.splice(0, max)
    if (taken.length === 0) return []
    this.#through = taken[taken.length - 1]!.seq
    this.#looked += taken.length
    return this.#keeps === null ? (taken as ScannedMessage[]) : taken.filter((m): m is ScannedMessage => !('passedOver' in m))
  }

  /** Stops the scan and removes its consumer (not awaited: the inactivity threshold removes it if this fails). */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#subscription.unsubscribe()
    for (const pull of this.#open.values()) pull.done()
    this.#open.clear()
    this.#wake?.()
    if (isNatsConnected(this.#nc)) {
      request(this.#nc, consumerDeleteApiSubject(this.#stream, this.#consumer), '', 'deleting a log scan').catch(() => undefined)
    }
  }

  /**
   * Sends one pull and resolves when the server has ended it (its batch delivered, or a status),
   * or after `withinMs` without an end: the scan then knows nothing of the end (`atEnd` stays
   * false), and what the pull delivers later still joins the queue in order.
   */
  #pull(body: Record<string, unknown>, withinMs: number): Promise<void> {
    if (this.#closed) return Promise.resolve()
    if (!isNatsConnected(this.#nc)) return Promise.reject(new LogUnavailable('the NATS connection is down; the log cannot be read'))
    const token = (this.#pulls++).toString(36)
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer)
        this.#open.delete(token)
        if (this.#wake === done) this.#wake = null
        resolve()
      }
      const timer = setTimeout(() => {
        this.#abandoned = true
        done()
      }, withinMs)
      this.#open.set(token, { remaining: Number(body.batch), done })
      this.#wake = done
      this.#nc.publish(consumerNextApiSubject(this.#stream, this.#consumer), JSON.stringify(body), { reply: replySubject(this.#inbox, token) })
    })
  }

  #onMessage(msg: Msg): void {
    if (this.#closed) return
    const token = msg.subject.slice(this.#inbox.length + 1)
    if (msg.data.length === 0 && msg.headers !== undefined && msg.headers.code >= 100 && !msg.reply) {
      // A status of the pull sent with this token: 404 (nothing now), 408 (nothing more before
      // it expired, or after the part of its batch there was), 409 (ended otherwise).
      const code = msg.headers.code
      const pull = this.#open.get(token)
      if (pull === undefined || code === 100) return
      // Only a pull still open speaks for now: a late status of one given up on does not.
      if (code === 404 || code === 408) this.#drained = true
      pull.done()
      return
    }
    const ack = parseAckReply(msg.reply)
    if (ack === null) return
    this.#drained = false
    if (this.#keeps !== null && !this.#keeps(msg.subject)) this.#queue.push({ seq: ack.seq, passedOver: true })
    else this.#queue.push(scanned(msg, ack))
    // Messages are delivered to the pull that asked first; a batch delivered in full ends it.
    for (const [, pull] of this.#open) {
      pull.remaining--
      if (pull.remaining <= 0) pull.done()
      break
    }
  }
}

/** A delivered message the scan does not keep: its sequence alone. */
interface PassedOver {
  seq: number
  passedOver: true
}

/** A delivered message as a read answers it. */
function scanned(msg: Msg, ack: { seq: number; storedAtMs: number }): ScannedMessage {
  const previous = Number(msg.headers?.get('Nats-Expected-Last-Subject-Sequence') || Number.NaN)
  return {
    seq: ack.seq,
    subject: msg.subject,
    eventTypes: msg.headers?.get('Jobsvc-Event-Type') ?? '',
    previousSeq: Number.isInteger(previous) ? previous : null,
    storedAtMs: ack.storedAtMs,
    data: msg.data,
  }
}

/**
 * The stream sequence of a delivered message, from its ack subject:
 * `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>`, or the form with a
 * domain and account hash after `ACK` and a token at the end (12 tokens).
 */
function parseAckReply(reply: string | undefined): { seq: number; storedAtMs: number } | null {
  if (reply === undefined || !reply.startsWith('$JS.ACK.')) return null
  const t = reply.split('.')
  const base = t.length >= 12 ? 4 : 2
  const seq = Number(t[base + 3])
  // Nanoseconds: more than a double holds exactly, and milliseconds are all that is needed.
  const storedAtMs = Number((t[base + 5] ?? '').slice(0, -6))
  return Number.isInteger(seq) ? { seq, storedAtMs: Number.isFinite(storedAtMs) ? storedAtMs : 0 } : null
}

/** A stored message as the log's leader answers a lookup: its sequence and when it was stored. */
export interface StoredAt {
  seq: number
  storedAtMs: number
}

/**
 * The last message stored on any of `subjects` (wildcards allowed: then NATS 2.9 walks the
 * stream's blocks back from its end until one holds a match), null when none is.
 */
export async function lastStoredOn(nc: NatsConnection, stream: string, subjects: readonly string[]): Promise<StoredAt | null> {
  let last: StoredAt | null = null
  for (const subject of subjects) {
    const found = await lookUp(nc, stream, { last_by_subj: subject })
    if (found !== null && (last === null || found.seq > last.seq)) last = found
  }
  return last
}

/** The first message stored on `subject` at or after `seq`, null when none is. */
export function firstStoredOn(nc: NatsConnection, stream: string, subject: string, seq: number): Promise<StoredAt | null> {
  return lookUp(nc, stream, { next_by_subj: subject, seq: Math.max(1, seq) })
}

async function lookUp(nc: NatsConnection, stream: string, query: Record<string, unknown>): Promise<StoredAt | null> {
  if (!isNatsConnected(nc)) throw new LogUnavailable('the NATS connection is down; the log cannot be read')
  const answer = await request(nc, messageGetApiSubject(stream), JSON.stringify(query), 'a lookup of the log')
  const body = JSON.parse(new TextDecoder().decode(answer.data)) as {
    message?: { seq: number; time: string }
    error?: { code: number; err_code?: number; description: string }
  }
  if (body.message !== undefined) return { seq: body.message.seq, storedAtMs: Date.parse(body.message.time) }
  // 10037: no message found.
  if (body.error?.err_code === 10037 || body.error?.code === 404) return null
  throw new LogUnavailable(`JetStream refused a lookup of the log: ${body.error?.description ?? 'no answer'}`)
}

/** One JetStream API request with its own inbox (consumer creation and deletion: a few per scan). */
async function request(nc: NatsConnection, subject: string, body: string, what: string): Promise<Msg> {
  try {
    return await nc.request(subject, body, { timeout: answerWithinMs })
  } catch (err) {
    throw new LogUnavailable(`JetStream did not answer ${what}: ${(err as Error).message}`)
  }
}
