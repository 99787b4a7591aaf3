import { LastProject, ProjectAlreadyExists } from '../errors.ts'
import type { KeysEvent } from './keys.ts'
import { requireProject, requireRole, type Acting, type Command, type Plan, type Project, type ProjectAggregate } from './state.ts'

/**
 * The project itself: created with its first API key (and its owner as first member, when a user
 * created it), renamed, deleted; and the exports made of it, recorded for the audit trail.
 */

export type LifecycleEvent =
  | {
      type: 'project_created'
      data: { project_id: string; name: string; plan: Plan; owner_email: string | null; owner_user_id: string | null; created_at: string }
    }
  | { type: 'project_renamed'; data: { name: string; previous_name: string; renamed_at: string } }
  | { type: 'project_deleted'; data: { deleted_at: string } }
  | { type: 'jobs_exported'; data: { from: string; until: string; format: string; exported_at: string } }
  /** `exported_by`: the dashboard user who exported; null for the operator. */
  | { type: 'audit_log_exported'; data: { from: string; until: string; format: string; exported_by: string | null; exported_at: string } }
  /**
   * Retention is about to remove messages of the project's ended jobs, none after stream sequence
   * `through_seq` (services/roles/scheduler/retention.ts). Recorded first, so a feed reader whose
   * cursor is older learns its events are gone (410) rather than skipping them unawares.
   */
  | { type: 'history_expired'; data: { through_seq: number; jobs: number; expired_at: string } }

export type LifecycleCommand =
  | Command<
      'create_project',
      {
        project_id: string
        name: string
        plan: Plan
        owner_email: string | null
        owner_user_id?: string | null
        key: { prefix: string; key_hash: string }
      }
    >
  | Command<'rename_project', Acting & { name: string }>
  | Command<'delete_project', Acting & { other_projects_of_actor: number }>
  | Command<'record_jobs_export', { from: string; until: string; format: string }>
  | Command<'record_audit_log_export', Acting & { from: string; until: string; format: string }>
  | Command<'record_history_expired', { through_seq: number; jobs: number }>

export function decideLifecycle(command: LifecycleCommand, state: ProjectAggregate): Array<LifecycleEvent | KeysEvent> {
  const { now } = command.meta
  if (command.type === 'create_project') {
    if (state !== null) throw new ProjectAlreadyExists(state.id)
    const d = command.data
    return [
      {
        type: 'project_created',
        data: {
          project_id: d.project_id,
          name: d.name,
          plan: d.plan,
          owner_email: d.owner_email,
          owner_user_id: d.owner_user_id ?? null,
          created_at: now,
        },
      },
      { type: 'api_key_issued', data: { prefix: d.key.prefix, key_hash: d.key.key_hash, issued_at: now } },
    ]
  }
  if (command.type === 'record_history_expired') {
    // A deleted project's jobs expire too; only a sequence the project has not recorded moves it.
    if (state === null || command.data.through_seq <= state.history_expired_through) return []
    return [{ type: 'history_expired', data: { ...command.data, expired_at: now } }]
  }
  const project = requireProject(state)
  switch (command.type) {
    case 'record_jobs_export':
      return [{ type: 'jobs_exported', data: { ...command.data, exported_at: now } }]
    case 'rename_project':
      requireRole(project, command.data.actor_user_id, 'admin', 'renaming the project')
      if (command.data.name === project.name) return []
      return [{ type: 'project_renamed', data: { name: command.data.name, previous_name: project.name, renamed_at: now } }]
    case 'delete_project': {
      const actor = command.data.actor_user_id
      requireRole(project, actor, 'owner', 'deleting the project')
      if (actor !== null && command.data.other_projects_of_actor === 0) throw new LastProject('this is your only project')
      return [{ type: 'project_deleted', data: { deleted_at: now } }]
    }
    case 'record_audit_log_export': {
      const actor = command.data.actor_user_id
      requireRole(project, actor, 'admin', 'exporting the audit log')
      const { from, until, format } = command.data
      return [{ type: 'audit_log_exported', data: { from, until, format, exported_by: actor, exported_at: now } }]
    }
  }
}

/** The state `project_created` builds from nothing: every field at its value for a new project. */
export function createdProject(d: Extract<LifecycleEvent, { type: 'project_created' }>['data']): Project {
  const ownerUserId = d.owner_user_id ?? null
  return {
    id: d.project_id,
    name: d.name,
    plan: d.plan,
    owner_email: d.owner_email,
    created_at: d.created_at,
    updated_at: d.created_at,
    status: 'active',
    keys: [],
    keys_revoked_at: null,
    members: ownerUserId === null ? [] : [{ user_id: ownerUserId, email: d.owner_email ?? '', role: 'owner', joined_at: d.created_at }],
    invites: [],
    billing_state: 'active',
    overage_enabled: false,
    spend_cap_cents: null,
    allowance_warnings: [],
    // A project starts in the period it is created in (UTC calendar months).
    billing_period: `${d.created_at.slice(0, 7)}-01`,
    provider_events: [],
    retry_policies: { project: null, queues: [] },
    rate_limit_override: null,
    promotions: [],
    history_expired_through: 0,
    queue_pauses: [],
    queue_settings: [],
    queue_limits: [],
  }
}

export function evolveLifecycle(state: Project, event: Exclude<LifecycleEvent, { type: 'project_created' }>): Project {
  switch (event.type) {
    case 'project_renamed':
      return { ...state, name: event.data.name, updated_at: event.data.renamed_at }
    case 'project_deleted':
      return {
        ...state,
        status: 'deleted',
        keys: state.keys.map((k) => ({ ...k, status: 'revoked' as const, expires_at: event.data.deleted_at })),
        invites: [],
        updated_at: event.data.deleted_at,
      }
    case 'jobs_exported':
    case 'audit_log_exported':
      return state
    case 'history_expired':
      return { ...state, history_expired_through: Math.max(state.history_expired_through, event.data.through_seq) }
  }
}
