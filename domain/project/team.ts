import {
  CannotModifyOwner,
  CannotRemoveOwner,
  InvalidRole,
  InvalidToken,
  InviteLimitReached,
  MemberExists,
  MemberNotFound,
  ProjectNotFound,
  RoleExceedsCaller,
} from '../errors.ts'
import {
  hasRoleAtLeast,
  isProjectRole,
  projectRoles,
  requireProject,
  requireRole,
  roleOf,
  type Acting,
  type Command,
  type Invite,
  type Member,
  type Project,
  type ProjectAggregate,
  type ProjectRole,
} from './state.ts'

/**
 * The project's team: members with a role, invitations by mail (stored only as their token's
 * SHA-256), role changes, removals and the transfer of ownership.
 */

/**
 * Invitations a project may have pending (not accepted, not expired) at once: each is a mail to
 * an address its admins typed, and each stays in the project's state until accepted or replaced.
 */
export const maxPendingInvites = 100

export type TeamEvent =
  | { type: 'member_invited'; data: Invite }
  | { type: 'team_invite_accepted'; data: { invite_id: string; user_id: string } }
  | { type: 'member_joined'; data: Member }
  | { type: 'member_role_changed'; data: { user_id: string; role: ProjectRole; previous_role: ProjectRole; changed_at: string } }
  | { type: 'member_removed'; data: { user_id: string; removed_at: string } }
  | { type: 'ownership_transferred'; data: { from_user_id: string; to_user_id: string; transferred_at: string } }

export type TeamCommand =
  | Command<'invite_member', Acting & { invite_id: string; email: string; role: string; token_hash: string; expires_at: string }>
  | Command<'accept_invite', { invite_id: string; token_hash: string; user_id: string; email: string }>
  | Command<'change_member_role', Acting & { user_id: string; role: string }>
  | Command<'remove_member', Acting & { user_id: string }>
  | Command<'transfer_ownership', Acting & { user_id: string }>

function isPending(invite: Invite, now: string): boolean {
  return Date.parse(invite.expires_at) > Date.parse(now)
}

function requireMember(project: Project, userId: string): Member {
  const member = project.members.find((m) => m.user_id === userId)
  if (member === undefined) throw new MemberNotFound(`user ${userId} is not a member of this project`)
  return member
}

/**
 * Below the owner, a member manages only roles strictly below their own: an admin invites,
 * changes and removes members and viewers, not other admins. The owner manages everyone.
 */
function outranks(actorRole: ProjectRole, role: ProjectRole): boolean {
  return actorRole === 'owner' || (hasRoleAtLeast(actorRole, role) && actorRole !== role)
}

/** Roles that can be given by invitation or role change; ownership moves only by transfer. */
function requireAssignableRole(role: string, actorRole: ProjectRole): ProjectRole {
  if (!isProjectRole(role)) throw new InvalidRole(`role must be one of ${projectRoles.join(', ')}`)
  if (role === 'owner') throw new InvalidRole('ownership is given only by a transfer')
  if (!outranks(actorRole, role)) throw new RoleExceedsCaller(`a ${actorRole} cannot grant the role ${role}`)
  return role
}

