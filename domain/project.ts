import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { promoCodeRefusal, type PromoKind } from './promo-code.ts'
import {
  AlreadyRevoked,
  CannotModifyOwner,
  CannotRemoveOwner,
  Forbidden,
  InvalidRole,
  InvalidRateLimitOverride,
  InvalidToken,
  InviteLimitReached,
  KeyRevoked,
  LastProject,
  OverageUnavailable,
  MemberExists,
  MemberNotFound,
  ProjectAlreadyExists,
  ProjectNotFound,
  RoleExceedsCaller,
  RetryPolicyLimitReached,
} from './errors.ts'
import { isSameRetryPolicy, maxQueueRetryPolicies, toRetryPolicy, type RetryPolicies, type RetryPolicy } from './retry-policy.ts'

/**
 * The project aggregate: the unit of isolation, the owner of the project's API keys and of its
 * team. Keys are stored only as their 24-character lookup prefix and the SHA-256 of the whole
 * key; invitation tokens only as their SHA-256.
 */

/** The plans a user may choose, at sign-up or for a new project; `enterprise` is set by an operator. */
export const signupPlans = ['free', 'starter', 'pro', 'business'] as const
export type SignupPlan = (typeof signupPlans)[number]

export const plans = [...signupPlans, 'enterprise'] as const
export type Plan = (typeof plans)[number]

export function isPlan(plan: string): plan is Plan {
  return (plans as readonly string[]).includes(plan)
}

export const billingStates = ['active', 'past_due', 'unpaid', 'cancelled', 'suspended'] as const
export type BillingState = (typeof billingStates)[number]

export const projectRoles = ['owner', 'admin', 'member', 'viewer'] as const
export type ProjectRole = (typeof projectRoles)[number]

const roleRank: Record<ProjectRole, number> = { viewer: 0, member: 1, admin: 2, owner: 3 }

/** True when `role` is `least` or above (viewer < member < admin < owner). */
export function hasRoleAtLeast(role: ProjectRole, least: ProjectRole): boolean {
  return roleRank[role] >= roleRank[least]
}

export function isProjectRole(role: string): role is ProjectRole {
  return (projectRoles as readonly string[]).includes(role)
}

export const maxProjectNameLength = 100

/** How long a rotated-out key keeps working (spec, Time limits). */
export const apiKeyGraceMs = 24 * 60 * 60 * 1000

/**
 * Invitations a project may have pending (not accepted, not expired) at once: each is a mail to
 * an address its admins typed, and each stays in the project's state until accepted or replaced.
 */
export const maxPendingInvites = 100

export interface ApiKeyRecord {
  prefix: string
  key_hash: string
  status: 'active' | 'grace' | 'revoked'
  issued_at: string
  /** End of the grace window for a rotated-out key; null while active. */
  expires_at: string | null
}

export interface Member {
  user_id: string
  email: string
  role: ProjectRole
  joined_at: string
}

export interface Invite {
  invite_id: string
  email: string
  role: ProjectRole
  token_hash: string
  expires_at: string
  invited_by: string
  invited_at: string
}

export interface Project {
  id: string
  name: string
  plan: Plan
  owner_email: string | null
  created_at: string
  updated_at: string
  status: 'active' | 'deleted'
  keys: ApiKeyRecord[]
  /** Set once by a revocation: no key of this project ever works again. */
  keys_revoked_at: string | null
  members: Member[]
  invites: Invite[]
  billing_state: BillingState
  overage_enabled: boolean
  spend_cap_cents: number | null
  /** Allowance warnings already sent, as `<period>:<percent>`, for the current period only. */
  allowance_warnings: string[]
  /** The billing period the project was last rolled into (`YYYY-MM-01`); null: never rolled. */
  billing_period: string | null
  /** The payment provider's events applied lately (see providerEventMemory), so a replayed delivery is applied once. */
  provider_events: Array<{ id: string; at: string }>
  /** The project's retry settings (retryPolicyFor reads them). */
  retry_policies: RetryPolicies
  /** A staff member's request limit above the plan's, until `expires_at`; null: never set. */
  rate_limit_override: RateLimitOverride | null
  /** Promotion codes applied, oldest first. */
  promotions: AppliedPromotion[]
}

