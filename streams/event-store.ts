/**
 * The one place that writes and reads events on JetStream.
 *
 * Atomicity: a decision that yields several events for one aggregate is written as ONE message
 * carrying the whole batch (`events`), never as several publishes, because NATS 2.9 has no
 * atomic batch publish; the batch is therefore stored entirely or not at all. Every message
 * also carries the aggregate's state after the batch (`state`), so loading an aggregate is one
 * direct get of its subject's last message, whatever the length of its history.
 *
 * Concurrency: an append names the subject's last sequence it decided on
 * (`expect.lastSubjectSequence`, 0 for a new aggregate); a stale one fails with JetStream error
 * 10071, surfaced as ConcurrencyConflict. A message id (the first event's id) lets JetStream drop
 * a re-sent publish inside the duplicate window. On replicated streams of nats-server before
 * 2.9.21 the stream leader checks an expected sequence above 0 only against what it has applied,
 * missing appends still being proposed (nats-io/nats-server#4320), so the store is given a
 * serializer that keeps such appends to one subject one at a time across every process
 * (services/infrastructure/write-guard.ts). An expected sequence of 0 (a new aggregate) is checked
 * by every replica as it applies the message, which is exact: creates, job creations among them,
 * go straight to the server (test/cluster/guards.test.ts races them).
 */
import type { JetStreamManager } from '@nats-io/jetstream'
import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node'
import { decode, encode } from './codec.ts'
import { isNatsConnected } from './connection.ts'
import { ConcurrencyConflict, LogUnavailable } from './errors.ts'
import { JetStreamPublishError, JetStreamPublisher } from './publisher.ts'
import { eventsStreamName, eventSubject, type AggregateKind } from './names.ts'

export const eventSchemaVersion = 1

/** Header names on every event message, for consumers that route without decoding. */
export const eventHeaders = {
  eventTypes: 'Jobsvc-Event-Type',
  eventIds: 'Jobsvc-Event-Id',
  schemaVersion: 'Jobsvc-Schema-Version',
  aggregate: 'Jobsvc-Aggregate',
  aggregateId: 'Jobsvc-Aggregate-Id',
  projectId: 'Jobsvc-Project-Id',
  contentType: 'Content-Type',
} as const

export interface DomainEventShape {
  type: string
  data: unknown
}

/** An event as stored: the domain event plus its id and the time it was decided. */
export type StoredEvent<E extends DomainEventShape = DomainEventShape> = E & { id: string; time: string }

/** The body of every message on the events stream (msgpack). */
export interface EventMessage<E extends DomainEventShape = DomainEventShape, S = unknown> {
  schema_version: number
  aggregate: AggregateKind
  aggregate_id: string
  project_id: string
  events: StoredEvent<E>[]
  state: S
}

export interface AggregateRef {
  aggregate: AggregateKind
  projectId: string
  id: string
}

/** A message read back from the stream, with its stream sequence. */
export interface EventRecord<E extends DomainEventShape = DomainEventShape, S = unknown> {
  seq: number
  subject: string
  message: EventMessage<E, S>
}

export interface Loaded<S> {
  state: S | null
  /** Last sequence on the aggregate's subject; 0 when it has no events. */
  seq: number
}

/** Runs `append` alone among the appends to `subject` (see the header); the default runs it at once. */
export type AppendSerializer = <T>(subject: string, append: () => Promise<T>) => Promise<T>

const unserialized: AppendSerializer = (_subject, append) => append()

function isWrongLastSequence(err: unknown): boolean {
  return err instanceof JetStreamPublishError && err.errCode === 10071
}

export class EventStore {
  readonly ns: string
  readonly stream: string
  readonly #jsm: JetStreamManager
  readonly #nc: NatsConnection
  readonly #publisher: JetStreamPublisher
  readonly #serialize: AppendSerializer

  constructor(ns: string, nc: NatsConnection, jsm: JetStreamManager, serialize: AppendSerializer = unserialized) {
    this.ns = ns
    this.stream = eventsStreamName(ns)
    this.#nc = nc
    this.#publisher = new JetStreamPublisher(nc)
    this.#jsm = jsm
    this.#serialize = serialize
  }

