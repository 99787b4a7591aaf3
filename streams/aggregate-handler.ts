import type { Actor, Decider } from '../domain/decider.ts'
import type { AggregateRef, DomainEventShape, EventRecord, EventStore, Loaded } from './event-store.ts'
import { handleCommand, type CommandResult } from './handle-command.ts'
import type { AggregateKind } from './names.ts'

export type { CommandResult } from './handle-command.ts'

declare const madeBy: unique symbol

/**
 * The address of one aggregate of kind `K`, made only by that kind's handler (`jobs.ref(...)`):
 * a project's cannot be passed where a job's is expected, and no call site spells the
 * project scope or id of an aggregate by hand. It is a plain AggregateRef at run time.
 */
export type Ref<K extends AggregateKind> = AggregateRef & { readonly aggregate: K; readonly [madeBy]: K }

/** What a decision needs of the runtime: the log, and the ULIDs its event ids are made of. */
export interface CommandDeps {
  store: EventStore
  newUlid: () => string
}

/** Where a decision starts without a load, and whether to trust it (see handleCommand). */
export interface DecideOptions<S> {
  hint?: Loaded<S>
  trustHint?: boolean
}

/**
 * One aggregate's command handler (the shape of Emmett's `CommandHandler`): its decider bound to
 * its kind, so loads and decisions are typed by the aggregate's state and events and take only
 * its refs. The log is passed on each call, as Emmett passes the event store.
 */
export interface AggregateHandler<K extends AggregateKind, C, E extends DomainEventShape, S, A extends unknown[]> {
  readonly kind: K
  readonly decider: Decider<C, E, S | null>
  /** The aggregate's address from what names it (for most kinds its project and id). */
  ref(...address: A): Ref<K>
  /** Its state after its latest event (one direct get); null state and sequence 0 when it has none. */
  load(store: EventStore, ref: Ref<K>): Promise<Loaded<S>>
  /** Load, decide, append at the sequence seen, re-deciding on a conflict (handleCommand). */
  decide(deps: CommandDeps, ref: Ref<K>, command: C, options?: DecideOptions<S>): Promise<CommandResult<E, S>>
  /** Its last message, or null when it has none. */
  last(store: EventStore, ref: Ref<K>): Promise<EventRecord<E, S | null> | null>
  /** Its first message at stream sequence `fromSeq` or later, or null. */
  next(store: EventStore, ref: Ref<K>, fromSeq: number): Promise<EventRecord<E, S | null> | null>
  /** Its message stored at `seq`, or null when that message is not this aggregate's. */
  at(store: EventStore, ref: Ref<K>, seq: number): Promise<EventRecord<E, S | null> | null>
  /** Every message of it in order (tools and tests: one direct get each). */
  history(store: EventStore, ref: Ref<K>): Promise<EventRecord<E, S | null>[]>
}

/** The one place an event id is made: `evt_` and a ULID, monotonic within the process. */
function eventIds(deps: CommandDeps): () => string {
  return () => `evt_${deps.newUlid()}`
}

/**
 * Binds an aggregate's decider to its kind and address once. `address` maps what names an
 * aggregate to its project scope and id (see streams/aggregates.ts for every kind's).
 */
export function aggregateHandler<
  K extends AggregateKind,
  C extends { meta: { now: string; actor?: Actor } },
  E extends DomainEventShape,
  S,
  A extends unknown[],
>(spec: {
  kind: K
  decider: Decider<C, E, S | null>
  address: (...address: A) => { projectId: string; id: string }
}): AggregateHandler<K, C, E, S, A> {
  const { kind, decider, address } = spec
  return {
    kind,
    decider,
    ref: (...args) => ({ aggregate: kind, ...address(...args) }) as Ref<K>,
    load: (store, ref) => store.load<S>(ref),
    decide: (deps, ref, command, options) => handleCommand<C, E, S>(deps.store, decider, ref, command, eventIds(deps), options),
    last: (store, ref) => store.lastOf<E, S | null>(ref),
    next: (store, ref, fromSeq) => store.nextOf<E, S | null>(ref, fromSeq),
    at: (store, ref, seq) => store.messageAt<E, S | null>(ref, seq),
    history: (store, ref) => store.history<E, S | null>(ref),
  }
}
