import { ProjectNotFound, UserNotFound } from '../../../domain/errors.ts'
import type { Plan, Project, ProjectRole, RateLimitOverride } from '../../../domain/project/index.ts'
import type { User } from '../../../domain/user.ts'
import { projectHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { isUserId, type AccountService } from '../platform/accounts.ts'
import { commandProject } from '../projects/project-service.ts'
import type { BillingService, BillingView } from '../metering/billing-service.ts'

export interface StaffProjectView {
  id: string
  name: string
  status: Project['status']
  owner_email: string | null
  created_at: string
  updated_at: string
  keys_revoked_at: string | null
  members: Array<{ user_id: string; email: string; role: ProjectRole }>
  /** The override as last set, also once it has lapsed (`billing.requests_per_hour` says what applies now). */
  rate_limit_override: RateLimitOverride | null
  billing: BillingView
}

export interface StaffUserView {
  user_id: string
  email: string
  status: User['status']
  is_admin: boolean
  email_verified: boolean
  totp_enabled: boolean
  created_at: string
  updated_at: string
  projects: Array<{ id: string; name: string; role: ProjectRole | null }>
}

/**
 * What staff (`is_admin` users) do through the admin routes: look projects and users up,
 * suspend and reinstate users, raise a project's request limit for a while, change its plan.
 * Each change is a command naming the staff member, so the project's activity records it.
 */
export class StaffService {
  readonly #deps: Deps
  /** The account and billing services of the API process, shared rather than made again. */
  readonly #services: { accounts: AccountService; billing: BillingService }

  constructor(deps: Deps, services: { accounts: AccountService; billing: BillingService }) {
    this.#deps = deps
    this.#services = services
  }

  #meta() {
    return { now: this.#deps.now().toISOString() }
  }

  /** Any project, deleted ones included (staff may need to see what happened to it). */
  async #loadProject(projectId: string): Promise<Project> {
    const project = /^prj_[0-9a-z]{26}$/.test(projectId) ? (await projectHandler.load(this.#deps.store, projectHandler.ref(projectId))).state : null
    if (project === null) throw new ProjectNotFound(projectId)
    return project
  }

  async projectView(project: Project): Promise<StaffProjectView> {
    return {
      id: project.id,
      name: project.name,
      status: project.status,
      owner_email: project.owner_email,
      created_at: project.created_at,
      updated_at: project.updated_at,
      keys_revoked_at: project.keys_revoked_at,
      members: project.members.map((m) => ({ user_id: m.user_id, email: m.email, role: m.role })),
      rate_limit_override: project.rate_limit_override,
      billing: await this.#services.billing.view(project),
    }
  }

  async project(projectId: string): Promise<StaffProjectView> {
    return this.projectView(await this.#loadProject(projectId))
  }

  /** By id (`usr_…`) or e-mail address. */
  async #findUser(idOrEmail: string): Promise<User> {
    const user = isUserId(idOrEmail)
      ? await this.#services.accounts.loadUser(idOrEmail)
      : idOrEmail.includes('@')
        ? await this.#services.accounts.findUserByEmail(idOrEmail)
        : null
    if (user === null) throw new UserNotFound(`no user ${idOrEmail}`)
    return user
  }

  async user(idOrEmail: string): Promise<StaffUserView> {
    return this.userView(await this.#findUser(idOrEmail))
  }

  async userView(user: User): Promise<StaffUserView> {
    const projects = await Promise.all(
      user.project_ids.map(async (id) => {
        const project = (await projectHandler.load(this.#deps.store, projectHandler.ref(id))).state
        if (project === null || project.status !== 'active') return null
        return { id, name: project.name, role: project.members.find((m) => m.user_id === user.id)?.role ?? null }
      }),
    )
    return {
      user_id: user.id,
      email: user.email,
      status: user.status,
      is_admin: user.is_admin,
      email_verified: user.email_verified_at !== null,
      totp_enabled: Boolean(user.totp?.enabled_at),
      created_at: user.created_at,
      updated_at: user.updated_at,
      projects: projects.filter((p) => p !== null),
    }
  }

  async setSuspended(staff: User, idOrEmail: string, suspended: boolean): Promise<StaffUserView> {
    const user = await this.#findUser(idOrEmail)
    return this.userView(await this.#services.accounts.setSuspendedByStaff(staff, user.id, suspended))
  }

  async overrideRateLimit(
    staff: User,
    projectId: string,
    override: { requests_per_hour: number; expires_at: string; reason: string },
  ): Promise<StaffProjectView> {
    const project = await this.#loadProject(projectId)
    const result = await commandProject(this.#deps, project.id, {
      type: 'override_rate_limit',
      data: {
        staff_user_id: staff.id,
        ...override,
        expires_at: new Date(override.expires_at).toISOString(),
        plan_requests_per_hour: this.#deps.config.plans[project.plan].requests_per_hour,
      },
      meta: this.#meta(),
    })
    return this.projectView(result.state!)
  }

  async changePlan(staff: User, projectId: string, plan: Plan): Promise<StaffProjectView> {
    const project = await this.#loadProject(projectId)
    const result = await commandProject(this.#deps, project.id, {
      type: 'change_plan_by_staff',
      data: { staff_user_id: staff.id, plan, overage_available: this.#deps.config.plans[plan].overage_cents_per_10k !== null },
      meta: this.#meta(),
    })
    return this.projectView(result.state!)
  }
}
