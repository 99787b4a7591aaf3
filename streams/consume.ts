import { AckPolicy, DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream'
import type { NatsHandles } from './connection.ts'
import { decodeEventMessage, eventHeaders, type DomainEventShape, type EventMessage, type EventRecord } from './event-store.ts'

export interface BatchConsumerOptions {
  stream: string
  durable: string
  filterSubject: string
  /** Largest batch handed to `handle` at once. */
  maxBatch: number
  /**
   * While the log is busy (the previous batch was handled less than this long before the next
   * message came), a batch waits up to this long from its first message for more to join it
   * before it is handled. Each batch has a fixed cost (the projector's: a transaction, every
   * projection's checkpoint); at a few thousand messages a second, handled as they trickle in,
   * that cost was most of Postgres's CPU. On a quiet log a message is handled at once. 0: never.
   */
  lingerMs?: number
  /**
   * Where the handler's own durable position says to resume (its checkpoint + 1). When given,
   * the consumer is re-created there whenever it disagrees, or still holds unacked messages from
   * a crashed run: redelivery after ack_wait would otherwise arrive after newer messages.
   */
  resumeFrom?: () => Promise<number>
  /**
   * Messages for which this returns false are not decoded nor handed over (they are still acked
   * with their batch): a consumer interested in a few event types reads the type header only.
   */
  accept?: (message: { subject: string; eventTypes: string }) => boolean
  /**
   * The consumer delivers headers alone (JetStream's `headers_only`), and only the accepted
   * messages' bodies are read, one direct get each, all of a batch's in flight together: for a
   * reader that accepts few messages, most of the log costs it neither the bytes nor the decoding.
   */
  headersOnly?: boolean
  /**
   * A durable of an earlier version this one takes over from: when this one is missing, it is
   * created where that one stood (its ack floor + 1), and that one is given an inactivity limit
   * so the server removes it once no process of the earlier version pulls from it. Both may run
   * during a rolling upgrade; the handler must then take a message twice without harm.
   */
  replaces?: string
}

/** How long a replaced durable lasts once nothing pulls from it. */
const replacedDurableInactiveMs = 10 * 60_000

/**
 * Creates the durable consumer if it is missing. NATS 2.9 takes one filter subject (a string,
 * not an array). Ack policy "all": its single consumer (the leading projector) handles messages
 * in order, so acking a batch's last message acks the batch.
 */
export async function ensureDurable(nats: NatsHandles, opts: Omit<BatchConsumerOptions, 'maxBatch'>, startSeq = 1): Promise<void> {
  try {
    await nats.jsm.consumers.info(opts.stream, opts.durable)
    return
  } catch {
    // missing: created below
  }
  if (opts.replaces !== undefined && startSeq === 1) {
    const former = await nats.jsm.consumers.info(opts.stream, opts.replaces).catch(() => null)
    if (former !== null) {
      startSeq = former.ack_floor.stream_seq + 1
      await nats.jsm.consumers.update(opts.stream, opts.replaces, { inactive_threshold: replacedDurableInactiveMs * 1_000_000 })
    }
  }
  await nats.jsm.consumers.add(opts.stream, {
    durable_name: opts.durable,
    ack_policy: AckPolicy.All,
    filter_subject: opts.filterSubject,
    headers_only: opts.headersOnly ?? false,
    ...(startSeq > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: startSeq } : { deliver_policy: DeliverPolicy.All }),
    ack_wait: 60_000_000_000,
    max_ack_pending: 20_000,
  })
}

/**
 * Runs `handle` on batches of event records in stream order until `signal` aborts. A batch is
 * whatever has arrived while the previous one was handled (at most `maxBatch`), so a quiet log
 * is handled message by message with no added latency and a busy one in large batches. The batch
 * is acked only after `handle` resolves; if it throws, the consumer is restarted and the
 * unacked messages come again.
 */
