/**
 * Refusals of the domain. Each carries the spec's error code and nothing about HTTP; the API's
 * error registry maps the class to a status.
 */
export class DomainError extends Error {
  readonly code: string
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

export class InvalidState extends DomainError {
  constructor(message: string) {
    super('invalid_state', message)
  }
}

export class WorkerMismatch extends DomainError {
  constructor(message: string) {
    super('worker_mismatch', message)
  }
}

export class JobNotFound extends DomainError {
  constructor(jobId?: string) {
    super('job_not_found', jobId ? `job ${jobId} was not found` : 'the job was not found')
  }
}

export class ParentNotFound extends DomainError {
  constructor(parentJobId: string) {
    super('parent_not_found', `parent job ${parentJobId} was not found`)
  }
}

export class ParentTerminal extends DomainError {
  constructor(parentJobId: string, state: string) {
    super('parent_terminal', `parent job ${parentJobId} is ${state} and will never succeed`)
  }
}

/**
 * An item of a graph batch (issue 30) that was not created because another item of the graph
 * could not be: a graph is created whole or not at all. `failedIndex` names the item whose own
 * error decided it.
 */
export class GraphNotCreated extends DomainError {
  constructor(
    readonly failedIndex: number,
    reason: string,
  ) {
    super('graph_not_created', `not created: item ${failedIndex} of the graph failed (${reason}), and a graph batch creates all of its jobs or none`)
  }
}

export class ProjectNotFound extends DomainError {
  constructor(projectId: string) {
    super('project_not_found', `project ${projectId} was not found`)
  }
}

export class ProjectAlreadyExists extends DomainError {
  constructor(projectId: string) {
    super('invalid_state', `project ${projectId} already exists`)
  }
}

export class RecurringJobTypeConflict extends DomainError {
  constructor(id: string, existingJobType: string) {
    super('recurring_job_type_conflict', `recurring job ${id} already schedules job type ${JSON.stringify(existingJobType)}`)
  }
}

/** A refusal whose whole meaning is its code (platform rules have many; one class each adds nothing). */
function refusal(code: string) {
  return class extends DomainError {
    constructor(message: string) {
      super(code, message)
    }
  }
}

export class EmailAlreadyRegistered extends refusal('email_already_registered') {}
export class InvalidVerificationToken extends refusal('invalid_verification_token') {}
export class InvalidResetToken extends refusal('invalid_reset_token') {}
export class InvalidToken extends refusal('invalid_token') {}
export class UserNotFound extends refusal('user_not_found') {}
/**
 * A sign-up on a user id already taken. Ids are random, so only a collision meets it; the API
 * answers it as it did before it had a class of its own (404 user_not_found), and so do the
 * alert's and the webhook's below.
 */
export class UserAlreadyExists extends refusal('invalid_state') {}
export class TotpAlreadyEnabled extends refusal('totp_already_enabled') {}
export class TotpNotEnabled extends refusal('totp_not_enabled') {}
export class TotpNotInitialized extends refusal('totp_not_initialized') {}
/** A second factor that does not match, or a code from a step already used. */
export class InvalidTotpCode extends refusal('invalid_totp_code') {}
/** Notification preferences may turn every e-mail off but the security notices. */
export class SecurityNoticesRequired extends refusal('security_notices_required') {}
export class KeyRevoked extends refusal('key_revoked') {}
export class AlreadyRevoked extends refusal('already_revoked') {}
export class LastProject extends refusal('last_project') {}
export class MemberNotFound extends refusal('member_not_found') {}
export class MemberExists extends refusal('member_exists') {}
export class CannotModifyOwner extends refusal('cannot_modify_owner') {}
export class CannotRemoveOwner extends refusal('cannot_remove_owner') {}
export class RoleExceedsCaller extends refusal('role_exceeds_caller') {}
export class InvalidRole extends refusal('invalid_role') {}
/** The acting member's role is too low for the command. */
export class Forbidden extends refusal('forbidden') {}
export class OverageUnavailable extends refusal('overage_unavailable') {}
/** Job creation (and webhook changes) while the project's billing state is not active. */
export class BillingStateBlocked extends refusal('billing_state_blocked') {}
/** Job creation once the period's allowance is used up and overage is off. */
export class MonthlyAllowanceExceeded extends refusal('monthly_allowance_exceeded') {}
/** Job creation with overage on, when the next job would pass the project's spend cap. */
export class SpendCapReached extends refusal('spend_cap_reached') {}
export class RecurringJobNotFound extends refusal('recurring_job_not_found') {}
export class InvalidCronExpression extends refusal('invalid_cron_expression') {}
/** A project already has as many live recurring schedules as its plan allows (domain/plans.ts). */
export class RecurringLimitReached extends refusal('recurring_limit_reached') {}
/** A 6-field cron expression whose occurrences come closer together than the project's plan allows. */
export class CronIntervalTooShort extends refusal('cron_interval_too_short') {}
export class InvalidTimezone extends refusal('invalid_timezone') {}
export class AlertNotFound extends refusal('alert_not_found') {}
export class AlertAlreadyExists extends refusal('invalid_state') {}
/** Staff creating a promotion code that exists already. */
export class PromoCodeAlreadyExists extends refusal('invalid_state') {}
/** A staff request-limit override that is not above the plan's limit, or ends before it starts. */
export class InvalidRateLimitOverride extends refusal('invalid_request') {}
export class WebhookNotFound extends refusal('webhook_not_found') {}
export class WebhookAlreadyExists extends refusal('invalid_state') {}
/** A project already has as many webhook subscriptions as it may (domain/webhook.ts). */
export class WebhookLimitReached extends refusal('webhook_limit_reached') {}
/** No named event consumer of that name in this project (domain/event-consumer.ts). */
export class EventConsumerNotFound extends refusal('event_consumer_not_found') {}
/** A named event consumer of that name exists already in this project. */
export class EventConsumerExists extends refusal('event_consumer_exists') {}
/** A project already has as many named event consumers as its plan allows. */
export class EventConsumerLimitReached extends refusal('event_consumer_limit_reached') {}
/** No such delivery of this webhook subscription. */
export class DeliveryNotFound extends refusal('delivery_not_found') {}
/** No such operation in this project (domain/operation.ts). */
export class OperationNotFound extends refusal('operation_not_found') {}
/** No worker of this id seen by the project in the last hour (GET /jobsvc/v1/workers/{id}). */
export class WorkerNotFound extends refusal('worker_not_found') {}
/** A project already has as many pending invitations as it may (domain/project/team.ts). */
export class InviteLimitReached extends refusal('invite_limit_reached') {}
/** A project holds at most maxQueueRetryPolicies queue overrides. */
export class RetryPolicyLimitReached extends refusal('retry_policy_limit_reached') {}
/** A project holds at most maxPausedQueues paused queues (domain/project/queue-pauses.ts). */
export class QueuePauseLimitReached extends refusal('queue_pause_limit_reached') {}
/** A bulk action matching more jobs than the project's plan lets one operation change (domain/plans.ts, `bulk_operation_max_jobs`). */
export class BulkLimitExceeded extends refusal('bulk_limit_exceeded') {}
/** A queue pause whose `until` is not in the future. */
export class InvalidPauseUntil extends refusal('invalid_request') {}
/** A job priority that is not an integer from −600 to 600 (domain/job.ts, priorityRange). */
export class InvalidPriority extends refusal('invalid_request') {}
/** A project holds settings for at most maxQueueSettings queues (domain/project/queue-settings.ts). */
export class QueueSettingsLimitReached extends refusal('queue_settings_limit_reached') {}
export class QueueLimitsLimitReached extends refusal('queue_limits_limit_reached') {}