/** The fields added to the project's state after its first release, absent from the states written before each. */
type AddedField =
  | 'status'
  | 'keys_revoked_at'
  | 'members'
  | 'invites'
  | 'billing_state'
  | 'overage_enabled'
  | 'spend_cap_cents'
  | 'allowance_warnings'
  | 'billing_period'
  | 'provider_events'
  | 'retry_policies'
  | 'rate_limit_override'
  | 'promotions'

/** A project's state as any message stored it. */
export type StoredProject = Omit<Project, AddedField> & Partial<Pick<Project, AddedField>>

/**
 * The project's state as a message stored it, in today's form: each field added since the first
 * release takes, where a state written before it lacks it, the value that state meant (no team,
 * billing active without overage or cap and never rolled, no provider events, retry policies,
 * override or promotions). Applied wherever a message is decoded (streams/stored-forms.ts).
 */
export function upgradeProject(stored: StoredProject): Project {
  return {
    ...stored,
    status: stored.status ?? 'active',
    keys_revoked_at: stored.keys_revoked_at ?? null,
    members: stored.members ?? [],
    invites: stored.invites ?? [],
    billing_state: stored.billing_state ?? 'active',
    overage_enabled: stored.overage_enabled ?? false,
    spend_cap_cents: stored.spend_cap_cents ?? null,
    allowance_warnings: stored.allowance_warnings ?? [],
    billing_period: stored.billing_period ?? null,
    provider_events: stored.provider_events ?? [],
    retry_policies: stored.retry_policies ?? { project: null, queues: [] },
    rate_limit_override: stored.rate_limit_override ?? null,
    promotions: stored.promotions ?? [],
  }
}

export interface RateLimitOverride {
  requests_per_hour: number
  expires_at: string
  reason: string
  set_by: string
  set_at: string
}

export interface AppliedPromotion {
  code: string
  kind: PromoKind
  amount: number
  /** The first billing period it counts in (`YYYY-MM-01`) and how many it lasts. */
  first_period: string
  periods: number
}

/** How far ahead an override may end: far enough for any plan, and a later date is more often a typo. */
export const maxRateLimitOverrideDays = 366

/** The project's hourly request limit at `now`: a staff override while it lasts, else the plan's. */
export function requestsPerHourOf(project: Project, planRequestsPerHour: number, now: Date): number {
  const override = project.rate_limit_override
  if (!override || Date.parse(override.expires_at) <= now.getTime()) return planRequestsPerHour
  return Math.max(override.requests_per_hour, planRequestsPerHour)
}

const monthIndexOf = (period: string) => Number(period.slice(0, 4)) * 12 + Number(period.slice(5, 7)) - 1

/** The last billing period (`YYYY-MM-01`) a promotion counts in. */
export function lastPeriodOf(promotion: AppliedPromotion): string {
  const month = monthIndexOf(promotion.first_period) + promotion.periods - 1
  return `${Math.floor(month / 12)}-${String((month % 12) + 1).padStart(2, '0')}-01`
}

/**
 * What the project's promotions give in `period`: bonuses add up; of several discounts the
 * largest applies (discounts that added up could pass 100 %).
 */
export function promotionTermsOf(project: Project, period: string): { bonusJobs: number; discountPercent: number } {
  let bonusJobs = 0
  let discountPercent = 0
  for (const p of project.promotions) {
    const offset = monthIndexOf(period) - monthIndexOf(p.first_period)
    if (offset < 0 || offset >= p.periods) continue
    if (p.kind === 'allowance_bonus') bonusJobs += p.amount
    else discountPercent = Math.max(discountPercent, p.amount)
  }
  return { bonusJobs, discountPercent }
}

/**
 * How long and how many of the provider's event ids a project remembers. A signed delivery is
 * accepted within 5 minutes either side of its timestamp, so a replay of the same bytes arrives
 * within 10 minutes of the first; a day covers that and the provider's own retries, and the
 * count bounds the state should the provider send a burst.
 */
export const providerEventMemory = { ms: 24 * 60 * 60 * 1000, count: 100 }

/** True when the provider's event `id` was applied to the project (within providerEventMemory). */
export function hasProviderEvent(project: Project, id: string): boolean {
  return project.provider_events.some((e) => e.id === id)
}

