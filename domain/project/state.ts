import type { CommandMeta } from '../decider.ts'
import { Forbidden, ProjectNotFound } from '../errors.ts'
import type { PromoKind } from '../promo-code.ts'
import type { RetryPolicies } from '../retry-policy.ts'

/**
 * The project's state, shared by every concern of the aggregate (see index.ts), and what each
 * concern's decision needs of it: the project must exist, the actor must hold a role.
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
  /**
   * Retention has removed messages of this project up to this stream sequence (0: none): an
   * event feed cursor before it may have lost events after it (docs/event-log.md, "Cursors").
   */
  history_expired_through: number
  /** The queues paused, each until resumed or its `until` (queue-pauses.ts), in the order paused. */
  queue_pauses: QueuePause[]
  /** Per-queue settings (queue-settings.ts): a queue's default ttl. */
  queue_settings: QueueSettings[]
  /** Per-queue flow limits (queue-limits.ts): concurrency, per key, and rate of starts. */
  queue_limits: QueueLimits[]
}

/* Flow limits of a queue (queue-limits.ts, issue 29). */
/** Which value of a job makes its key: its `concurrency_key`, its job type, or one of its tags (`tag:<name>`). */
export type KeyDimension = 'concurrency_key' | 'job_type' | `tag:${string}`

/** What happens to a job whose key (or queue) is full: it waits, it is cancelled, or the oldest running one is asked to stop. */
export const concurrencyStrategies = ['queue', 'cancel_newest', 'cancel_in_progress'] as const
export type ConcurrencyStrategy = (typeof concurrencyStrategies)[number]

export interface ConcurrencyLimits {
  /** The queue's running jobs at most; null: no bound for the queue as a whole. */
  limit: number | null
  /** Each key's running jobs at most; null: no bound per key. */
  per_key: { limit: number; by: KeyDimension } | null
  strategy: ConcurrencyStrategy
}

/** A token bucket of starts: `limit` per `period_seconds`, at most `burst` at once; per key with `by`, else the queue's. */
export interface RateLimits {
  limit: number
  period_seconds: number
  burst: number
  by: KeyDimension | null
}

export interface FlowLimits {
  concurrency: ConcurrencyLimits | null
  rate: RateLimits | null
}

export interface QueueLimits extends FlowLimits {
  queue: string
  /** The dashboard user who set them; null for an API key. */
  updated_by: string | null
  updated_at: string
}

export interface QueueSettings {
  queue: string
  /** The ttl of jobs created in the queue without one (domain/job.ts, expiry). */
  default_ttl_seconds: number
  /** The dashboard user who set it; null for an API key. */
  updated_by: string | null
  updated_at: string
}

export interface QueuePause {
  queue: string
  reason: string | null
  /** When the pause ends by itself; null: until resumed. */
  until: string | null
  /** The dashboard user who paused it; null for an API key. */
  paused_by: string | null
  paused_at: string
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
  | 'history_expired_through'
  | 'queue_pauses'
  | 'queue_settings'
  | 'queue_limits'

/** A project's state as any message stored it. */
export type StoredProject = Omit<Project, AddedField> & Partial<Pick<Project, AddedField>>

/**
 * The project's state as a message stored it, in today's form: each field added since the first
 * release takes, where a state written before it lacks it, the value that state meant (no team,
 * billing active without overage or cap and never rolled, no provider events, retry policies,
 * override, promotions, paused queues, queue settings or queue limits). Applied wherever a message is decoded (streams/stored-forms.ts).
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
    history_expired_through: stored.history_expired_through ?? 0,
    queue_pauses: stored.queue_pauses ?? [],
    queue_settings: stored.queue_settings ?? [],
    queue_limits: stored.queue_limits ?? [],
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

/** `null` until the project's first event. */
export type ProjectAggregate = Project | null

export type Command<T extends string, D> = { type: T; data: D; meta: CommandMeta }

/** `actor_user_id: null` is the operator (command line), who may do anything. */
export type Acting = { actor_user_id: string | null }

export function requireProject(state: ProjectAggregate, id = '(unknown)'): Project {
  if (state === null || state.status === 'deleted') throw new ProjectNotFound(id)
  return state
}

/** The role the actor holds; a non-member is told the project does not exist (no probing). */
export function roleOf(project: Project, userId: string | null): ProjectRole | null {
  if (userId === null) return 'owner'
  return project.members.find((m) => m.user_id === userId)?.role ?? null
}

export function requireRole(project: Project, actor: string | null, least: ProjectRole, what: string): ProjectRole {
  const role = roleOf(project, actor)
  if (role === null) throw new ProjectNotFound(project.id)
  if (!hasRoleAtLeast(role, least)) throw new Forbidden(`${what} needs the project role ${least} or above`)
  return role
}
