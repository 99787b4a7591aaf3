import { hasRoleAtLeast } from '../../../domain/project/index.ts'
import type { User } from '../../../domain/user.ts'
import { activityFeed } from '../../../projections/activity.ts'
import type { TeamService } from './team-service.ts'
import { deleteProjectAsOperator } from '../projects/project-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { AccountService } from './accounts.ts'

/**
 * The account as a whole: the data export (what the service holds about the user, no secret,
 * and nothing the user's roles would not show them elsewhere) and deletion (owned projects
 * deleted, other memberships left, the user deleted and the address released for a new sign-up).
 */
export class AccountLifecycle {
  readonly #deps: Deps
  readonly #accounts: AccountService
  readonly #team: TeamService

  constructor(deps: Deps, accounts: AccountService, team: TeamService) {
    this.#deps = deps
    this.#accounts = accounts
    this.#team = team
  }

  /**
   * Activity: the user's own rows always (account changes, project rows naming them as the actor,
   * and in their projects the rows about their membership); a project's whole audit trail only
   * where their role may export the audit log (admin and owner), since it names webhook URLs and
   * invitees. Teams list pending invitations only where the members route shows them (admin and
   * owner).
   */
  async exportFor(user: User): Promise<Record<string, unknown>> {
    const projects = await this.#team.list(user)
    const teams = await Promise.all(projects.map(async (p) => ({ project_id: p.id, ...(await this.#team.team(user, p.id)) })))
    const projectIds = projects.map((p) => p.id)
    const auditedProjectIds = projects.filter((p) => hasRoleAtLeast(p.role, 'admin')).map((p) => p.id)
    const activity = await activityFeed.ofUser(this.#deps.sql, user.id, { auditedProjectIds, projectIds })
    return {
      exported_at: this.#deps.now().toISOString(),
      profile: await this.#accounts.profile(user),
      terms_accepted_at: user.terms_accepted_at,
      email_verified_at: user.email_verified_at,
      password_changed_at: user.password_changed_at,
      two_factor: { enabled_at: user.totp?.enabled_at ?? null, recovery_codes_left: user.recovery_code_hashes.length },
      projects,
      teams,
      activity: activity.map((a) => ({ ...a, created_at: new Date(a.created_at as string).toISOString() })),
    }
  }

  async deleteAccount(user: User): Promise<string> {
    for (const project of await this.#team.list(user)) {
      if (project.role === 'owner') await deleteProjectAsOperator(this.#deps, project.id)
      else await this.#team.removeMember(user, project.id, user.id)
    }
    await this.#accounts.deleteAccount(user)
    return this.#deps.now().toISOString()
  }
}