export async function consumeBatches(
  nats: NatsHandles,
  opts: BatchConsumerOptions,
  handle: (records: EventRecord[]) => Promise<void>,
  signal: AbortSignal,
  onError: (err: unknown) => void,
): Promise<void> {
  while (!signal.aborted) {
    try {
      await ensureDurableAt(nats, opts)
      const consumer = await nats.js.consumers.get(opts.stream, opts.durable)
      // Heartbeats as the follower's: a pull lost with its server (a cluster's consumer leader
      // changing) is noticed after two missed ones, not after nats.js's default 30 s.
      const messages = await consumer.consume({
        max_messages: Math.max(opts.maxBatch * 2, 100),
        expires: 4 * followHeartbeatMs,
        idle_heartbeat: followHeartbeatMs,
      })
      const stop = () => void messages.stop()
      signal.addEventListener('abort', stop, { once: true })
      // An abort that came while the consumer was being set up fires no listener added after it;
      // on a quiet log the loop below would then wait forever (a projector that never steps down).
      if (signal.aborted) stop()
      void (async () => {
        for await (const status of messages.status()) {
          if (restartOn.has(status.type)) {
            stop()
            break
          }
        }
      })().catch(() => undefined)
      /** Handles the batch's accepted messages, then acks the batch (its last message acks all). */
      const settle = async (batch: JsMsg[]) => {
        const accepted =
          opts.accept === undefined
            ? batch
            : batch.filter((m) => opts.accept!({ subject: m.subject, eventTypes: m.headers?.get('Jobsvc-Event-Type') ?? '' }))
        if (accepted.length > 0) await handle(opts.headersOnly === true ? await bodiesOf(nats, opts.stream, accepted) : accepted.map(toRecord))
        batch.at(-1)!.ack()
      }
      const iterator = messages[Symbol.asyncIterator]()
      let next = iterator.next()
      try {
        let batch: JsMsg[] = []
        const linger = opts.lingerMs ?? 0
        let handledAt = Number.NEGATIVE_INFINITY
        /** Until when the batch being gathered may wait for more (no later than now: it does not). */
        let lingerUntil = 0
        for (let r = await next; !r.done; r = await next) {
          if (batch.length === 0) {
            const now = Date.now()
            lingerUntil = now - handledAt < linger ? now + linger : now
          }
          batch.push(r.value)
          next = iterator.next()
          if (batch.length < opts.maxBatch && (await hasArrived(messages, next))) continue
          if (batch.length < opts.maxBatch && (await arrivesWithin(next, lingerUntil - Date.now()))) continue
          await settle(batch)
          handledAt = Date.now()
          batch = []
          if (signal.aborted) break
        }
        // Stopped for a restart while a batch was being gathered: it is handled now rather than
        // redelivered only after the ack wait (the projections skip what they already applied).
        if (batch.length > 0 && !signal.aborted) await settle(batch)
      } finally {
        signal.removeEventListener('abort', stop)
        messages.stop()
        next.catch(() => undefined)
      }
    } catch (err) {
      if (signal.aborted) return
      onError(err)
      await new Promise((r) => setTimeout(r, 500))
    }
  }
}

/**
 * True when the next message is already buffered, so it can join the batch without waiting.
 * `getPending()` alone cannot say so: nats.js 3.4 keeps counting the status callbacks it has
 * already run among the pending messages, so it may stay above 0 with nothing buffered, and a
 * batch waiting for that phantom message would sit unhandled until the log moves again. Zero is
 * exact; otherwise the next message counts as arrived only if it is delivered before the event
 * loop turns (a buffered one resolves within microtasks).
 */
async function hasArrived(messages: { getPending(): number }, next: Promise<unknown>): Promise<boolean> {
  if (messages.getPending() === 0) return false
  return Promise.race([
    next.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((resolve) => setImmediate(resolve, false)),
  ])
}

/** True when the next message (or the end of the messages) comes within `ms`; false at once when `ms` ≤ 0. */
async function arrivesWithin(next: Promise<unknown>, ms: number): Promise<boolean> {
  if (ms <= 0) return false
  let timer: NodeJS.Timeout | undefined
  const arrived = await Promise.race([
    next.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((resolve) => (timer = setTimeout(resolve, ms, false))),
  ])
  clearTimeout(timer)
  return arrived
}

async function ensureDurableAt(nats: NatsHandles, opts: BatchConsumerOptions): Promise<void> {
  if (opts.resumeFrom === undefined) return ensureDurable(nats, opts)
  const wanted = await opts.resumeFrom()
  const info = await nats.jsm.consumers.info(opts.stream, opts.durable).catch(() => null)
  if (info !== null && info.num_ack_pending === 0 && info.ack_floor.stream_seq + 1 === wanted) return
  if (info !== null) await nats.jsm.consumers.delete(opts.stream, opts.durable)
  await ensureDurable(nats, opts, wanted)
}

function toRecord(m: JsMsg): EventRecord {
  return { seq: m.seq, subject: m.subject, message: decodeEventMessage(m.data, m.seq) }
}

/**
 * The records of messages delivered without their bodies: each read by sequence, all in flight
 * together. A direct get may be answered by a replica that has not stored the message yet (a
 * cluster): a miss is asked again of the stream's leader, and a message the leader no longer has
 * either (removed by retention or the stream's limits since) is left out, as a consumer would skip it.
 */
