/**
 * The one place that writes and reads events on JetStream.
 *
 * Atomicity: a decision that yields several events for one aggregate is written as ONE message
 * carrying the whole batch (`events`), never as several publishes, because NATS 2.9 has no
 * atomic batch publish; the batch is therefore stored entirely or not at all. Every message
 * also carries the aggregate's state after the batch (`state`), so loading an aggregate is one
 * direct get of its subject's last message, whatever the length of its history.
 *
 * What a message carries is the state as its aggregate writes it (streams/stored-forms.ts): a job's
 * state refers to its payload and last error rather than carrying them, and a progress report
 * carries no state at all. Every read decodes through the same place, which also upgrades the
 * messages older code wrote.
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
import type { Actor } from '../domain/decider.ts'
import { decode, encode } from './codec.ts'
import { isNatsConnected } from './connection.ts'
import { ConcurrencyConflict, LogFull, LogUnavailable } from './errors.ts'
import { JetStreamPublishError, JetStreamPublisher } from './publisher.ts'
import { eventsStreamName, eventSubject, platformScope, type AggregateKind } from './names.ts'
import { fromStoredState, toStoredState } from './stored-forms.ts'

/** 2: job states refer to their payload and last error, progress reports have a subject of their own (docs/event-log.md). */
export const eventSchemaVersion = 2

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

/**
 * An event as stored: the domain event plus its id and the time it was decided, and the member
 * whose dashboard session asked for it (absent for API keys, workers and the service's own roles).
 */
export type StoredEvent<E extends DomainEventShape = DomainEventShape> = E & { id: string; time: string; actor?: Actor }

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

/** JetStream's refusal of a publish to a stream at its `max_bytes` with discard "new" (a store failure, 10077). */
function isStreamFull(err: unknown): boolean {
  return err instanceof JetStreamPublishError && err.errCode === 10077 && /maximum (bytes|messages)/i.test(err.message)
}

/**
 * The log budget of projects (services/infrastructure/log-budget.ts), told of every append of a
 * project's aggregate: asked before it whether the project may make it (a refusal throws), and
 * told its size once stored.
 */
export interface AppendMeter {
  admit(projectId: string, eventTypes: readonly string[]): void | Promise<void>
  stored(projectId: string, bytes: number): void
}

export class EventStore {
  readonly ns: string
  readonly stream: string
  readonly #jsm: JetStreamManager
  readonly #nc: NatsConnection
  readonly #publisher: JetStreamPublisher
  /** Set once by the runtime; null: appends are not metered (tools, some tests). */
  meter: AppendMeter | null = null
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

