import { AckPolicy, DeliverPolicy, type JsMsg } from '@nats-io/jetstream'
import type { NatsHandles } from './connection.ts'
import { decodeEventMessage, type EventRecord } from './event-store.ts'

export interface BatchConsumerOptions {
  stream: string
  durable: string
  filterSubject: string
  /** Largest batch handed to `handle` at once. */
  maxBatch: number
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
}

/**
 * Creates the durable consumer if it is missing. NATS 2.9 takes one filter subject (a string,
 * not an array). Ack policy "all": its single consumer (the leading projector) handles messages
 * in order, so acking a batch's last message acks the batch.
 */
export async function ensureDurable(nats: NatsHandles, opts: Omit<BatchConsumerOptions, 'maxBatch'>, startSeq = 1): Promise<void> {
  try {
    await nats.jsm.consumers.info(opts.stream, opts.durable)
  } catch {
    await nats.jsm.consumers.add(opts.stream, {
      durable_name: opts.durable,
      ack_policy: AckPolicy.All,
      filter_subject: opts.filterSubject,
      ...(startSeq > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: startSeq } : { deliver_policy: DeliverPolicy.All }),
      ack_wait: 60_000_000_000,
      max_ack_pending: 20_000,
    })
  }
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
      const messages = await consumer.consume({ max_messages: Math.max(opts.maxBatch * 2, 100) })
      const stop = () => void messages.stop()
      signal.addEventListener('abort', stop, { once: true })
      // An abort that came while the consumer was being set up fires no listener added after it;
      // on a quiet log the loop below would then wait forever (a projector that never steps down).
      if (signal.aborted) stop()
      const iterator = messages[Symbol.asyncIterator]()
      let next = iterator.next()
      try {
        let batch: JsMsg[] = []
        for (let r = await next; !r.done; r = await next) {
          batch.push(r.value)
          next = iterator.next()
          if (batch.length < opts.maxBatch && (await hasArrived(messages, next))) continue
          const accepted = opts.accept === undefined ? batch : batch.filter((m) => opts.accept!({ subject: m.subject, eventTypes: m.headers?.get('Jobsvc-Event-Type') ?? '' }))
          if (accepted.length > 0) await handle(accepted.map(toRecord))
          batch.at(-1)!.ack()
          batch = []
          if (signal.aborted) break
        }
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
  return Promise.race([next.then(() => true, () => true), new Promise<boolean>((resolve) => setImmediate(resolve, false))])
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
  return { seq: m.seq, subject: m.subject, message: decodeEventMessage(m.data) }
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
