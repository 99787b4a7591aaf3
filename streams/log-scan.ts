import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node'
import { isNatsConnected } from './connection.ts'
import { LogUnavailable } from './errors.ts'
import { consumerCreateApiSubject, consumerDeleteApiSubject, consumerNextApiSubject, replySubject, replySubjectsFilter } from './names.ts'

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

/** How long a request of the scan may go unanswered before the log counts as unavailable. */
const answerWithinMs = 5_000

/**
 * How long a read waits for the server to end it. It answers at once; past this the read returns
 * what came, and the scan does not claim to have reached the end.
 */
const noWaitAnswerMs = 1_500

/** The server-side bound of the pull that follows a live wait's first message (20 ms). */
const followUpExpiresNs = 20_000_000

/**
 * A scan's consumer outlives a reader that vanished (a killed process) by this much; a live one
 * pulls at least every `maxWaitMs`.
 */
const inactiveThresholdNs = 60_000_000_000

/** The longest one wait for the next message may last (a long poll, a live feed's keep-alive). */
export const maxWaitMs = 30_000

/**
 * Reads one filtered range of a stream in order, from a start sequence on, through an ephemeral
 * pull consumer without acks (the reading of the tenants' event feed,
 * services/use-cases/events/). Why not nats.js's ordered consumer: a page must know that it has
 * reached the end of what the log holds *now* without waiting, which a pull with `no_wait` says
 * (the server answers 404 once it has nothing more) and nats.js's consumers do not expose.
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
  readonly #queue: ScannedMessage[] = []
  /**
   * The server said it had nothing more (a 404 or 408 ending a pull) and no message came since.
   * Only that status is trusted to mean the end: NATS 2.9's count of pending messages, on the
   * messages and at creation, can be too high once messages were deleted inside the range
   * (retention), and a pull that trusted it would wait for messages that do not exist.
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

  private constructor(nc: NatsConnection, stream: string, consumer: string, inbox: string, subscription: Subscription, pendingAtOpen: number) {
    this.pendingAtOpen = pendingAtOpen
    this.#nc = nc
    this.#stream = stream
    this.#consumer = consumer
    this.#inbox = inbox
    this.#subscription = subscription
  }

  /** Starts a scan of `stream`'s messages on `filterSubject` from a sequence, or from the first stored at or after a time. */
  static async open(nc: NatsConnection, stream: string, filterSubject: string, start: { seq: number } | { time: string }): Promise<LogScan> {
    if (!isNatsConnected(nc)) throw new LogUnavailable('the NATS connection is down; the log cannot be read')
    const config = {
      ...('seq' in start
        ? { deliver_policy: 'by_start_sequence', opt_start_seq: Math.max(1, start.seq) }
        : { deliver_policy: 'by_start_time', opt_start_time: start.time }),
      ack_policy: 'none',
      filter_subject: filterSubject,
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
    const scan = new LogScan(nc, stream, info.name, inbox, subscription, info.num_pending ?? 0)
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

  /**
   * Up to `max` messages the log holds now, without waiting for new ones: an empty answer with
   * `atEnd` means the scan has read everything stored when it asked.
   */
  async read(max: number): Promise<ScannedMessage[]> {
    if (this.#queue.length === 0 && !this.#drained) await this.#pull({ batch: max, no_wait: true }, noWaitAnswerMs)
    return this.#queue.splice(0, max)
  }

  /**
   * Waits up to `ms` (at most maxWaitMs) for at least one message, then answers up to `max` of
   * those that arrived; empty when none came in time or `signal` aborted.
   */
  async wait(max: number, ms: number, signal?: AbortSignal): Promise<ScannedMessage[]> {
    if (this.#queue.length > 0) return this.#queue.splice(0, max)
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
      await this.#pull({ batch: max - this.#queue.length, no_wait: true, expires: followUpExpiresNs }, noWaitAnswerMs)
    }
    return this.#queue.splice(0, max)
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
    const previous = Number(msg.headers?.get('Nats-Expected-Last-Subject-Sequence') || Number.NaN)
    this.#queue.push({
      seq: ack.seq,
      subject: msg.subject,
      eventTypes: msg.headers?.get('Jobsvc-Event-Type') ?? '',
      previousSeq: Number.isInteger(previous) ? previous : null,
      storedAtMs: ack.storedAtMs,
      data: msg.data,
    })
    // Messages are delivered to the pull that asked first; a batch delivered in full ends it.
    for (const [, pull] of this.#open) {
      pull.remaining--
      if (pull.remaining <= 0) pull.done()
      break
    }
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

/** One JetStream API request with its own inbox (consumer creation and deletion: a few per scan). */
async function request(nc: NatsConnection, subject: string, body: string, what: string): Promise<Msg> {
  try {
    return await nc.request(subject, body, { timeout: answerWithinMs })
  } catch (err) {
    throw new LogUnavailable(`JetStream did not answer ${what}: ${(err as Error).message}`)
  }
}
