/**
 * Removes an aggregate's messages from the events stream, for retention.
 *
 * Why not one purge by subject per aggregate: on NATS 2.9 a filtered purge visits every block of
 * the stream, and a block whose messages are not in memory is read whole (8 MB) and dropped from
 * memory again before the next purge, so purging a job cost about 30 ms, and a purge's cost grows
 * with the stream (measured here: 220 µs of server CPU each with 25 blocks, 366 µs with 125, even
 * with the blocks in memory). A delete by sequence finds its block by a binary search and keeps
 * it in memory for the next one, so its cost does not grow with the log.
 *
 * The sequences come from the messages themselves: every append carries the subject's previous
 * sequence (`Nats-Expected-Last-Subject-Sequence`, checked by the server, so the chain is exactly
 * the subject's stored messages), and JetStream stores that header with the message. Walking the
 * chain back from the last sequence the caller saw costs one direct get per message, and the
 * deletes then go in parallel. A chain that is long (progress reports) or broken (a header
 * missing, a message already gone after an interrupted run) falls back to one purge by subject.
 *
 * Requests go through one reply subscription, matched by token (reply-requests.ts): nats.js's
 * request path cost about twice the client CPU per job.
 */
import type { Msg, NatsConnection } from '@nats-io/transport-node'
import { LogUnavailable } from './errors.ts'
import { directGetApiSubject, eventsStreamName, messageDeleteApiSubject, streamPurgeApiSubject } from './names.ts'
import { ReplyRequests } from './reply-requests.ts'

/** Header every append carries (EventStore.append): the subject's last sequence the decision saw. */
const previousSeqHeader = 'Nats-Expected-Last-Subject-Sequence'

/** Longer chains are purged by subject in one request rather than walked message by message. */
const maxWalk = 32

/** A JetStream API request refused by the server (its `err_code`, e.g. 10057). */
export class JetStreamApiError extends Error {
  readonly errCode: number
  constructor(errCode: number, description: string) {
    super(`JetStream refused the request: ${description} (${errCode})`)
    this.name = 'JetStreamApiError'
    this.errCode = errCode
  }
}

export interface PruneResult {
  /** Messages removed. */
  messages: number
  /** True when the chain could not be walked and the subject was purged instead. */
  purgedBySubject: boolean
}

/** Removes aggregates' messages from the events stream of one namespace (see the file's header). */
export class LogPruner {
  readonly #stream: string
  readonly #requests: ReplyRequests
  readonly #encoder = new TextEncoder()

  constructor(nc: NatsConnection, ns: string, timeoutMs = 10_000) {
    this.#stream = eventsStreamName(ns)
    this.#requests = new ReplyRequests(nc, timeoutMs)
  }

  /**
   * Removes every message on `subject` up to and including `lastSeq`; later ones stay (the
   * aggregate changed after the caller read it). Idempotent: what is already gone is skipped.
   */
  async removeThrough(subject: string, lastSeq: number): Promise<PruneResult> {
    // A purge request's `seq` of 1 or less means no bound at all: never send one.
    if (lastSeq < 1) return { messages: 0, purgedBySubject: false }
    const seqs: number[] = []
    for (let seq = lastSeq; seq > 0;) {
      if (seqs.length === maxWalk) return this.#purgeSubject(subject, lastSeq)
      const msg = await this.#request(directGetApiSubject(this.#stream), `{"seq":${seq}}`)
      const previous = Number(msg.headers?.get(previousSeqHeader) || Number.NaN)
      const isLink = !msg.headers?.hasError && msg.headers?.get('Nats-Subject') === subject && Number.isInteger(previous) && previous < seq
      if (!isLink) return this.#purgeSubject(subject, lastSeq)
      seqs.push(seq)
      seq = previous
    }
    // The last message goes last: until it does, loading the aggregate still finds the state the
    // caller saw, never an older one a command could decide on.
    const deleted = await Promise.all(seqs.slice(1).map((seq) => this.#deleteMessage(seq)))
    deleted.push(await this.#deleteMessage(lastSeq))
    // A message missing now was deleted between the walk and here, by nobody that should have:
    // purge by subject so that nothing the caller saw is left behind.
    if (deleted.includes(false)) return this.#purgeSubject(subject, lastSeq)
    return { messages: seqs.length, purgedBySubject: false }
  }

  close(): void {
    this.#requests.close('log pruner')
  }

  async #deleteMessage(seq: number): Promise<boolean> {
    const answer = await this.#api<{ success?: boolean }>(messageDeleteApiSubject(this.#stream), `{"seq":${seq},"no_erase":true}`, true)
    return answer?.success === true
  }

  async #purgeSubject(subject: string, lastSeq: number): Promise<PruneResult> {
    const answer = await this.#api<{ purged?: number }>(
      streamPurgeApiSubject(this.#stream),
      JSON.stringify({ filter: subject, seq: lastSeq + 1 }),
      false,
    )
    return { messages: answer?.purged ?? 0, purgedBySubject: true }
  }

  /** A JetStream API call; with `refusalIsNull`, a refusal resolves to null instead of throwing. */
  async #api<T>(subject: string, body: string, refusalIsNull: boolean): Promise<T | null> {
    const msg = await this.#request(subject, body)
    if (msg.headers?.hasError) throw new LogUnavailable(`JetStream answered ${msg.headers.code} ${msg.headers.description} to ${subject}`)
    const answer = JSON.parse(msg.string()) as T & { error?: { err_code: number; description: string } }
    if (answer.error === undefined) return answer
    if (refusalIsNull) return null
    throw new JetStreamApiError(answer.error.err_code, answer.error.description)
  }

  #request(subject: string, body: string): Promise<Msg> {
    return this.#requests.request(subject, this.#encoder.encode(body))
  }
}