async function bodiesOf(nats: NatsHandles, stream: string, messages: readonly JsMsg[]): Promise<EventRecord[]> {
  const read = async (m: JsMsg): Promise<EventRecord | null> => {
    const stored = (await nats.jsm.direct.getMessage(stream, { seq: m.seq })) ?? (await nats.jsm.streams.getMessage(stream, { seq: m.seq }))
    return stored === null ? null : { seq: m.seq, subject: m.subject, message: decodeEventMessage(stored.data, m.seq) }
  }
  return (await Promise.all(messages.map(read))).filter((r): r is EventRecord => r !== null)
}

export interface WorkQueueOptions {
  stream: string
  durable: string
  /** Longer than one `handle` may take, or its message is handed out again meanwhile. */
  ackWaitMs: number
  maxAckPending: number
  /** Messages handled at once. */
  parallel: number
}

/**
 * Runs `handle` on the messages of a work-queue stream through a durable consumer with explicit
 * acks, `parallel` at a time, until `signal` aborts. `handle` settles each message itself (ack,
 * nak with a wait, term); one that throws is reported to `onError` and nak'ed for 1 s. The
 * consumer is created if missing and restarted after a failure.
 */
export async function consumeWorkQueue(
  nats: NatsHandles,
  opts: WorkQueueOptions,
  handle: (msg: JsMsg) => Promise<void>,
  signal: AbortSignal,
  onError: (err: unknown, during: 'handling' | 'consuming') => void,
): Promise<void> {
  while (!signal.aborted) {
    try {
      await nats.jsm.consumers.info(opts.stream, opts.durable).catch(() =>
        nats.jsm.consumers.add(opts.stream, {
          durable_name: opts.durable,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: opts.ackWaitMs * 1_000_000,
          max_ack_pending: opts.maxAckPending,
        }),
      )
      const consumer = await nats.js.consumers.get(opts.stream, opts.durable)
      const messages = await consumer.consume({ max_messages: opts.parallel })
      const stop = () => void messages.stop()
      signal.addEventListener('abort', stop, { once: true })
      if (signal.aborted) stop()
      const inFlight = new Set<Promise<void>>()
      for await (const msg of messages) {
        const work = handle(msg)
          .catch((err) => {
            onError(err, 'handling')
            msg.nak(1_000)
          })
          .finally(() => inFlight.delete(work))
        inFlight.add(work)
        if (inFlight.size >= opts.parallel) await Promise.race(inFlight)
      }
      await Promise.all(inFlight)
      signal.removeEventListener('abort', stop)
    } catch (err) {
      if (signal.aborted) return
      onError(err, 'consuming')
      await new Promise((r) => setTimeout(r, 500))
    }
  }
}

/** A message of the log as a follower sees it: what routing needs, and the body decoded only on demand. */
export interface FollowedEvent {
  seq: number
  subject: string
  /** The `Jobsvc-Event-Type` header: the message's event types, comma-separated. */
  eventTypes: string
  /** The body's size in bytes. */
  size: number
  decode<E extends DomainEventShape, S>(): EventMessage<E, S>
}

export interface FollowOptions {
  stream: string
  filterSubject: string
  /** The first stream sequence to hand over. */
  startSeq: number
  /**
   * Told when the follower is known to stall (a missing consumer, missed heartbeats, a failure:
   * false) and when messages or heartbeats flow again (true).
   */
  onLive?: (live: boolean) => void
}

/**
 * The server's heartbeat while a pull waits with nothing to deliver. Two missed ones restart the
 * follower, so this bounds how long it can stall unnoticed (about 2 × this), for an idle
 * heartbeat message every few seconds.
 */
const followHeartbeatMs = 2_500

/** Pause before a follower starts again after its consumer went away or failed. */
const followRestartMs = 250

/**
 * Consumer notices after which the follower starts again itself. nats.js would re-create an
 * ordered consumer on its own, but measured with 3.4 after the consumer was deleted on the
 * server: the new one delivered a single message, then nothing until the next missed
 * heartbeats (its pending-pull count survives the reset), so a gap of ~2 s became ~15 s.
 */
const restartOn: ReadonlySet<string> = new Set(['heartbeats_missed', 'consumer_deleted', 'consumer_not_found', 'stream_not_found', 'reset'])

/** The parts of nats.js's message (nats-core 3.x, not exported) that hold the raw header block. */
interface RawMessage {
  msg?: { _rdata?: Uint8Array; _msg?: { hdr?: number } }
}

