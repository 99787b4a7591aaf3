import { AlreadyRevoked, KeyRevoked } from '../errors.ts'
import { requireProject, requireRole, type Acting, type ApiKeyRecord, type Command, type Project, type ProjectAggregate } from './state.ts'

/**
 * The project's API keys: one active, a rotated-out one in its grace window, all revoked at once
 * for good. Keys are stored only as their 24-character lookup prefix and the SHA-256 of the whole
 * key.
 */

/** How long a rotated-out key keeps working (spec, Time limits). */
export const apiKeyGraceMs = 24 * 60 * 60 * 1000

export type KeysEvent =
  | { type: 'api_key_issued'; data: { prefix: string; key_hash: string; issued_at: string } }
  | { type: 'api_key_rotated'; data: { prefix: string; key_hash: string; rotated_at: string; grace_until: string } }
  | { type: 'api_key_revoked'; data: { revoked_at: string } }

export type KeysCommand = Command<'rotate_api_key', Acting & { key: { prefix: string; key_hash: string } }> | Command<'revoke_api_keys', Acting>

/** The lookup prefix of the key that works now; null once the keys are revoked. */
export function activeKeyPrefix(project: Project): string | null {
  return project.keys.find((k) => k.status === 'active')?.prefix ?? null
}

export function decideKeys(command: KeysCommand, state: ProjectAggregate): KeysEvent[] {
  const { now } = command.meta
  const project = requireProject(state)
  const actor = command.data.actor_user_id
  switch (command.type) {
    case 'rotate_api_key':
      requireRole(project, actor, 'admin', 'rotating the API key')
      if (project.keys_revoked_at !== null) throw new KeyRevoked('the API keys of this project were revoked')
      return [
        {
          type: 'api_key_rotated',
          data: { ...command.data.key, rotated_at: now, grace_until: new Date(Date.parse(now) + apiKeyGraceMs).toISOString() },
        },
      ]
    case 'revoke_api_keys':
      requireRole(project, actor, 'admin', 'revoking the API keys')
      if (project.keys_revoked_at !== null) throw new AlreadyRevoked('the API keys of this project are already revoked')
      return [{ type: 'api_key_revoked', data: { revoked_at: now } }]
  }
}

export function evolveKeys(state: Project, event: KeysEvent): Project {
  switch (event.type) {
    case 'api_key_issued':
      return {
        ...state,
        keys: [
          ...state.keys,
          { prefix: event.data.prefix, key_hash: event.data.key_hash, status: 'active', issued_at: event.data.issued_at, expires_at: null },
        ],
        updated_at: event.data.issued_at,
      }
    case 'api_key_rotated': {
      // The active key enters its grace window; a key already in grace is dropped, so back-to-back
      // rotations keep one previous key with a fresh window (spec, Authentication 7).
      const previous = state.keys
        .filter((k) => k.status === 'active')
        .map((k) => ({ ...k, status: 'grace' as const, expires_at: event.data.grace_until }))
      const next: ApiKeyRecord = {
        prefix: event.data.prefix,
        key_hash: event.data.key_hash,
        status: 'active',
        issued_at: event.data.rotated_at,
        expires_at: null,
      }
      return { ...state, keys: [...previous, next], updated_at: event.data.rotated_at }
    }
    case 'api_key_revoked':
      return {
        ...state,
        keys: state.keys.map((k) => ({ ...k, status: 'revoked' as const, expires_at: event.data.revoked_at })),
        keys_revoked_at: event.data.revoked_at,
        updated_at: event.data.revoked_at,
      }
  }
}
