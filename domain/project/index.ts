import { EventBeforeCreation, type Decider } from '../decider.ts'
import { decideBilling, evolveBilling, type BillingCommand, type BillingEvent } from './billing.ts'
import { decideKeys, evolveKeys, type KeysCommand, type KeysEvent } from './keys.ts'
import { createdProject, decideLifecycle, evolveLifecycle, type LifecycleCommand, type LifecycleEvent } from './lifecycle.ts'
import { decideQueuePause, evolveQueuePause, type QueuePauseCommand, type QueuePauseEvent } from './queue-pauses.ts'
import { decideQueueLimits, evolveQueueLimits, type QueueLimitsCommand, type QueueLimitsEvent } from './queue-limits.ts'
import { decideQueueSettings, evolveQueueSettings, type QueueSettingsCommand, type QueueSettingsEvent } from './queue-settings.ts'
import { decideRetryPolicy, evolveRetryPolicy, type RetryPolicyCommand, type RetryPolicyEvent } from './retry-policy.ts'
import { decideStaff, evolveStaff, type StaffCommand, type StaffEvent } from './staff.ts'
import type { ProjectAggregate } from './state.ts'
import { decideTeam, evolveTeam, type TeamCommand, type TeamEvent } from './team.ts'

/**
 * The project aggregate: the unit of isolation, the owner of the project's API keys and of its
 * team. One consistency boundary, decided by concern: the project itself (lifecycle.ts), its keys,
 * its team, its billing, what staff change, its retry policy, its paused queues, its queue settings, its queue limits. Each concern has its own commands,
 * events, decide and evolve over the one state (state.ts); the switches below route every command
 * and event to its concern, and the compiler checks that none is left out.
 */

export {
  billingStates,
  hasRoleAtLeast,
  isPlan,
  isProjectRole,
  maxProjectNameLength,
  plans,
  projectRoles,
  roleOf,
  signupPlans,
  upgradeProject,
  type ApiKeyRecord,
  type AppliedPromotion,
  type BillingState,
  type Invite,
  type Member,
  type Plan,
  type Project,
  type ProjectAggregate,
  type ProjectRole,
  type QueuePause,
  type QueueSettings,
  type RateLimitOverride,
  type SignupPlan,
  type StoredProject,
} from './state.ts'
export { activeKeyPrefix, apiKeyGraceMs } from './keys.ts'
export { maxPendingInvites } from './team.ts'
export { billingOf, hasProviderEvent, lastPeriodOf, promotionTermsOf, providerEventMemory } from './billing.ts'
export { isQueuePaused, maxPausedQueues, pauseOf, pausesAt } from './queue-pauses.ts'
export { defaultTtlOf, maxQueueSettings, queueSettingsOf } from './queue-settings.ts'
export {
  concurrencyStrategies,
  keyConcurrencyRange,
  maxQueueLimits,
  queueConcurrencyRange,
  queueLimitsOf,
  rateLimitRange,
  ratePeriodSecondsRange,
  type ConcurrencyLimits,
  type ConcurrencyStrategy,
  type FlowLimits,
  type KeyDimension,
  type QueueLimits,
  type RateLimits,
} from './queue-limits.ts'
export { maxRateLimitOverrideDays, requestsPerHourOf } from './staff.ts'

export type ProjectEvent =
  LifecycleEvent | KeysEvent | TeamEvent | BillingEvent | StaffEvent | RetryPolicyEvent | QueuePauseEvent | QueueSettingsEvent | QueueLimitsEvent

export type ProjectEventType = ProjectEvent['type']

export type ProjectCommand =
  | LifecycleCommand
  | KeysCommand
  | TeamCommand
  | BillingCommand
  | StaffCommand
  | RetryPolicyCommand
  | QueuePauseCommand
  | QueueSettingsCommand
  | QueueLimitsCommand

function unreachable(value: never): never {
  throw new Error(`unhandled ${(value as { type: string }).type}`)
}

function decide(command: ProjectCommand, state: ProjectAggregate): ProjectEvent[] {
  switch (command.type) {
    case 'create_project':
    case 'rename_project':
    case 'delete_project':
    case 'record_jobs_export':
    case 'record_audit_log_export':
    case 'record_history_expired':
      return decideLifecycle(command, state)
    case 'rotate_api_key':
    case 'revoke_api_keys':
      return decideKeys(command, state)
    case 'invite_member':
    case 'accept_invite':
    case 'change_member_role':
    case 'remove_member':
    case 'transfer_ownership':
      return decideTeam(command, state)
    case 'update_billing':
    case 'set_billing_state':
    case 'apply_promo_code':
    case 'warn_allowance':
    case 'roll_billing_period':
      return decideBilling(command, state)
    case 'override_rate_limit':
    case 'change_plan_by_staff':
      return decideStaff(command, state)
    case 'set_retry_policy':
      return decideRetryPolicy(command, state)
    case 'pause_queue':
    case 'resume_queue':
    case 'end_queue_pauses':
      return decideQueuePause(command, state)
    case 'set_queue_settings':
      return decideQueueSettings(command, state)
    case 'set_queue_limits':
      return decideQueueLimits(command, state)
    default:
      return unreachable(command)
  }
}

function evolve(state: ProjectAggregate, event: ProjectEvent): ProjectAggregate {
  if (event.type === 'project_created') return createdProject(event.data)
  if (state === null) throw new EventBeforeCreation(event.type, 'project_created')
  switch (event.type) {
    case 'project_renamed':
    case 'project_deleted':
    case 'jobs_exported':
    case 'audit_log_exported':
    case 'history_expired':
      return evolveLifecycle(state, event)
    case 'api_key_issued':
    case 'api_key_rotated':
    case 'api_key_revoked':
      return evolveKeys(state, event)
    case 'member_invited':
    case 'team_invite_accepted':
    case 'member_joined':
    case 'member_role_changed':
    case 'member_removed':
    case 'ownership_transferred':
      return evolveTeam(state, event)
    case 'plan_changed':
    case 'promo_code_applied':
    case 'overage_enabled':
    case 'overage_disabled':
    case 'spend_cap_updated':
    case 'billing_state_changed':
    case 'billing_state_confirmed':
    case 'allowance_warning_80':
    case 'allowance_warning_100':
    case 'billing_period_reset':
    case 'overage_charged':
      return evolveBilling(state, event)
    case 'rate_limit_overridden':
      return evolveStaff(state, event)
    case 'retry_policy_updated':
      return evolveRetryPolicy(state, event)
    case 'queue_paused':
    case 'queue_resumed':
      return evolveQueuePause(state, event)
    case 'queue_settings_updated':
      return evolveQueueSettings(state, event)
    case 'queue_limits_updated':
      return evolveQueueLimits(state, event)
    default:
      return unreachable(event)
  }
}

export const projectDecider: Decider<ProjectCommand, ProjectEvent, ProjectAggregate> = {
  initialState: null,
  decide,
  evolve,
}
