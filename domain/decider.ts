/** A dashboard member acting through their session: who a change is recorded as made by. */
export interface Actor {
  user_id: string
  email: string
}

/**
 * What the edge passes in on every command so that `decide` stays deterministic: `now` is an ISO
 * instant; `random` is in [0, 1) and only feeds the job's retry jitter. `actor` is the member who
 * asked, where a dashboard session did (an API key, a worker or the service itself names none):
 * no decision reads it; the events it yields carry it, for the audit trail.
 */
export interface CommandMeta {
  now: string
  random?: number
  actor?: Actor
}

/**
 * The shape every aggregate follows (Emmett's decider): `decide` turns a command and the current
 * state into events or throws a DomainError; `evolve` folds one event into the state. Both are
 * pure: time, ids and randomness arrive on the command.
 *
 * Every aggregate's `initialState` is `null` (no events yet), and its `evolve` treats that missing
 * state by one rule: the aggregate's creation event builds the state from nothing, and any other
 * event throws EventBeforeCreation. `decide` on a missing state only ever creates, refuses or
 * decides nothing, so a history with another event first is corrupt, and folding past it would
 * hide that.
 */
export interface Decider<Command, Event, State> {
  initialState: State
  decide(command: Command, state: State): Event[]
  evolve(state: State, event: Event): State
}

/** Folds events into a state, starting from `state`. */
export function fold<Event, State>(decider: Pick<Decider<unknown, Event, State>, 'evolve'>, state: State, events: readonly Event[]): State {
  return events.reduce((s, e) => decider.evolve(s, e), state)
}

/**
 * An event other than its aggregate's creation applied to a missing state (see Decider). Not a
 * DomainError: it refuses no command but reports a corrupt history, which the API answers as any
 * other fault (500, logged).
 */
export class EventBeforeCreation extends Error {
  constructor(eventType: string, creationType: string) {
    super(`${eventType} before ${creationType}`)
    this.name = 'EventBeforeCreation'
  }
}