export function decideTeam(command: TeamCommand, state: ProjectAggregate): TeamEvent[] {
  const { now } = command.meta
  if (command.type === 'accept_invite') {
    const project = requireProject(state)
    const d = command.data
    const invite = project.invites.find((i) => i.invite_id === d.invite_id)
    const isValid =
      invite !== undefined && invite.token_hash === d.token_hash && invite.email === d.email && Date.parse(invite.expires_at) > Date.parse(now)
    if (!isValid) throw new InvalidToken('the invitation is invalid, used, expired or for another address')
    if (project.members.some((m) => m.user_id === d.user_id)) throw new MemberExists('you are already a member of this project')
    return [
      { type: 'team_invite_accepted', data: { invite_id: invite.invite_id, user_id: d.user_id } },
      { type: 'member_joined', data: { user_id: d.user_id, email: d.email, role: invite.role, joined_at: now } },
    ]
  }
  const project = requireProject(state)
  const actor = command.data.actor_user_id
  switch (command.type) {
    case 'invite_member': {
      const actorRole = requireRole(project, actor, 'admin', 'inviting members')
      const d = command.data
      const role = requireAssignableRole(d.role, actorRole)
      if (project.members.some((m) => m.email === d.email)) throw new MemberExists(`${d.email} is already a member`)
      // A new invitation to the same address replaces its old one, so that one does not count.
      const pending = project.invites.filter((i) => i.email !== d.email && isPending(i, now)).length
      if (pending >= maxPendingInvites) {
        throw new InviteLimitReached(`a project has at most ${maxPendingInvites} pending invitations; wait for some to be accepted or expire`)
      }
      return [
        {
          type: 'member_invited',
          data: {
            invite_id: d.invite_id,
            email: d.email,
            role,
            token_hash: d.token_hash,
            expires_at: d.expires_at,
            invited_by: actor ?? 'operator',
            invited_at: now,
          },
        },
      ]
    }
    case 'change_member_role': {
      const actorRole = requireRole(project, actor, 'admin', 'changing roles')
      const member = requireMember(project, command.data.user_id)
      if (member.role === 'owner') throw new CannotModifyOwner('the owner keeps the owner role until ownership is transferred')
      if (!outranks(actorRole, member.role)) throw new RoleExceedsCaller(`a ${actorRole} cannot change a ${member.role}`)
      const role = requireAssignableRole(command.data.role, actorRole)
      if (role === member.role) return []
      return [{ type: 'member_role_changed', data: { user_id: member.user_id, role, previous_role: member.role, changed_at: now } }]
    }
    case 'remove_member': {
      const leavingSelf = actor === command.data.user_id
      const actorRole = leavingSelf ? roleOf(project, actor) : requireRole(project, actor, 'admin', 'removing members')
      if (actorRole === null) throw new ProjectNotFound(project.id)
      const member = requireMember(project, command.data.user_id)
      if (member.role === 'owner') throw new CannotRemoveOwner('the owner cannot be removed; transfer ownership first')
      if (!leavingSelf && !outranks(actorRole, member.role)) throw new RoleExceedsCaller(`a ${actorRole} cannot remove a ${member.role}`)
      return [{ type: 'member_removed', data: { user_id: member.user_id, removed_at: now } }]
    }
    case 'transfer_ownership': {
      requireRole(project, actor, 'owner', 'transferring ownership')
      const target = requireMember(project, command.data.user_id)
      const owner = project.members.find((m) => m.role === 'owner')
      if (owner === undefined || target.user_id === owner.user_id) return []
      return [{ type: 'ownership_transferred', data: { from_user_id: owner.user_id, to_user_id: target.user_id, transferred_at: now } }]
    }
  }
}

function withRole(members: Member[], userId: string, role: ProjectRole): Member[] {
  return members.map((m) => (m.user_id === userId ? { ...m, role } : m))
}

export function evolveTeam(state: Project, event: TeamEvent): Project {
  switch (event.type) {
    case 'member_invited': {
      // Expired invitations leave with the next one, so the state holds at most the pending cap.
      const kept = state.invites.filter((i) => i.email !== event.data.email && isPending(i, event.data.invited_at))
      return { ...state, invites: [...kept, event.data] }
    }
    case 'team_invite_accepted':
      return { ...state, invites: state.invites.filter((i) => i.invite_id !== event.data.invite_id) }
    case 'member_joined':
      return { ...state, members: [...state.members, event.data], updated_at: event.data.joined_at }
    case 'member_role_changed':
      return { ...state, members: withRole(state.members, event.data.user_id, event.data.role), updated_at: event.data.changed_at }
    case 'member_removed':
      return { ...state, members: state.members.filter((m) => m.user_id !== event.data.user_id), updated_at: event.data.removed_at }
    case 'ownership_transferred': {
      const demoted = withRole(state.members, event.data.from_user_id, 'admin')
      const newOwner = state.members.find((m) => m.user_id === event.data.to_user_id)
      return {
        ...state,
        members: withRole(demoted, event.data.to_user_id, 'owner'),
        owner_email: newOwner?.email ?? state.owner_email,
        updated_at: event.data.transferred_at,
      }
    }
  }
}