  /**
   * The record a message has once stored at `seq`: what projections apply, whether read or just
   * written. Its state is the decision's as its aggregate reads it back (references to the message
   * itself resolved), so a state answered after an append is the one a later load gets.
   */
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
        state: fromStoredState(ref.aggregate, state, seq, events) as S,
      },
    }
  }

  /** One direct get of the aggregate's last message: its state after its latest event. */
  async load<S>(ref: AggregateRef): Promise<Loaded<S>> {
    const last = await this.lastOf<DomainEventShape, S>(ref)
    return last === null ? { state: null, seq: 0 } : { state: last.message.state, seq: last.seq }
  }

  /** The aggregate's last message (one direct get), or null when it has none. */
  async lastOf<E extends DomainEventShape, S>(ref: AggregateRef): Promise<EventRecord<E, S> | null> {
    this.#assertConnected()
    const subject = this.subjectOf(ref)
    const stored = await this.#jsm.direct.getMessage(this.stream, { last_by_subj: subject })
    return stored === null ? null : { seq: stored.seq, subject, message: decodeEventMessage<E, S>(stored.data, stored.seq) }
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
    const subject = this.subjectOf(ref)
    const message: EventMessage<E> = {
      schema_version: eventSchemaVersion,
      aggregate: ref.aggregate,
      aggregate_id: ref.id,
      project_id: ref.projectId,
      events,
      state: toStoredState(ref.aggregate, state),
    }
    // A project's appends count against its log budget, which may refuse them; the platform's do not.
    const meter = ref.projectId === platformScope ? null : this.meter
    // Awaited only when the budget has to be read first: an append is the hottest call there is.
    const admitted = meter?.admit(
      ref.projectId,
      events.map((e) => e.type),
    )
    if (admitted !== undefined) await admitted
    const data = encode(message)
    const h = buildHeaders(ref, events, expectedSeq)
    try {
      const publish = () => this.#publisher.publish(subject, data, h.headers)
      const ack = await (expectedSeq === 0 ? publish() : this.#serialize(subject, publish))
      meter?.stored(ref.projectId, subject.length + h.bytes + data.length)
      return ack
    } catch (err) {
      if (isWrongLastSequence(err)) throw new ConcurrencyConflict(subject, { cause: err })
      if (isStreamFull(err)) throw new LogFull(this.stream, { cause: err })
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
    return this.nextOn<E, S>(this.subjectOf(ref), fromSeq)
  }

  /** The first message at stream sequence `fromSeq` or later on `subjects` (a subject or a filter with wildcards), or null. */
  async nextOn<E extends DomainEventShape, S>(subjects: string, fromSeq: number): Promise<EventRecord<E, S> | null> {
    this.#assertConnected()
    const stored = await this.#jsm.direct.getMessage(this.stream, { seq: fromSeq, next_by_subj: subjects })
    return stored === null ? null : { seq: stored.seq, subject: stored.subject, message: decodeEventMessage<E, S>(stored.data, stored.seq) }
  }

  /** The aggregate's message stored at `seq` (one direct get), or null when that message is not the aggregate's. */
  async messageAt<E extends DomainEventShape, S>(ref: AggregateRef, seq: number): Promise<EventRecord<E, S> | null> {
    const record = await this.nextOf<E, S>(ref, seq)
    return record?.seq === seq ? record : null
  }

  /** The stream's last sequence: what a full replay must reach. */
  async lastSequence(): Promise<number> {
    const info = await this.#jsm.streams.info(this.stream)
    return info.state.last_seq
  }
}

/**
 * A message's headers and their size as stored (`Name: value` lines, plus the status line).
 * A progress report, of which a running job may append thousands, carries only its event type
 * and the expected sequence: its other headers would be most of its bytes, and its subject
 * already says what they would (docs/event-log.md).
 */
function buildHeaders(ref: AggregateRef, events: StoredEvent[], expectedSeq: number): { headers: MsgHdrs; bytes: number } {
  const types = events.map((e) => e.type).join(',')
  const expected: [string, string] = ['Nats-Expected-Last-Subject-Sequence', String(expectedSeq)]
  const pairs: Array<[string, string]> =
    ref.aggregate === 'progress'
      ? [[eventHeaders.eventTypes, types], expected]
      : [
          [eventHeaders.eventTypes, types],
          [eventHeaders.eventIds, events.map((e) => e.id).join(',')],
          [eventHeaders.schemaVersion, String(eventSchemaVersion)],
          [eventHeaders.aggregate, ref.aggregate],
          [eventHeaders.aggregateId, ref.id],
          [eventHeaders.projectId, ref.projectId],
          [eventHeaders.contentType, 'application/msgpack'],
          ['Nats-Msg-Id', events[0]!.id],
          expected,
        ]
  const headers = natsHeaders()
  let bytes = 'NATS/1.0\r\n\r\n'.length
  for (const [name, value] of pairs) {
    headers.set(name, value)
    bytes += name.length + value.length + 4
  }
  return { headers, bytes }
}

/**
 * Decodes a message body taken from a consumer, a subscription or a direct get, stored at `seq`
 * (null when the reader does not know it: a plain subscription's copy), into the form the
 * aggregate's code reads (streams/stored-forms.ts).
 */
export function decodeEventMessage<E extends DomainEventShape = DomainEventShape, S = unknown>(
  data: Uint8Array,
  seq: number | null,
): EventMessage<E, S> {
  const message = decode<EventMessage<E, S>>(data)
  message.state = fromStoredState(message.aggregate, message.state, seq, message.events) as S
  return message
}
