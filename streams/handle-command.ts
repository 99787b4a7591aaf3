import type { Decider } from '../domain/decider.ts'
import { fold } from '../domain/decider.ts'
import { ConcurrencyConflict } from './errors.ts'
import type { AggregateRef, DomainEventShape, EventRecord, EventStore, StoredEvent } from './event-store.ts'

/** Re-decisions after a conflict before giving up (Emmett uses 3). */
const maxRetries = 3

export interface CommandResult<E extends DomainEventShape, S> {
  /** State the decision was made on. */
  before: S | null
  /** State after the appended events (equal to `before` when nothing was decided). */
  state: S | null
  events: StoredEvent<E>[]
  /** Sequence of the appended message, or the loaded one when nothing was appended. */
  seq: number
  appended: boolean
  /** The message as the projections see it (events empty when nothing was appended). */
  record: EventRecord<E, S | null>
}

/**
 * Load (one direct get), decide, append at the sequence seen (`isNew` skips the load for ids
 * this process just generated). On a conflict the command is
 * decided again on fresh state, so the loser of a race either finds a legal move on the new
 * state or gets the domain's refusal (for instance InvalidState after a competing claim).
 */
export async function handleCommand<C extends { meta: { now: string } }, E extends DomainEventShape, S>(
  store: EventStore,
  decider: Decider<C, E, S | null>,
  ref: AggregateRef,
  command: C,
  newEventId: () => string,
  options: { isNew?: boolean } = {},
): Promise<CommandResult<E, S>> {
  let lastConflict: ConcurrencyConflict | undefined
  for (let attempt = 0; attempt <= maxRetries; attempt++) {
    // A freshly generated id names no aggregate yet: skip the load and append at sequence 0;
    // should it exist after all, the append conflicts and the retry loads it.
    const loaded = options.isNew && attempt === 0 ? { state: null, seq: 0 } : await store.load<S>(ref)
    const decided = decider.decide(command, loaded.state)
    if (decided.length === 0) {
      const record = store.recordOf<E, S | null>(ref, loaded.seq, [], loaded.state)
      return { before: loaded.state, state: loaded.state, events: [], seq: loaded.seq, appended: false, record }
    }
    const state = fold(decider, loaded.state, decided)
    const events = decided.map((e) => ({ ...e, id: newEventId(), time: command.meta.now }))
    try {
      const { seq } = await store.append(ref, events, state, loaded.seq)
      const record = store.recordOf<E, S | null>(ref, seq, events, state)
      return { before: loaded.state, state, events, seq, appended: true, record }
    } catch (err) {
      if (!(err instanceof ConcurrencyConflict)) throw err
      lastConflict = err
    }
  }
  throw lastConflict!
}
