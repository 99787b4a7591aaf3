import type { Actor, Decider } from '../domain/decider.ts'
import { fold } from '../domain/decider.ts'
import { ConcurrencyConflict } from './errors.ts'
import type { AggregateRef, DomainEventShape, EventRecord, EventStore, Loaded, StoredEvent } from './event-store.ts'

/** Re-decisions after a conflict before giving up (Emmett uses 3). */
const maxRetries = 3

export interface CommandResult<E extends DomainEventShape, S> {
  /** State the decision was made on. */
  before: S | null
  /** State after the appended events, as loading it would give it (equal to `before` when nothing was decided). */
  state: S | null
  events: StoredEvent<E>[]
  /** Sequence of the appended message, or the loaded one when nothing was appended. */
  seq: number
  appended: boolean
  /** The message as the projections see it (events empty when nothing was appended). */
  record: EventRecord<E, S | null>
}

/**
 * Load (one direct get), decide, append at the sequence seen. The layers above call it through
 * their aggregate's handler (streams/aggregates.ts), which binds the decider and makes the event ids.
 *
 * A `hint` (state and sequence known without a load: a new id's `{null, 0}`, a read-model row,
 * this process's last write) replaces the first load. It is safe because the append checks the
 * sequence: a stale hint makes the append conflict and the command is decided again on loaded
 * state. A refusal or a no-op decided on a hint is never answered; it is decided again on
 * loaded state too, since no append verified it. On a conflict the command is
 * decided again on fresh state, so the loser of a race either finds a legal move on the new
 * state or gets the domain's refusal (for instance InvalidState after a competing claim).
 *
 * With `trustHint` the command is decided on the hint alone and appended once: a refusal is
 * thrown as decided and a stale hint as ConcurrencyConflict, with no load. It is for a caller
 * that learns the newer state anyway (the ready index follows the log) and would rather drop a
 * candidate than pay a load and a second append for it.
 */
export async function handleCommand<C extends { meta: { now: string; actor?: Actor } }, E extends DomainEventShape, S>(
  store: EventStore,
  decider: Decider<C, E, S | null>,
  ref: AggregateRef,
  command: C,
  newEventId: () => string,
  options: { hint?: Loaded<S>; trustHint?: boolean } = {},
): Promise<CommandResult<E, S>> {
  const trusted = options.trustHint === true && options.hint !== undefined
  let lastConflict: ConcurrencyConflict | undefined
  for (let attempt = 0; attempt <= (trusted ? 0 : maxRetries); attempt++) {
    const fromHint = attempt === 0 && options.hint !== undefined
    const loaded = fromHint ? options.hint! : await store.load<S>(ref)
    let decided: E[]
    try {
      decided = decider.decide(command, loaded.state)
    } catch (err) {
      // A refusal or a no-op is only trusted on loaded state: a hint may be stale.
      if (fromHint && !trusted) continue
      throw err
    }
    if (decided.length === 0 && fromHint && !trusted) continue
    if (decided.length === 0) {
      const record = store.recordOf<E, S | null>(ref, loaded.seq, [], loaded.state)
      return { before: loaded.state, state: loaded.state, events: [], seq: loaded.seq, appended: false, record }
    }
    const state = fold(decider, loaded.state, decided)
    const { now, actor } = command.meta
    const events = decided.map((e) => ({ ...e, id: newEventId(), time: now, ...(actor === undefined ? {} : { actor }) }))
    try {
      const { seq } = await store.append(ref, events, state, loaded.seq)
      // The state as a later load reads it back (references to the new message given its sequence).
      const record = store.recordOf<E, S | null>(ref, seq, events, state)
      return { before: loaded.state, state: record.message.state, events, seq, appended: true, record }
    } catch (err) {
      if (!(err instanceof ConcurrencyConflict)) throw err
      lastConflict = err
    }
  }
  throw lastConflict!
}
