import type { CommandMeta, Decider } from './decider.ts'
import { EventBeforeCreation } from './decider.ts'
import { InvalidState } from './errors.ts'

/**
 * A key that signs audit checkpoints (docs/audit.md, "Keys"): an aggregate of the platform keyed
 * by its `key_id`, so that every process of an install, and every verifier through
 * `GET /jobsvc/v1/audit/keys`, sees the same keys and windows. A key is activated once (an append
 * at sequence 0: two processes starting with one key activate it once) and retired when another
 * takes over; a retired key signs nothing again, and stays published so that what it signed stays
 * verifiable.
 */
export interface AuditSigningKey {
  key_id: string
  algorithm: 'Ed25519'
  /** The 32 raw bytes, standard base64. */
  public_key: string
  valid_from: string
  valid_until: string | null
}

export type AuditSigningKeyAggregate = AuditSigningKey | null

export type AuditSigningKeyEvent =
  | { type: 'signing_key_activated'; data: { key_id: string; algorithm: 'Ed25519'; public_key: string; valid_from: string } }
  | { type: 'signing_key_retired'; data: { valid_until: string } }
export type AuditSigningKeyEventType = AuditSigningKeyEvent['type']

export type AuditSigningKeyCommand =
  | { type: 'activate_signing_key'; data: { key_id: string; public_key: string }; meta: CommandMeta }
  | { type: 'retire_signing_key'; data: { valid_until: string }; meta: CommandMeta }

/** The refusal a process gets when its configured key was retired by a newer one: it must not sign. */
export class SigningKeyRetired extends InvalidState {
  constructor(keyId: string) {
    super(`audit signing key ${keyId} was retired by a newer key; this process must be restarted with the current key`)
  }
}

function decide(command: AuditSigningKeyCommand, state: AuditSigningKeyAggregate): AuditSigningKeyEvent[] {
  switch (command.type) {
    case 'activate_signing_key':
      if (state !== null) {
        if (state.valid_until !== null) throw new SigningKeyRetired(state.key_id)
        return []
      }
      return [
        {
          type: 'signing_key_activated',
          data: { key_id: command.data.key_id, algorithm: 'Ed25519', public_key: command.data.public_key, valid_from: command.meta.now },
        },
      ]
    case 'retire_signing_key':
      if (state === null || state.valid_until !== null) return []
      // A window never closes before it opened.
      return [
        {
          type: 'signing_key_retired',
          data: { valid_until: command.data.valid_until < state.valid_from ? state.valid_from : command.data.valid_until },
        },
      ]
  }
}

function evolve(state: AuditSigningKeyAggregate, event: AuditSigningKeyEvent): AuditSigningKeyAggregate {
  switch (event.type) {
    case 'signing_key_activated':
      return { ...event.data, valid_until: null }
    case 'signing_key_retired':
      if (state === null) throw new EventBeforeCreation(event.type, 'signing_key_activated')
      return { ...state, valid_until: event.data.valid_until }
  }
}

export const auditSigningKeyDecider: Decider<AuditSigningKeyCommand, AuditSigningKeyEvent, AuditSigningKeyAggregate> = {
  initialState: null,
  decide,
  evolve,
}