function rememberProviderEvent(project: Project, id: string | null, at: string): Project['provider_events'] {
  const kept = project.provider_events.filter((e) => Date.parse(e.at) > Date.parse(at) - providerEventMemory.ms)
  return id === null ? kept : [...kept, { id, at }].slice(-providerEventMemory.count)
}

/** A project's billing settings. */
export function billingOf(project: Project): { state: BillingState; overageEnabled: boolean; spendCapCents: number | null } {
  return { state: project.billing_state, overageEnabled: project.overage_enabled, spendCapCents: project.spend_cap_cents }
}

export type ProjectAggregate = Project | null

export type ProjectEvent =
  | {
      type: 'project_created'
      data: { project_id: string; name: string; plan: Plan; owner_email: string | null; owner_user_id: string | null; created_at: string }
    }
  | { type: 'api_key_issued'; data: { prefix: string; key_hash: string; issued_at: string } }
  | { type: 'api_key_rotated'; data: { prefix: string; key_hash: string; rotated_at: string; grace_until: string } }
  | { type: 'api_key_revoked'; data: { revoked_at: string } }
  | { type: 'project_renamed'; data: { name: string; previous_name: string; renamed_at: string } }
  | { type: 'project_deleted'; data: { deleted_at: string } }
  | { type: 'member_invited'; data: Invite }
  | { type: 'team_invite_accepted'; data: { invite_id: string; user_id: string } }
  | { type: 'member_joined'; data: Member }
  | { type: 'member_role_changed'; data: { user_id: string; role: ProjectRole; previous_role: ProjectRole; changed_at: string } }
  | { type: 'member_removed'; data: { user_id: string; removed_at: string } }
  | { type: 'ownership_transferred'; data: { from_user_id: string; to_user_id: string; transferred_at: string } }
  /** `changed_by_staff`: the staff member who changed it (absent when the owner did). */
  | { type: 'plan_changed'; data: { plan: Plan; previous_plan: Plan; changed_at: string; changed_by_staff?: string } }
  | { type: 'rate_limit_overridden'; data: RateLimitOverride & { previous_requests_per_hour: number } }
  | { type: 'promo_code_applied'; data: AppliedPromotion & { applied_by: string; applied_at: string } }
  | { type: 'overage_enabled'; data: { enabled_at: string } }
  | { type: 'overage_disabled'; data: { disabled_at: string } }
  | { type: 'spend_cap_updated'; data: { spend_cap_cents: number | null; updated_at: string } }
  | {
      type: 'billing_state_changed'
      data: { state: BillingState; previous_state: BillingState; provider_event_id: string | null; changed_at: string }
    }
  /** The provider reported the state the project is already in: recorded so a replay of it is known. */
  | { type: 'billing_state_confirmed'; data: { state: BillingState; provider_event_id: string; confirmed_at: string } }
  | { type: 'allowance_warning_80' | 'allowance_warning_100'; data: { period: string; used: number; allowance: number; warned_at: string } }
  | {
      type: 'billing_period_reset'
      data: {
        period: string
        previous_period: string | null
        previous_used: number
        previous_overage: number
        previous_overage_cents: number
        reset_at: string
      }
    }
  | { type: 'overage_charged'; data: { period: string; overage: number; cents: number; charged_at: string } }
  | { type: 'jobs_exported'; data: { from: string; until: string; format: string; exported_at: string } }
  /** `exported_by`: the dashboard user who exported; null for the operator. */
  | { type: 'audit_log_exported'; data: { from: string; until: string; format: string; exported_by: string | null; exported_at: string } }
  /**
   * `queue` null: the project's default. `policy` null: the setting removed (the queue follows the
   * project's again, the project the spec's). `updated_by`: the dashboard user; null for an API key.
   */
  | {
      type: 'retry_policy_updated'
      data: { queue: string | null; policy: RetryPolicy | null; previous: RetryPolicy | null; updated_by: string | null; updated_at: string }
    }

export type ProjectEventType = ProjectEvent['type']

type Command<T extends string, D> = { type: T; data: D; meta: CommandMeta }

/** `actor_user_id: null` is the operator (command line), who may do anything. */
type Acting = { actor_user_id: string | null }

