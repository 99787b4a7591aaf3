import { InvalidToken, ProjectNotFound } from '../../../domain/errors.ts'
import {
  activeKeyPrefix,
  roleOf,
  type Member,
  type Plan,
  type Project,
  type ProjectCommand,
  type ProjectEvent,
  type ProjectRole,
} from '../../../domain/project/index.ts'
import type { User } from '../../../domain/user.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { projectHandler } from '../../../streams/aggregates.ts'
import type { AccountService } from './accounts.ts'
import { invitationsPerWindow, WindowFull } from './auth-limits.ts'
import { inviteMail, tokenLink } from '../../infrastructure/mailer.ts'
import { randomSecret, sha256Hex } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { apiKeyPrefix, generateApiKey, hashApiKey, type KeyEnvironment } from '../projects/api-keys.ts'
import { commandProject, createProject } from '../projects/project-service.ts'

export const inviteTtlMs = 7 * 24 * 60 * 60 * 1000

export interface ProjectView {
  id: string
  name: string
  plan: Plan
  role: ProjectRole
  api_key_prefix: string | null
  keys_revoked_at: string | null
  created_at: string
  updated_at: string
}

export interface MemberView {
  user_id: string
  email: string
  role: ProjectRole
  joined_at: string
}

export interface InviteView {
  invite_id: string
  email: string
  role: ProjectRole
  invited_by: string
  invited_at: string
  expires_at: string
}

export function projectView(project: Project, role: ProjectRole): ProjectView {
  return {
    id: project.id,
    name: project.name,
    plan: project.plan,
    role,
    api_key_prefix: activeKeyPrefix(project),
    keys_revoked_at: project.keys_revoked_at,
    created_at: project.created_at,
    updated_at: project.updated_at,
  }
}

const memberView = (m: Member): MemberView => ({ user_id: m.user_id, email: m.email, role: m.role, joined_at: m.joined_at })

/** Invitation tokens are `<project id>.<invite id>.<secret>`; only the digest is stored. */
function parseInviteToken(token: string): { projectId: string; inviteId: string } | null {
  const [projectId, inviteId, secret] = token.split('.')
  if (!projectId || !inviteId || !secret || !/^prj_[0-9a-z]{26}$/.test(projectId) || !/^inv_[0-9a-z]{26}$/.test(inviteId)) return null
  return { projectId, inviteId }
}

/**
 * Projects as the dashboard manages them: keys, renames, deletion and the team. Every change is
 * a command on the project aggregate with the acting user, whose role the aggregate checks; the
 * user's own project index follows each membership change.
 */
export class TeamService {
  readonly #deps: Deps
  readonly #accounts: AccountService

  constructor(deps: Deps, accounts: AccountService) {
    this.#deps = deps
    this.#accounts = accounts
  }

  #on(projectId: string, command: ProjectCommand): Promise<CommandResult<ProjectEvent, Project>> {
    return commandProject(this.#deps, projectId, command)
  }

  #meta() {
    return { now: this.#deps.now().toISOString() }
  }

