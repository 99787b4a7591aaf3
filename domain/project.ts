import type { Decider } from './decider.ts'
import type { CommandMeta } from './job.ts'
import { ProjectAlreadyExists, ProjectNotFound } from './errors.ts'

/**
 * The project aggregate: the unit of isolation, and the owner of the project's API keys. Keys
 * are stored only as their 24-character lookup prefix and the SHA-256 of the whole key.
 */

export type Plan = 'free' | 'starter' | 'pro' | 'business' | 'enterprise'
export const plans: readonly Plan[] = ['free', 'starter', 'pro', 'business', 'enterprise']

export interface ApiKeyRecord {
  prefix: string
  key_hash: string
  status: 'active' | 'grace' | 'revoked'
  issued_at: string
  /** End of the grace window for a rotated-out key; null while active. */
  expires_at: string | null
}

export interface Project {
  id: string
  name: string
  plan: Plan
  owner_email: string | null
  created_at: string
  updated_at: string
  keys: ApiKeyRecord[]
}

export type ProjectAggregate = Project | null

export type ProjectEventType = ProjectEvent["type"]

export type ProjectEvent =
  | {
      type: 'project_created'
      data: { project_id: string; name: string; plan: Plan; owner_email: string | null; created_at: string }
    }
  | { type: 'api_key_issued'; data: { prefix: string; key_hash: string; issued_at: string } }

export type ProjectCommand = {
  type: 'create_project'
  data: { project_id: string; name: string; plan: Plan; owner_email: string | null; key: { prefix: string; key_hash: string } }
  meta: CommandMeta
}

function decide(command: ProjectCommand, state: ProjectAggregate): ProjectEvent[] {
  const { now } = command.meta
  switch (command.type) {
    case 'create_project': {
      if (state !== null) throw new ProjectAlreadyExists(state.id)
      const d = command.data
      return [
        {
          type: 'project_created',
          data: { project_id: d.project_id, name: d.name, plan: d.plan, owner_email: d.owner_email, created_at: now },
        },
        { type: 'api_key_issued', data: { prefix: d.key.prefix, key_hash: d.key.key_hash, issued_at: now } },
      ]
    }
  }
}

function evolve(state: ProjectAggregate, event: ProjectEvent): ProjectAggregate {
  switch (event.type) {
    case 'project_created':
      return {
        id: event.data.project_id,
        name: event.data.name,
        plan: event.data.plan,
        owner_email: event.data.owner_email,
        created_at: event.data.created_at,
        updated_at: event.data.created_at,
        keys: [],
      }
    case 'api_key_issued':
      if (state === null) throw new ProjectNotFound('(unknown)')
      return {
        ...state,
        keys: [
          ...state.keys,
          { prefix: event.data.prefix, key_hash: event.data.key_hash, status: 'active', issued_at: event.data.issued_at, expires_at: null },
        ],
        updated_at: event.data.issued_at,
      }
  }
}

export const projectDecider: Decider<ProjectCommand, ProjectEvent, ProjectAggregate> = {
  initialState: null,
  decide,
  evolve,
}
