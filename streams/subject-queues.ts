import { setTimeout as sleep } from 'node:timers/promises'
import { AckPolicy, DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream'
import type { NatsHandles } from './connection.ts'

export interface SubjectQueuesOptions {
  /** A work-queue stream; each of its subjects is consumed as a queue of its own. */
  stream: string
  /** Every subject of the stream: the sweep reads which of them hold messages. */
  subjectsFilter: string
  /** True for the subjects this consumes (names.ts parses them); a wake-up naming another is ignored. */
  isQueueSubject(subject: string): boolean
  /** One durable consumer per subject (filtered on it); a work-queue stream accepts them since no two overlap. */
  consumerName(subject: string): string
  /** Plain-NATS subject of `wakeSubjectQueue`; its payload is the subject that got messages. */
  wakeSubject: string
  /** Longer than `take` plus the work it starts may hold a message. */
  ackWaitMs: number
  /**
   * Per subject. Messages nak'ed with a delay stay ack-pending until they come back, so a
   * subject's waiting retries fill its own consumer, never another subject's.
   */
  maxAckPending: number
  /** The server deletes a consumer nobody pulled from for this long (only idle subjects stop pulling). */
  inactiveThresholdMs: number
  /** A subject's fetch waits this long; when it comes back empty, the loop stops if its consumer holds nothing. */
  idlePollMs: number
  /** How often the stream's subjects are read to find those with messages (missed wake-ups, restarts). */
  sweepIntervalMs: number
  /** Consumers of an earlier layout whose filters would overlap the per-subject ones: deleted at start. */
  obsoleteConsumers?: readonly string[]
}

/** Tells the consumers of `consumeSubjectQueues` that `subject` has new messages, so an idle one starts pulling at once. */
export function wakeSubjectQueue(nats: NatsHandles, wakeSubject: string, subject: string): void {
  nats.nc.publish(wakeSubject, subject)
}

/**
 * Runs one pull loop per subject that has messages in a work-queue stream, each on the subject's
 * own durable consumer, until `signal` aborts. A loop fetches one message, hands it to `take`,
 * and fetches the next only when `take` resolves, so the handler sets each subject's pace and a
 * message it has no room for stays in the stream, unfetched. `take` settles the message itself,
 * then or later; if it throws, the error goes to `onError` and the message is nak'ed for 1 s.
 *
 * Why a consumer per subject: with one consumer for everything, the server hands messages out in
 * stream order up to `max_ack_pending`, a nak'ed message stays ack-pending for its whole wait,
 * and a message the handler is not ready for must be nak'ed and comes back ahead of newer ones.
 * One subject with thousands of queued or waiting messages then fills the window or the
 * handler's time, and the next subject's message is late or never fetched. Here each subject's
 * backlog and retries live in its own consumer. Loops start on a wake-up or when the periodic
 * sweep finds the subject in the stream, and stop once their consumer holds nothing; several
 * processes may run this at once (each loop pulls from the shared durable consumer).
 */
export async function consumeSubjectQueues(
  nats: NatsHandles,
  opts: SubjectQueuesOptions,
  take: (subject: string, msg: JsMsg) => Promise<void>,
  signal: AbortSignal,
  onError: (err: unknown, during: 'handling' | 'consuming') => void,
): Promise<void> {
  for (const name of opts.obsoleteConsumers ?? []) await nats.jsm.consumers.delete(opts.stream, name).catch(() => false)
  const loops = new Map<string, Promise<void>>()

  const wake = (subject: string) => {
    if (signal.aborted || loops.has(subject) || !opts.isQueueSubject(subject)) return
    const loop = runLoop(subject)
      .then(async (idle) => {
        loops.delete(subject)
        // A wake-up that arrived while this loop was finding its consumer empty saw it still
        // running and did nothing: look once more now that it is gone.
        if (idle && (await hasWork(subject))) wake(subject)
      })
      .catch((err) => {
        loops.delete(subject)
        onError(err, 'consuming')
      })
    loops.set(subject, loop)
  }

  async function openConsumer(subject: string): Promise<Consumer> {
    const name = opts.consumerName(subject)
    await nats.jsm.consumers.info(opts.stream, name).catch(() =>
      nats.jsm.consumers
        .add(opts.stream, {
          durable_name: name,
          filter_subject: subject,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: opts.ackWaitMs * 1_000_000,
          max_ack_pending: opts.maxAckPending,
          inactive_threshold: opts.inactiveThresholdMs * 1_000_000,
        })
        // Another process may have created it a moment ago.
        .catch((err) => nats.jsm.consumers.info(opts.stream, name).catch(() => Promise.reject(err))),
    )
    return nats.js.consumers.get(opts.stream, name)
  }

  async function fetchOne(consumer: Consumer): Promise<JsMsg | null> {
    const messages = await consumer.fetch({ max_messages: 1, expires: opts.idlePollMs })
    const stop = () => void messages.stop()
    signal.addEventListener('abort', stop, { once: true })
    try {
      for await (const msg of messages) return msg
      return null
    } finally {
      signal.removeEventListener('abort', stop)
    }
  }

  /** Resolves true when the subject's consumer was found empty, false when stopped. */
  async function runLoop(subject: string): Promise<boolean> {
    let consumer: Consumer | null = null
    while (!signal.aborted) {
      try {
        consumer ??= await openConsumer(subject)
        const msg = await fetchOne(consumer)
        if (signal.aborted) {
          msg?.nak()
          return false
        }
        if (msg === null) {
          const info = await consumer.info()
          if (info.num_pending === 0 && info.num_ack_pending === 0) return true
          continue
        }
        await take(subject, msg).catch((err) => {
          onError(err, 'handling')
          msg.nak(1_000)
        })
      } catch (err) {
        if (signal.aborted) return false
        // The consumer may be gone (deleted as inactive, or by hand): open it again.
        consumer = null
        onError(err, 'consuming')
        await pause(500, signal)
      }
    }
    return false
  }

  async function hasWork(subject: string): Promise<boolean> {
    if (signal.aborted) return false
    const info = await nats.jsm.consumers.info(opts.stream, opts.consumerName(subject)).catch(() => null)
    return info !== null && info.num_pending + info.num_ack_pending > 0
  }

  async function sweep(): Promise<void> {
    const info = await nats.jsm.streams.info(opts.stream, { subjects_filter: opts.subjectsFilter })
    for (const subject of Object.keys(info.state.subjects ?? {})) wake(subject)
  }

  const wakeUps = nats.nc.subscribe(opts.wakeSubject, {
    callback: (err, msg) => {
      if (err === null) wake(msg.string())
    },
  })
  try {
    while (!signal.aborted) {
      await sweep().catch((err) => onError(err, 'consuming'))
      await pause(opts.sweepIntervalMs, signal)
    }
  } finally {
    wakeUps.unsubscribe()
  }
  // The abort stopped every fetch; a loop inside `take` finishes handing over its message first.
  await Promise.all([...loops.values()])
}

/** Resolves after `ms`, or at once on abort (node:timers/promises removes its abort listener when it fires). */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return sleep(ms, undefined, { signal }).catch(() => undefined)
}