/**
 * The message's header block as received (`NATS/1.0\r\nName: value\r\n…`), or null when
 * nats.js's internals are not the expected ones; test/streams/follow.test.ts fails then, so an
 * upgrade cannot lose this silently.
 */
export function rawHeaderBlock(m: JsMsg): Buffer | null {
  const inner = (m as unknown as RawMessage).msg
  const data = inner?._rdata
  const end = inner?._msg?.hdr
  if (!(data instanceof Uint8Array) || typeof end !== 'number' || end <= 0) return null
  return Buffer.from(data.buffer, data.byteOffset, end)
}

const eventTypesHeader = Buffer.from(`\r\n${eventHeaders.eventTypes}: `)

/**
 * The `Jobsvc-Event-Type` header, found in the raw header block. nats.js parses every header of a
 * message on first access (eight here), which was half of a follower's CPU; this reads the one
 * header a follower routes on.
 */
export function eventTypesOf(m: JsMsg): string {
  const raw = rawHeaderBlock(m)
  if (raw === null) return m.headers?.get(eventHeaders.eventTypes) ?? ''
  const at = raw.indexOf(eventTypesHeader)
  if (at < 0) return ''
  const from = at + eventTypesHeader.length
  const to = raw.indexOf('\r\n', from)
  return raw.toString('latin1', from, to < 0 ? raw.length : to)
}

/**
 * Hands every message on `filterSubject` from `startSeq` on to `handle`, once and in stream
 * order, until `signal` aborts. No durable state: an ordered consumer (ephemeral, in server
 * memory, no acks). When it reports a gap in its delivery, a lost consumer or missed heartbeats,
 * or fails, the follower starts a new one at the last sequence handed over + 1, so a stall
 * delays messages but never skips one. A message is handed over within a pull's round trip of
 * being stored; `handle` runs synchronously, in order, from the subscription's callback (no
 * iterator, no promise per message).
 */
export async function followEvents(
  nats: NatsHandles,
  opts: FollowOptions,
  handle: (event: FollowedEvent) => void,
  signal: AbortSignal,
  onError: (err: unknown) => void,
): Promise<void> {
  let next = opts.startSeq
  let live = true
  /** Failures in a row are reported once, not every restart through an outage. */
  let failing = false
  const setLive = (now: boolean) => {
    if (now === live) return
    live = now
    opts.onLive?.(now)
  }
  const deliver = (m: JsMsg) => {
    next = m.seq + 1
    setLive(true)
    const data = m.data
    handle({
      seq: m.seq,
      subject: m.subject,
      eventTypes: eventTypesOf(m),
      size: data.length,
      decode: <E extends DomainEventShape, S>() => decodeEventMessage<E, S>(data, m.seq),
    })
  }
  while (!signal.aborted) {
    let consumer: Consumer | undefined
    try {
      consumer = await nats.js.consumers.get(opts.stream, { filter_subjects: opts.filterSubject, opt_start_seq: next })
      const messages = await consumer.consume({
        max_messages: 1000,
        expires: 4 * followHeartbeatMs,
        idle_heartbeat: followHeartbeatMs,
        callback: deliver,
      })
      // The consumer exists from `next` on: whatever was stored since is on its way.
      setLive(true)
      failing = false
      const stop = () => void messages.stop()
      signal.addEventListener('abort', stop, { once: true })
      if (signal.aborted) stop()
      void (async () => {
        for await (const status of messages.status()) {
          if (status.type === 'heartbeat') setLive(true)
          else if (restartOn.has(status.type)) {
            setLive(false)
            stop()
            break
          }
        }
      })().catch(() => undefined)
      // A throw from `handle` stops the messages with that error: it is reported, and the
      // follower goes on after the message it was given.
      const err = await messages.closed()
      signal.removeEventListener('abort', stop)
      if (signal.aborted) return
      if (err) throw err
      // The messages ended without an abort (a notice above, or the connection closed): start again.
      setLive(false)
      await new Promise((r) => setTimeout(r, followRestartMs))
    } catch (err) {
      if (signal.aborted) return
      setLive(false)
      if (!failing) onError(err)
      failing = true
      await new Promise((r) => setTimeout(r, 2 * followRestartMs))
    } finally {
      // Ephemeral consumers outlive their follower for nats.js's inactivity threshold (5 min)
      // otherwise. Awaited, so that a stopped follower is gone; bounded, for a server out of reach.
      if (consumer !== undefined) await deleteWithin(consumer, 2_000)
    }
  }
}

async function deleteWithin(consumer: Consumer, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([consumer.delete().catch(() => undefined), new Promise((r) => (timer = setTimeout(r, ms)))])
  clearTimeout(timer)
}