export type ProjectCommand =
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
  | Command<'rotate_api_key', Acting & { key: { prefix: string; key_hash: string } }>
  | Command<'revoke_api_keys', Acting>
  | Command<'rename_project', Acting & { name: string }>
  | Command<'delete_project', Acting & { other_projects_of_actor: number }>
  | Command<'invite_member', Acting & { invite_id: string; email: string; role: string; token_hash: string; expires_at: string }>
  | Command<'accept_invite', { invite_id: string; token_hash: string; user_id: string; email: string }>
  | Command<'change_member_role', Acting & { user_id: string; role: string }>
  | Command<'remove_member', Acting & { user_id: string }>
  | Command<'transfer_ownership', Acting & { user_id: string }>
  /**
   * Plan, overage and cap in one decision, so a refused part leaves everything unchanged.
   * `overage_available`: whether the plan the project ends on has an overage rate (plan numbers
   * live outside the domain).
   */
  | Command<'update_billing', Acting & { plan?: Plan; overage_enabled?: boolean; spend_cap_cents?: number | null; overage_available: boolean }>
  | Command<'set_billing_state', { state: BillingState; provider_event_id: string | null }>
  | Command<'record_jobs_export', { from: string; until: string; format: string }>
  /** Staff only (the edge checks `is_admin`); `plan_requests_per_hour` is the plan's limit now. */
  | Command<
      'override_rate_limit',
      { staff_user_id: string; requests_per_hour: number; plan_requests_per_hour: number; expires_at: string; reason: string }
    >
  | Command<'change_plan_by_staff', { staff_user_id: string; plan: Plan; overage_available: boolean }>
  /** The code was redeemed on its own aggregate first; `period` is the billing period it is applied in. */
  | Command<'apply_promo_code', Acting & { code: string; kind: PromoKind; amount: number; periods: number; period: string }>
  | Command<'record_audit_log_export', Acting & { from: string; until: string; format: string }>
  | Command<'warn_allowance', { period: string; percent: 80 | 100; used: number; allowance: number }>
  | Command<'roll_billing_period', { period: string; previous_used: number; previous_overage: number; previous_overage_cents: number }>
  /** `queue` null sets the project's default; `policy` null removes the setting. */
  | Command<'set_retry_policy', Acting & { queue: string | null; policy: RetryPolicy | null }>

/** The lookup prefix of the key that works now; null once the keys are revoked. */
export function activeKeyPrefix(project: Project): string | null {
  return project.keys.find((k) => k.status === 'active')?.prefix ?? null
}

function requireProject(state: ProjectAggregate, id = '(unknown)'): Project {
  if (state === null || state.status === 'deleted') throw new ProjectNotFound(id)
  return state
}

/** The role the actor holds; a non-member is told the project does not exist (no probing). */
export function roleOf(project: Project, userId: string | null): ProjectRole | null {
  if (userId === null) return 'owner'
  return project.members.find((m) => m.user_id === userId)?.role ?? null
}

function requireRole(project: Project, actor: string | null, least: ProjectRole, what: string): ProjectRole {
  const role = roleOf(project, actor)
  if (role === null) throw new ProjectNotFound(project.id)
  if (!hasRoleAtLeast(role, least)) throw new Forbidden(`${what} needs the project role ${least} or above`)
  return role
}

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