  #assertConnected(): void {
    if (!isNatsConnected(this.#nc)) throw new LogUnavailable('the NATS connection is down')
  }

  /** Stops listening for acknowledgements (appends still waiting fail). */
  close(): void {
    this.#publisher.close()
  }

  subjectOf(ref: AggregateRef): string {
    return eventSubject(this.ns, ref.projectId, ref.aggregate, ref.id)
  }

  /** The record a message would have: what projections apply, whether read or just written. */
  recordOf<E extends DomainEventShape, S>(ref: AggregateRef, seq: number, events: StoredEvent<E>[], state: S): EventRecord<E, S> {
    return {
      seq,
      subject: this.subjectOf(ref),
      message: {
        schema_version: eventSchemaVersion,
        aggregate: ref.aggregate,
        aggregate_id: ref.id,
        project_id: ref.projectId,
        events,
        state,
      },
    }
  }

  /** One direct get of the aggregate's last message: its state after its latest event. */
  async load<S>(ref: AggregateRef): Promise<Loaded<S>> {
    this.#assertConnected()
    const stored = await this.#jsm.direct.getMessage(this.stream, { last_by_subj: this.subjectOf(ref) })
    if (stored === null) return { state: null, seq: 0 }
    const message = decode<EventMessage<DomainEventShape, S>>(stored.data)
    return { state: message.state, seq: stored.seq }
  }

  /**
   * Appends one decision (a batch of events and the state after it) if the aggregate's last
   * sequence is still `expectedSeq`. Resolves to the message's stream sequence.
   */
  async append<E extends DomainEventShape, S>(
    ref: AggregateRef,
    events: StoredEvent<E>[],
    state: S,
    expectedSeq: number,
  ): Promise<{ seq: number; duplicate: boolean }> {
    if (events.length === 0) throw new Error('append needs at least one event')
    const { subject, message } = this.recordOf(ref, 0, events, state)
    try {
      const h = buildHeaders(ref, events)
      h.set('Nats-Msg-Id', events[0]!.id)
      h.set('Nats-Expected-Last-Subject-Sequence', String(expectedSeq))
      const body = encode(message)
      const publish = () => this.#publisher.publish(subject, body, h)
      return await (expectedSeq === 0 ? publish() : this.#serialize(subject, publish))
    } catch (err) {
      if (isWrongLastSequence(err)) throw new ConcurrencyConflict(subject, { cause: err })
      throw err
    }
  }

  /**
   * Every message of one aggregate in order, one direct get each. For tools and tests: a job's
   * history can run to thousands of messages (progress reports), so requests page with `nextOf`.
   */
  async history<E extends DomainEventShape, S>(ref: AggregateRef): Promise<EventRecord<E, S>[]> {
    const records: EventRecord<E, S>[] = []
    for (let next = await this.nextOf<E, S>(ref, 1); next !== null; next = await this.nextOf<E, S>(ref, next.seq + 1)) records.push(next)
    return records
  }

  /** The aggregate's first message at stream sequence `fromSeq` or later (one direct get), or null. */
  async nextOf<E extends DomainEventShape, S>(ref: AggregateRef, fromSeq: number): Promise<EventRecord<E, S> | null> {
    this.#assertConnected()
    const subject = this.subjectOf(ref)
    const stored = await this.#jsm.direct.getMessage(this.stream, { seq: fromSeq, next_by_subj: subject })
    return stored === null ? null : { seq: stored.seq, subject, message: decode<EventMessage<E, S>>(stored.data) }
  }

  /** The stream's last sequence: what a full replay must reach. */
  async lastSequence(): Promise<number> {
    const info = await this.#jsm.streams.info(this.stream)
    return info.state.last_seq
  }
}

function buildHeaders(ref: AggregateRef, events: StoredEvent[]): MsgHdrs {
  const h = natsHeaders()
  h.set(eventHeaders.eventTypes, events.map((e) => e.type).join(','))
  h.set(eventHeaders.eventIds, events.map((e) => e.id).join(','))
  h.set(eventHeaders.schemaVersion, String(eventSchemaVersion))
  h.set(eventHeaders.aggregate, ref.aggregate)
  h.set(eventHeaders.aggregateId, ref.id)
  h.set(eventHeaders.projectId, ref.projectId)
  h.set(eventHeaders.contentType, 'application/msgpack')
  return h
}

/** Decodes a message body taken from a consumer or subscription. */
export function decodeEventMessage<E extends DomainEventShape = DomainEventShape, S = unknown>(data: Uint8Array): EventMessage<E, S> {
  return decode<EventMessage<E, S>>(data)
}
