import assert from 'node:assert/strict'
import type { Test } from 'tap'
import { EventBeforeCreation, fold, type Decider } from '../../domain/decider.ts'
import { DomainError } from '../../domain/errors.ts'

type Asserts = Pick<Test, 'strictSame' | 'equal' | 'type' | 'fail'>
type EvolveAsserts = Pick<Test, 'not' | 'throws'>

type DomainErrorClass = new (...args: never[]) => DomainError

/**
 * Emmett's given/when/then for a decider, reporting through tap:
 *
 *   const spec = deciderSpec(t, jobDecider)
 *   spec.given([created, claimed]).when(ack('succeeded')).then([succeeded])
 *   spec.given([created]).when(ack('succeeded')).thenThrows(InvalidState, 'invalid_state')
 *
 * `givenState` starts from a state no event sequence reaches (a job in `failed`, spec rule 7).
 * `then` returns the state after the decided events, for assertions on the folded result.
 */
export function deciderSpec<Command, Event, State>(t: Asserts, decider: Decider<Command, Event, State>) {
  const from = (state: State) => ({
    when: (command: Command) => ({
      then(expected: readonly Event[], message = 'decides the expected events'): State {
        const events = decider.decide(command, state)
        t.strictSame(events, expected, message)
        return fold(decider, state, events)
      },
      thenThrows(errorClass: DomainErrorClass, code: string, message = `refuses with ${errorClass.name}`): void {
        let events: Event[]
        try {
          events = decider.decide(command, state)
        } catch (error) {
          t.type(error, errorClass, message)
          t.equal((error as DomainError).code, code, `error code is ${code}`)
          return
        }
        t.fail(`${message}, but it decided ${JSON.stringify(events)}`)
      },
    }),
  })
  return {
    given: (events: readonly Event[]) => from(fold(decider, decider.initialState, events)),
    givenState: from,
  }
}

/**
 * The rule every `evolve` follows on a missing state (domain/decider.ts): the creation event
 * builds a state from nothing, and each later event, applied to no state, throws
 * EventBeforeCreation.
 */
export function evolveOnMissingState<Command, Event extends { type: string }, State>(
  t: EvolveAsserts,
  decider: Decider<Command, Event, State>,
  creation: Event,
  later: readonly Event[],
): void {
  t.not(decider.evolve(decider.initialState, creation), decider.initialState, `${creation.type} builds the state from nothing`)
  for (const event of later) {
    t.throws(() => decider.evolve(decider.initialState, event), EventBeforeCreation, `${event.type} on a missing state throws`)
  }
}

/**
 * One step of a property test: decide, then fold. A refusal must be a DomainError that leaves the
 * state as it was; an accepted command's decide and evolve must not mutate it either, since
 * handleCommand hands back both `before` and the folded state. Throws (node:assert) otherwise.
 */
export function decideChecked<Command, Event, State>(
  decider: Decider<Command, Event, State>,
  command: Command,
  state: State,
): { before: State; refusal: DomainError } | { before: State; events: Event[]; next: State } {
  const before = structuredClone(state)
  let events: Event[]
  try {
    events = decider.decide(command, state)
  } catch (error) {
    assert.ok(error instanceof DomainError, `decide threw a non-domain error: ${String(error)}`)
    assert.deepEqual(state, before, 'a refused command leaves the state untouched')
    return { before, refusal: error }
  }
  assert.deepEqual(state, before, 'decide does not mutate the state')
  const next = fold(decider, state, events)
  assert.deepEqual(state, before, 'evolve does not mutate the state it folds into')
  return { before, events, next }
}
