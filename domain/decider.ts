/**
 * What the edge passes in on every command so that `decide` stays deterministic: `now` is an ISO
 * instant; `random` is in [0, 1) and only feeds the job's retry jitter.
 */
export interface CommandMeta {
  now: string
  random?: number
}

/**
 * The shape every aggregate follows (Emmett's decider): `decide` turns a command and the current
 * state into events or throws a DomainError; `evolve` folds one event into the state. Both are
 * pure: time, ids and randomness arrive on the command.
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
