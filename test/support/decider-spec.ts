import type { Test } from 'tap'
import { fold, type Decider } from '../../domain/decider.ts'
import type { DomainError } from '../../domain/errors.ts'

type Asserts = Pick<Test, 'strictSame' | 'equal' | 'type' | 'fail'>

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