  /** The project as `user` may see it: missing, deleted and not-a-member all read as not found. */
  async load(user: User, projectId: string): Promise<{ project: Project; role: ProjectRole }> {
    const project = /^prj_[0-9a-z]{26}$/.test(projectId) ? (await projectHandler.load(this.#deps.store, projectHandler.ref(projectId))).state : null
    const role = project?.status === 'active' ? roleOf(project, user.id) : null
    if (project === null || role === null) throw new ProjectNotFound(projectId)
    return { project, role }
  }

  async list(user: User): Promise<ProjectView[]> {
    const views = await Promise.all(
      user.project_ids.map(async (id) => {
        const project = (await projectHandler.load(this.#deps.store, projectHandler.ref(id))).state
        const role = project?.status === 'active' ? roleOf(project, user.id) : null
        return project !== null && role !== null ? projectView(project, role) : null
      }),
    )
    return views.filter((v): v is ProjectView => v !== null).sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id))
  }

  async create(user: User, input: { name: string; plan?: Plan | undefined }): Promise<{ view: ProjectView; apiKey: string }> {
    const { project, apiKey } = await createProject(this.#deps, {
      name: input.name,
      plan: input.plan ?? user.plan,
      ownerEmail: user.email,
      ownerUserId: user.id,
      keyEnvironment: 'live',
    })
    await this.#accounts.indexProject(user.id, project.id, true)
    return { view: projectView(project, 'owner'), apiKey }
  }

  async rename(user: User, projectId: string, name: string): Promise<ProjectView> {
    await this.load(user, projectId)
    const result = await this.#on(projectId, { type: 'rename_project', data: { actor_user_id: user.id, name }, meta: this.#meta() })
    return projectView(result.state!, roleOf(result.state!, user.id)!)
  }

  async delete(user: User, projectId: string): Promise<string> {
    await this.load(user, projectId)
    const owned = await this.#accounts.ownedProjects(user)
    const others = owned.filter((p) => p.id !== projectId).length
    const result = await this.#on(projectId, {
      type: 'delete_project',
      data: { actor_user_id: user.id, other_projects_of_actor: others },
      meta: this.#meta(),
    })
    for (const member of result.before?.members ?? []) await this.#accounts.indexProject(member.user_id, projectId, false)
    return result.state!.updated_at
  }

  async rotateKey(user: User, projectId: string): Promise<{ apiKey: string; rotatedAt: string }> {
    const { project } = await this.load(user, projectId)
    const environment: KeyEnvironment = project.keys.at(-1)?.prefix.startsWith('sv_test_') ? 'test' : 'live'
    const apiKey = generateApiKey(environment)
    const result = await this.#on(projectId, {
      type: 'rotate_api_key',
      data: { actor_user_id: user.id, key: { prefix: apiKeyPrefix(apiKey), key_hash: hashApiKey(apiKey) } },
      meta: this.#meta(),
    })
    await this.#noticeKeyChange(result.state!, `The API key of project ${project.id} was rotated; the previous key works for 24 more hours`)
    return { apiKey, rotatedAt: result.state!.updated_at }
  }

  async revokeKeys(user: User, projectId: string): Promise<string> {
    const { project } = await this.load(user, projectId)
    const result = await this.#on(projectId, { type: 'revoke_api_keys', data: { actor_user_id: user.id }, meta: this.#meta() })
    await this.#noticeKeyChange(result.state!, `Every API key of project ${project.id} was revoked`)
    return result.state!.keys_revoked_at!
  }

  /** A key change is a security notice to everyone who may change keys: the owner and the admins. */
  async #noticeKeyChange(project: Project, what: string): Promise<void> {
    const keyHolders = project.members.filter((m) => m.role === 'owner' || m.role === 'admin')
    for (const member of keyHolders) {
      const holder = await this.#accounts.loadUser(member.user_id)
      if (holder !== null) await this.#accounts.sendSecurityNotice(holder, what)
    }
  }

  async team(user: User, projectId: string): Promise<{ members: MemberView[]; invites: InviteView[] }> {
    const { project, role } = await this.load(user, projectId)
    const seesInvites = role === 'owner' || role === 'admin'
    return {
      members: project.members.map(memberView),
      invites: seesInvites
        ? project.invites.map((i) => ({
            invite_id: i.invite_id,
            email: i.email,
            role: i.role,
            invited_by: i.invited_by,
            invited_at: i.invited_at,
            expires_at: i.expires_at,
          }))
        : [],
    }
  }

  /**
   * Invites `input.email`, e-mailing a token. Each invitation takes one of the project's
   * invitations of the hour first (given back when the project refuses it, as nothing is sent);
   * the project caps the pending ones.
   */
  async invite(user: User, projectId: string, input: { email: string; role: string }): Promise<InviteView> {
    await this.load(user, projectId)
    const now = this.#deps.now()
    const verdict = await this.#accounts.limits.takeInvitation(projectId, now)
    if (!verdict.admitted) throw new WindowFull(`a project sends at most ${invitationsPerWindow} invitations per hour`, verdict.retryAfterMs)
    const inviteId = `inv_${this.#deps.newUlid().toLowerCase()}`
    const token = `${projectId}.${inviteId}.${randomSecret()}`
    const expiresAt = new Date(now.getTime() + inviteTtlMs).toISOString()
    const result = await this.#on(projectId, {
      type: 'invite_member',
      data: {
        actor_user_id: user.id,
        invite_id: inviteId,
        email: input.email,
        role: input.role,
        token_hash: sha256Hex(token),
        expires_at: expiresAt,
      },
      meta: { now: now.toISOString() },
    }).catch(async (err: unknown) => {
      await this.#accounts.limits.giveInvitationBack(projectId, now)
      throw err
    })
    const invite = result.state!.invites.find((i) => i.invite_id === inviteId)!
    const link = tokenLink(this.#accounts.publicUrl(), '/accept-invite', token)
    await this.#accounts.mailAddress('account', inviteMail(input.email, result.state!.name, invite.role, link))
    return {
      invite_id: inviteId,
      email: invite.email,
      role: invite.role,
      invited_by: invite.invited_by,
      invited_at: invite.invited_at,
      expires_at: expiresAt,
    }
  }

  async acceptInvite(user: User, token: string): Promise<ProjectView> {
    const parsed = parseInviteToken(token)
    if (parsed === null) throw new InvalidToken('the invitation is invalid, used, expired or for another address')
    const result = await this.#on(parsed.projectId, {
      type: 'accept_invite',
      data: { invite_id: parsed.inviteId, token_hash: sha256Hex(token), user_id: user.id, email: user.email },
      meta: this.#meta(),
    }).catch((err) => {
      // A project that is gone makes the invitation as dead as a wrong token.
      if (err instanceof ProjectNotFound) throw new InvalidToken('the invitation is invalid, used, expired or for another address')
      throw err
    })
    await this.#accounts.indexProject(user.id, parsed.projectId, true)
    return projectView(result.state!, roleOf(result.state!, user.id)!)
  }

  async changeRole(user: User, projectId: string, memberId: string, role: string): Promise<MemberView> {
    await this.load(user, projectId)
    const result = await this.#on(projectId, {
      type: 'change_member_role',
      data: { actor_user_id: user.id, user_id: memberId, role },
      meta: this.#meta(),
    })
    return memberView(result.state!.members.find((m) => m.user_id === memberId)!)
  }

  async removeMember(user: User, projectId: string, memberId: string): Promise<void> {
    await this.load(user, projectId)
    await this.#on(projectId, { type: 'remove_member', data: { actor_user_id: user.id, user_id: memberId }, meta: this.#meta() })
    await this.#accounts.indexProject(memberId, projectId, false)
  }

  async transferOwnership(user: User, projectId: string, newOwnerId: string): Promise<MemberView[]> {
    await this.load(user, projectId)
    const result = await this.#on(projectId, {
      type: 'transfer_ownership',
      data: { actor_user_id: user.id, user_id: newOwnerId },
      meta: this.#meta(),
    })
    return result.state!.members.map(memberView)
  }
}