function decide(command: ProjectCommand, state: ProjectAggregate): ProjectEvent[] {
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
  if (command.type === 'set_billing_state') {
    const project = requireProject(state)
    const { state: next, provider_event_id: eventId } = command.data
    // A provider event already applied (a replay, or a retry of the same event) changes nothing,
    // even when a later event has moved the state on since.
    if (eventId !== null && hasProviderEvent(project, eventId)) return []
    const current = billingOf(project).state
    if (next === current)
      return eventId === null ? [] : [{ type: 'billing_state_confirmed', data: { state: next, provider_event_id: eventId, confirmed_at: now } }]
    return [{ type: 'billing_state_changed', data: { state: next, previous_state: current, provider_event_id: eventId, changed_at: now } }]
  }
  if (command.type === 'override_rate_limit') {
    requireProject(state)
    const d = command.data
    if (d.requests_per_hour <= d.plan_requests_per_hour)
      throw new InvalidRateLimitOverride(`requests_per_hour must be above the plan's ${d.plan_requests_per_hour}`)
    const remainingMs = Date.parse(d.expires_at) - Date.parse(now)
    if (remainingMs <= 0) throw new InvalidRateLimitOverride('expires_at must be in the future')
    if (remainingMs > maxRateLimitOverrideDays * 86_400_000)
      throw new InvalidRateLimitOverride(`expires_at must be within ${maxRateLimitOverrideDays} days`)
    const override = { requests_per_hour: d.requests_per_hour, expires_at: d.expires_at, reason: d.reason, set_by: d.staff_user_id, set_at: now }
    return [{ type: 'rate_limit_overridden', data: { ...override, previous_requests_per_hour: d.plan_requests_per_hour } }]
  }
  if (command.type === 'change_plan_by_staff') {
    const project = requireProject(state)
    const d = command.data
    if (d.plan === project.plan) return []
    const events: ProjectEvent[] = [
      { type: 'plan_changed', data: { plan: d.plan, previous_plan: project.plan, changed_at: now, changed_by_staff: d.staff_user_id } },
    ]
    // As for an owner's change: a plan without overage turns it off.
    if (billingOf(project).overageEnabled && !d.overage_available) events.push({ type: 'overage_disabled', data: { disabled_at: now } })
    return events
  }
  if (command.type === 'record_jobs_export') {
    requireProject(state)
    return [{ type: 'jobs_exported', data: { ...command.data, exported_at: now } }]
  }
  if (command.type === 'warn_allowance') {
    const project = requireProject(state)
    const mark = `${command.data.period}:${command.data.percent}`
    if (project.allowance_warnings.includes(mark)) return []
    const { period, used, allowance } = command.data
    return [
      { type: command.data.percent === 80 ? 'allowance_warning_80' : 'allowance_warning_100', data: { period, used, allowance, warned_at: now } },
    ]
  }
  if (command.type === 'roll_billing_period') {
    const project = requireProject(state)
    const previous = project.billing_period
    if (previous !== null && previous >= command.data.period) return []
    const d = command.data
    const events: ProjectEvent[] = [
      {
        type: 'billing_period_reset',
        data: {
          period: d.period,
          previous_period: previous,
          previous_used: d.previous_used,
          previous_overage: d.previous_overage,
          previous_overage_cents: d.previous_overage_cents,
          reset_at: now,
        },
      },
    ]
    if (previous !== null && d.previous_overage > 0) {
      events.unshift({
        type: 'overage_charged',
        data: { period: previous, overage: d.previous_overage, cents: d.previous_overage_cents, charged_at: now },
      })
    }
    return events
  }
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
    case 'rename_project':
      requireRole(project, actor, 'admin', 'renaming the project')
      if (command.data.name === project.name) return []
      return [{ type: 'project_renamed', data: { name: command.data.name, previous_name: project.name, renamed_at: now } }]
    case 'delete_project':
      requireRole(project, actor, 'owner', 'deleting the project')
      if (actor !== null && command.data.other_projects_of_actor === 0) throw new LastProject('this is your only project')
      return [{ type: 'project_deleted', data: { deleted_at: now } }]
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
    case 'update_billing': {
      const d = command.data
      const billing = billingOf(project)
      const changesPlan = d.plan !== undefined && d.plan !== project.plan
      requireRole(project, actor, changesPlan ? 'owner' : 'admin', changesPlan ? 'changing the plan' : 'changing billing settings')
      const wantsOverage = d.overage_enabled ?? billing.overageEnabled
      if (d.overage_enabled === true && !d.overage_available) throw new OverageUnavailable(`the ${d.plan ?? project.plan} plan has no overage`)
      const events: ProjectEvent[] = []
      if (changesPlan) events.push({ type: 'plan_changed', data: { plan: d.plan!, previous_plan: project.plan, changed_at: now } })
      // A plan without overage turns it off, whatever was asked for.
      const overage = wantsOverage && d.overage_available
      if (overage !== billing.overageEnabled) {
        events.push(overage ? { type: 'overage_enabled', data: { enabled_at: now } } : { type: 'overage_disabled', data: { disabled_at: now } })
      }
      if (d.spend_cap_cents !== undefined && d.spend_cap_cents !== billing.spendCapCents) {
        events.push({ type: 'spend_cap_updated', data: { spend_cap_cents: d.spend_cap_cents, updated_at: now } })
      }
      return events
    }
    case 'apply_promo_code': {
      requireRole(project, actor, 'owner', 'applying a promotion code')
      const { code, kind, amount, periods, period } = command.data
      if (project.promotions.some((p) => p.code === code)) throw new InvalidToken(promoCodeRefusal)
      return [
        { type: 'promo_code_applied', data: { code, kind, amount, first_period: period, periods, applied_by: actor ?? 'operator', applied_at: now } },
      ]
    }
    case 'record_audit_log_export': {
      requireRole(project, actor, 'admin', 'exporting the audit log')
      const { from, until, format } = command.data
      return [{ type: 'audit_log_exported', data: { from, until, format, exported_by: actor, exported_at: now } }]
    }
    case 'set_retry_policy': {
      requireRole(project, actor, 'admin', 'changing the retry policy')
      const { queue } = command.data
      const policy = command.data.policy === null ? null : toRetryPolicy(command.data.policy)
      const policies = project.retry_policies
      const previous = queue === null ? policies.project : (policies.queues.find((p) => p.queue === queue) ?? null)
      if (isSameRetryPolicy(previous, policy)) return []
      if (queue !== null && previous === null && policies.queues.length >= maxQueueRetryPolicies) {
        throw new RetryPolicyLimitReached(`a project has at most ${maxQueueRetryPolicies} queue retry policies; remove one first`)
      }
      return [
        {
          type: 'retry_policy_updated',
          data: { queue, policy, previous: previous === null ? null : toRetryPolicy(previous), updated_by: actor, updated_at: now },
        },
      ]
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

function withRetryPolicy(policies: RetryPolicies, queue: string | null, policy: RetryPolicy | null): RetryPolicies {
  if (queue === null) return { ...policies, project: policy }
  const others = policies.queues.filter((p) => p.queue !== queue)
  return { ...policies, queues: policy === null ? others : [...others, { ...policy, queue }] }
}

function withRole(members: Member[], userId: string, role: ProjectRole): Member[] {
  return members.map((m) => (m.user_id === userId ? { ...m, role } : m))
}

function evolve(state: ProjectAggregate, event: ProjectEvent): ProjectAggregate {
  if (event.type === 'project_created') {
    const d = event.data
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
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'project_created')
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
    case 'plan_changed':
      return { ...state, plan: event.data.plan, updated_at: event.data.changed_at }
    case 'overage_enabled':
      return { ...state, overage_enabled: true, updated_at: event.data.enabled_at }
    case 'overage_disabled':
      return { ...state, overage_enabled: false, updated_at: event.data.disabled_at }
    case 'spend_cap_updated':
      return { ...state, spend_cap_cents: event.data.spend_cap_cents, updated_at: event.data.updated_at }
    case 'billing_state_changed':
      return {
        ...state,
        billing_state: event.data.state,
        provider_events: rememberProviderEvent(state, event.data.provider_event_id, event.data.changed_at),
        updated_at: event.data.changed_at,
      }
    case 'billing_state_confirmed':
      return { ...state, provider_events: rememberProviderEvent(state, event.data.provider_event_id, event.data.confirmed_at) }
    case 'allowance_warning_80':
    case 'allowance_warning_100': {
      const mark = `${event.data.period}:${event.type === 'allowance_warning_80' ? 80 : 100}`
      const kept = state.allowance_warnings.filter((w) => w.startsWith(`${event.data.period}:`))
      return { ...state, allowance_warnings: [...kept, mark] }
    }
    case 'billing_period_reset':
      return { ...state, billing_period: event.data.period, allowance_warnings: [] }
    case 'retry_policy_updated':
      return {
        ...state,
        retry_policies: withRetryPolicy(state.retry_policies, event.data.queue, event.data.policy),
        updated_at: event.data.updated_at,
      }
    case 'rate_limit_overridden': {
      const { previous_requests_per_hour: _previous, ...override } = event.data
      return { ...state, rate_limit_override: override, updated_at: event.data.set_at }
    }
    case 'promo_code_applied': {
      const { code, kind, amount, first_period, periods } = event.data
      return { ...state, promotions: [...state.promotions, { code, kind, amount, first_period, periods }], updated_at: event.data.applied_at }
    }
    case 'overage_charged':
    case 'jobs_exported':
    case 'audit_log_exported':
      return state
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

export const projectDecider: Decider<ProjectCommand, ProjectEvent, ProjectAggregate> = {
  initialState: null,
  decide,
  evolve,
}
