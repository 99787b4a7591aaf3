import type { Project, ProjectEvent } from '../domain/project/index.ts'
import type { Alert, AlertEvent } from '../domain/alert.ts'
import type { JobEvent } from '../domain/job.ts'
import type { Webhook, WebhookEvent } from '../domain/webhook.ts'
import type { RecurringJobEvent } from '../domain/recurring-job.ts'
import type { User, UserEvent } from '../domain/user.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable } from './database.ts'
import { pageOf, readModel, type Page, type PagePosition, type Projection } from './projection.ts'

export interface ActivityRow {
  id: string
  project_id: string | null
  user_id: string | null
  kind: string
  target_type: string
  target_id: string | null
  summary: string
  metadata: string | null
  created_at: string
  seq: number
}

/** `user_id` on a project kind: the dashboard user who acted, where the event names one. */
type Described = Pick<ActivityRow, 'kind' | 'target_type' | 'target_id' | 'summary'> & { metadata?: Record<string, unknown>; user_id?: string | null }

/** Account events → activity; the kinds are the spec's (a `password_reset_requested` is not one). */
function describeUserEvent(e: UserEvent, userId: string): Described | null {
  const target = { target_type: 'user', target_id: userId }
  switch (e.type) {
    case 'terms_accepted':
      return { kind: 'terms_accepted', ...target, summary: 'Terms of service accepted' }
    case 'password_reset':
      return { kind: 'password_reset', ...target, summary: 'Password reset through an e-mailed link' }
    case 'password_changed':
      return { kind: 'password_changed', ...target, summary: 'Password changed' }
    case 'profile_updated':
      return { kind: 'profile_updated', ...target, summary: 'Profile updated', metadata: { changed: Object.keys(e.data) } }
    case 'two_factor_enabled':
      return { kind: 'two_factor_enabled', ...target, summary: 'Two-factor authentication enabled' }
    case 'two_factor_disabled':
      return { kind: 'two_factor_disabled', ...target, summary: 'Two-factor authentication disabled' }
    case 'recovery_codes_regenerated':
      return { kind: 'recovery_codes_regenerated', ...target, summary: 'Recovery codes regenerated' }
    case 'recovery_code_used':
      return { kind: 'recovery_code_used', ...target, summary: 'A recovery code was used to log in' }
    case 'account_deleted':
      return { kind: 'account_deleted', ...target, summary: 'Account deleted' }
    case 'notification_preferences_updated':
      return { kind: 'notification_preferences_updated', ...target, summary: 'Notification preferences updated', metadata: e.data }
    case 'email_marked_undeliverable':
      return {
        kind: 'email_marked_undeliverable',
        ...target,
        summary: `E-mail address marked undeliverable (${e.data.reason.replace('_', ' ')}); nothing is sent to it until it is confirmed again`,
        metadata: { reason: e.data.reason, reported_at: e.data.reported_at },
      }
    case 'email_reverified':
      return { kind: 'email_reverified', ...target, summary: 'E-mail address confirmed again; e-mails resume' }
    case 'new_device_signed_in':
      // The first sign-in ever has nothing to be new against.
      return e.data.first_device ? null : { kind: 'new_device_signed_in', ...target, summary: 'Signed in from a new device' }
    default:
      return null
  }
}

function describeProjectEvent(e: ProjectEvent, project: Project | null): Described | null {
  switch (e.type) {
    case 'api_key_rotated':
      return {
        kind: 'api_key_rotated',
        target_type: 'api_key',
        target_id: e.data.prefix,
        summary: 'API key rotated; the previous key works for 24 hours',
        metadata: { grace_until: e.data.grace_until },
      }
    case 'api_key_revoked':
      return { kind: 'api_key_revoked', target_type: 'project', target_id: project?.id ?? null, summary: 'Every API key of the project revoked' }
    case 'project_renamed':
      return {
        kind: 'project_renamed',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `Project renamed to ${e.data.name}`,
        metadata: { previous_name: e.data.previous_name, name: e.data.name },
      }
    case 'project_deleted':
      return { kind: 'project_deleted', target_type: 'project', target_id: project?.id ?? null, summary: 'Project deleted' }
    case 'member_invited':
      return {
        kind: 'member_invited',
        target_type: 'member',
        target_id: e.data.invite_id,
        summary: `${e.data.email} invited as ${e.data.role}`,
        metadata: { email: e.data.email, role: e.data.role, invited_by: e.data.invited_by },
      }
    case 'team_invite_accepted':
      return {
        kind: 'team_invite_accepted',
        target_type: 'member',
        target_id: e.data.user_id,
        summary: 'Invitation accepted',
        metadata: { invite_id: e.data.invite_id },
      }
    case 'member_joined':
      return {
        kind: 'member_joined',
        target_type: 'member',
        target_id: e.data.user_id,
        summary: `${e.data.email} joined as ${e.data.role}`,
        metadata: { role: e.data.role },
      }
    case 'member_role_changed':
      return {
        kind: 'member_role_changed',
        target_type: 'member',
        target_id: e.data.user_id,
        summary: `Role changed from ${e.data.previous_role} to ${e.data.role}`,
        metadata: { role: e.data.role, previous_role: e.data.previous_role },
      }
    case 'member_removed':
      return { kind: 'member_removed', target_type: 'member', target_id: e.data.user_id, summary: 'Member removed' }
    case 'overage_enabled':
      return {
        kind: 'overage_enabled',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: 'Overage enabled: creation continues past the allowance and is billed',
      }
    case 'overage_disabled':
      return { kind: 'overage_disabled', target_type: 'project', target_id: project?.id ?? null, summary: 'Overage disabled' }
    case 'spend_cap_updated':
      return {
        kind: 'spend_cap_updated',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: e.data.spend_cap_cents === null ? 'Spend cap removed' : `Spend cap set to ${(e.data.spend_cap_cents / 100).toFixed(2)} USD`,
        metadata: { spend_cap_cents: e.data.spend_cap_cents },
      }
    case 'allowance_warning_80':
    case 'allowance_warning_100':
      return {
        kind: e.type,
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `${e.type === 'allowance_warning_80' ? 80 : 100}% of the monthly job allowance used (${e.data.used} of ${e.data.allowance})`,
        metadata: { period: e.data.period, used: e.data.used, allowance: e.data.allowance },
      }
    case 'billing_period_reset':
      return {
        kind: 'billing_period_reset',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `Billing period ${e.data.period} started; the allowance is fresh`,
        metadata: { period: e.data.period, previous_period: e.data.previous_period, previous_used: e.data.previous_used },
      }
    case 'overage_charged':
      return {
        kind: 'overage_charged',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `Overage of ${e.data.overage} jobs charged: ${(e.data.cents / 100).toFixed(2)} USD`,
        metadata: { period: e.data.period, overage: e.data.overage, cents: e.data.cents },
      }
    case 'jobs_exported':
      return {
        kind: 'jobs_exported',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `Jobs exported (${e.data.format}, ${e.data.from} to ${e.data.until})`,
        metadata: { from: e.data.from, until: e.data.until, format: e.data.format },
      }
    case 'audit_log_exported':
      return {
        kind: 'audit_log_exported',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `Audit log exported (${e.data.format}, ${e.data.from} to ${e.data.until})`,
        metadata: { from: e.data.from, until: e.data.until, format: e.data.format, exported_by: e.data.exported_by },
        user_id: e.data.exported_by,
      }
    case 'retry_policy_updated': {
      const scope = e.data.queue === null ? 'Retry policy' : `Retry policy of queue ${e.data.queue}`
      const p = e.data.policy
      return {
        kind: 'retry_policy_updated',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary:
          p === null
            ? `${scope} removed; ${e.data.queue === null ? "the service's default" : "the project's"} applies`
            : `${scope} set: ${p.base_delay_seconds} s × ${p.factor}^(attempt−1), at most ${p.max_delay_seconds} s, plus 0–${p.jitter_seconds} s; ${p.max_attempts} attempts`,
        metadata: { queue: e.data.queue, policy: p, previous: e.data.previous },
        user_id: e.data.updated_by,
      }
    }
    case 'queue_paused': {
      const { queue, reason, until } = e.data
      const how = until === null ? 'until resumed' : `until ${until}`
      return {
        kind: 'queue_paused',
        target_type: 'queue',
        target_id: queue,
        summary: `Queue ${queue} paused ${how}${reason === null ? '' : `: ${reason}`}`,
        metadata: { queue, reason, until },
        user_id: e.data.paused_by,
      }
    }
    case 'queue_limits_updated': {
      const { queue, limits } = e.data
      const parts =
        limits === null
          ? []
          : [
              limits.concurrency?.limit != null ? `at most ${limits.concurrency.limit} running` : null,
              limits.concurrency?.per_key != null ? `at most ${limits.concurrency.per_key.limit} running per ${limits.concurrency.per_key.by}` : null,
              limits.rate !== null
                ? `${limits.rate.limit} starts per ${limits.rate.period_seconds} s${limits.rate.by === null ? '' : ` per ${limits.rate.by}`}`
                : null,
            ].filter((p) => p !== null)
      return {
        kind: 'queue_limits_updated',
        target_type: 'queue',
        target_id: queue,
        summary: limits === null ? `Queue ${queue}: limits removed` : `Queue ${queue}: ${parts.join(', ')}`,
        metadata: { queue, limits },
        user_id: e.data.updated_by,
      }
    }
    case 'queue_settings_updated': {
      const { queue, default_ttl_seconds: ttl } = e.data
      return {
        kind: 'queue_settings_updated',
        target_type: 'queue',
        target_id: queue,
        summary:
          ttl === null
            ? `Queue ${queue}: default ttl removed`
            : `Queue ${queue}: jobs expire ${ttl} s after becoming due unless they set their own ttl`,
        metadata: { queue, default_ttl_seconds: ttl },
        user_id: e.data.updated_by,
      }
    }
    case 'queue_resumed':
      return {
        kind: 'queue_resumed',
        target_type: 'queue',
        target_id: e.data.queue,
        summary: e.data.automatic ? `Queue ${e.data.queue} resumed: its pause ended at ${e.data.resumed_at}` : `Queue ${e.data.queue} resumed`,
        metadata: { queue: e.data.queue, paused_at: e.data.paused_at, automatic: e.data.automatic === true },
        user_id: e.data.resumed_by,
      }
    case 'plan_changed':
      // The owner's own plan changes have no kind in the spec's list; a staff member's is an admin action.
      if (e.data.changed_by_staff === undefined) return null
      return {
        kind: 'admin_plan_changed',
        target_type: 'project',
        target_id: project?.id ?? null,
        summary: `Plan changed by staff from ${e.data.previous_plan} to ${e.data.plan}`,
        metadata: { plan: e.data.plan, previous_plan: e.data.previous_plan },
        user_id: e.data.changed_by_staff,
      }
    case 'rate_limit_overridden': {
      const { set_by, set_at: _at, ...limit } = e.data
      const summary = `Request limit raised by staff to ${limit.requests_per_hour} per hour until ${limit.expires_at}`
      return { kind: 'admin_rate_limit_override', target_type: 'project', target_id: project?.id ?? null, summary, metadata: limit, user_id: set_by }
    }
    case 'promo_code_applied': {
      const { applied_by, applied_at: _at, ...promotion } = e.data
      const gives = promotion.kind === 'allowance_bonus' ? `${promotion.amount} extra jobs per period` : `${promotion.amount}% off overage`
      const summary = `Promotion code ${promotion.code} applied: ${gives} for ${promotion.periods} period(s)`
      return { kind: 'promo_code_applied', target_type: 'project', target_id: project?.id ?? null, summary, metadata: promotion, user_id: applied_by }
    }
    case 'ownership_transferred':
      return {
        kind: 'ownership_transferred',
        target_type: 'member',
        target_id: e.data.to_user_id,
        summary: 'Ownership transferred',
        metadata: { from_user_id: e.data.from_user_id, to_user_id: e.data.to_user_id },
      }
    default:
      return null
  }
}

function describeRecurringEvent(e: RecurringJobEvent): Described | null {
  switch (e.type) {
    case 'recurring_upserted':
      return {
        kind: 'recurring_upserted',
        target_type: 'recurring',
        target_id: e.data.recurring_id,
        summary: `Schedule ${e.data.recurring_id} set to "${e.data.cron_expression}" (${e.data.timezone})`,
        metadata: { job_type: e.data.job_type, cron_expression: e.data.cron_expression, timezone: e.data.timezone, queue: e.data.queue },
      }
    case 'recurring_deleted':
      return {
        kind: 'recurring_deleted',
        target_type: 'recurring',
        target_id: e.data.recurring_id,
        summary: `Schedule ${e.data.recurring_id} deleted`,
      }
    default:
      return null
  }
}

function describeAlertEvent(e: AlertEvent, alert: Alert | null): Described | null {
  const target = { target_type: 'alert', target_id: alert?.id ?? null }
  switch (e.type) {
    case 'alert_created':
      return {
        kind: 'alert_created',
        ...target,
        summary: `Alert "${e.data.name}" created (${e.data.kind} over ${e.data.threshold})`,
        metadata: { kind: e.data.kind, queue: e.data.queue, threshold: e.data.threshold },
      }
    case 'alert_updated':
      return {
        kind: 'alert_updated',
        ...target,
        summary: `Alert "${e.data.name}" updated`,
        metadata: { kind: e.data.kind, queue: e.data.queue, threshold: e.data.threshold, enabled: e.data.enabled },
      }
    case 'alert_deleted':
      return { kind: 'alert_deleted', ...target, summary: `Alert "${alert?.name ?? ''}" deleted` }
    default:
      return null
  }
}

function describeJobEvent(e: JobEvent, jobId: string): Described | null {
  const target = { target_type: 'job', target_id: jobId }
  switch (e.type) {
    case 'job_created':
      return {
        kind: 'job_created',
        ...target,
        summary: `Job ${e.data.job_type} created in queue ${e.data.queue}`,
        metadata: { job_type: e.data.job_type, queue: e.data.queue },
      }
    // A running job's cancel is recorded when it is asked for, with whoever asked (its end is the
    // worker's ack or the grace period, which no member performs): one row per cancel.
    case 'job_cancelled':
      if (e.data.previous_state === 'processing') return null
      return { kind: 'job_cancelled', ...target, summary: `Job cancelled (${e.data.reason.replace(/_/g, ' ')})`, metadata: { reason: e.data.reason } }
    case 'job_cancel_requested':
      return {
        kind: 'job_cancelled',
        ...target,
        summary: `Job cancelled while running (attempt ${e.data.attempt}); its worker is told to stop`,
        metadata: { reason: 'requested', running: true },
      }
    case 'job_retried':
      return {
        kind: 'job_retried',
        ...target,
        summary: `Job retried: attempt ${e.data.attempt + 1} of ${e.data.max_attempts}`,
        metadata: { max_attempts: e.data.max_attempts },
      }
    default:
      return null
  }
}

function describeWebhookEvent(e: WebhookEvent, hook: Webhook | null): Described | null {
  const target = { target_type: 'webhook', target_id: hook?.id ?? null }
  switch (e.type) {
    case 'webhook_created':
      return { kind: 'webhook_created', ...target, summary: `Webhook to ${e.data.url} created`, metadata: { url: e.data.url, events: e.data.events } }
    case 'webhook_updated': {
      const { updated_at: _at, ...changes } = e.data
      return { kind: 'webhook_updated', ...target, summary: 'Webhook updated', metadata: changes }
    }
    case 'webhook_secret_rotated':
      return {
        kind: 'webhook_secret_rotated',
        ...target,
        summary: 'Webhook secret rotated; the previous one works for 24 hours',
        metadata: { previous_secret_expires_at: e.data.previous_secret_expires_at },
      }
    case 'webhook_deleted':
      return { kind: 'webhook_deleted', ...target, summary: 'Webhook deleted' }
    default:
      return null
  }
}

/**
 * A suspension or reinstatement of a user (by staff, or the operator on the command line) is an
 * admin action on every project the user belongs to: their teams' audit trails show it, and who
 * acted, as `user_id`. The user's own project index names the projects.
 */
function describeSuspension(e: UserEvent, userId: string): Described | null {
  if (e.type !== 'user_suspended' && e.type !== 'user_reinstated') return null
  const suspended = e.type === 'user_suspended'
  return {
    kind: suspended ? 'admin_user_suspended' : 'admin_user_reinstated',
    target_type: 'user',
    target_id: userId,
    summary: `A member's account was ${suspended ? 'suspended' : 'reinstated'} by ${e.data.by_staff ? 'staff' : 'the operator'}`,
    user_id: e.data.by_staff ?? null,
  }
}

/**
 * The activity rows one log message yields (pure; the id is the event's ULID, and for a
 * suspension's rows, one per project, the ULID and the project id).
 */
export function activityRowsOf(record: EventRecord): ActivityRow[] {
  const m = record.message
  const rows: ActivityRow[] = []
  for (const event of m.events) {
    const eventId = event.id.replace(/^evt_/, '')
    // A change a member made through a dashboard session names them (docs/api-notes.md, "Activity").
    const { actor } = event
    const toRow = ({ metadata, user_id: _actor, ...rest }: Described, id: string, projectId: string | null, userId: string | null): ActivityRow => ({
      id,
      project_id: projectId,
      user_id: userId ?? actor?.user_id ?? null,
      ...rest,
      metadata: actor === undefined ? (metadata === undefined ? null : JSON.stringify(metadata)) : JSON.stringify({ ...metadata, actor }),
      created_at: event.time,
      seq: record.seq,
    })
    const suspension = m.aggregate === 'user' ? describeSuspension(event as UserEvent, m.aggregate_id) : null
    for (const projectId of suspension === null ? [] : ((m.state as User | null)?.project_ids ?? [])) {
      rows.push(toRow(suspension!, `${eventId}.${projectId}`, projectId, suspension!.user_id ?? null))
    }
    const described =
      m.aggregate === 'job'
        ? describeJobEvent(event as JobEvent, m.aggregate_id)
        : m.aggregate === 'user'
          ? describeUserEvent(event as UserEvent, m.aggregate_id)
          : m.aggregate === 'project'
            ? describeProjectEvent(event as ProjectEvent, m.state as Project | null)
            : m.aggregate === 'recurring'
              ? describeRecurringEvent(event as RecurringJobEvent)
              : m.aggregate === 'alert'
                ? describeAlertEvent(event as AlertEvent, m.state as Alert | null)
                : m.aggregate === 'webhook'
                  ? describeWebhookEvent(event as WebhookEvent, m.state as Webhook | null)
                  : null
    if (described === null) continue
    const projectId = m.aggregate === 'project' ? m.aggregate_id : m.aggregate === 'user' || m.aggregate === 'email' ? null : m.project_id
    rows.push(toRow(described, eventId, projectId, m.aggregate === 'user' ? m.aggregate_id : (described.user_id ?? null)))
  }
  return rows
}

const columns = ['id', 'project_id', 'user_id', 'kind', 'target_type', 'target_id', 'summary', 'metadata', 'created_at', 'seq'] as const

const projection: Projection = {
  name: 'activity',
  handles: [
    'job_created',
    'job_cancelled',
    'job_cancel_requested',
    'job_retried',
    'terms_accepted',
    'password_reset',
    'password_changed',
    'profile_updated',
    'two_factor_enabled',
    'two_factor_disabled',
    'recovery_codes_regenerated',
    'recovery_code_used',
    'account_deleted',
    'notification_preferences_updated',
    'email_marked_undeliverable',
    'email_reverified',
    'new_device_signed_in',
    'api_key_rotated',
    'api_key_revoked',
    'project_renamed',
    'project_deleted',
    'member_invited',
    'team_invite_accepted',
    'member_joined',
    'member_role_changed',
    'member_removed',
    'ownership_transferred',
    'plan_changed',
    'rate_limit_overridden',
    'promo_code_applied',
    'user_suspended',
    'user_reinstated',
    'overage_enabled',
    'overage_disabled',
    'spend_cap_updated',
    'allowance_warning_80',
    'allowance_warning_100',
    'billing_period_reset',
    'overage_charged',
    'jobs_exported',
    'audit_log_exported',
    'retry_policy_updated',
    'queue_paused',
    'queue_resumed',
    'queue_settings_updated',
    'queue_limits_updated',
    'recurring_upserted',
    'recurring_deleted',
    'alert_created',
    'alert_updated',
    'alert_deleted',
    'webhook_created',
    'webhook_updated',
    'webhook_secret_rotated',
    'webhook_deleted',
  ],
  tables: ['activity'],
  async apply(tx: Queryable, records: readonly EventRecord[]) {
    const rows = records.flatMap(activityRowsOf)
    if (rows.length === 0) return
    await tx`INSERT INTO activity ${tx(rows, ...columns)} ON CONFLICT (id) DO NOTHING`
  },
}

/** An activity row as the activity list shows it. */
export interface ActivityEntry {
  id: string
  kind: string
  target_type: string
  target_id: string | null
  summary: string
  metadata: string | null
  created_at: Date
}

/** A project's activity, newest first, after `after`; only rows about `targetTypes` unless null (the whole trail). */
async function page(
  db: Queryable,
  projectId: string,
  targetTypes: readonly string[] | null,
  after: PagePosition | null,
  limit: number,
  kinds: { only: readonly string[] | null; without: readonly string[] | null } = { only: null, without: null },
): Promise<Page<ActivityEntry>> {
  const rows = await db<ActivityEntry[]>`
    SELECT id, kind, target_type, target_id, summary, metadata, created_at FROM activity
    WHERE project_id = ${projectId}
      ${targetTypes === null ? db`` : db`AND target_type = ANY(${targetTypes as string[]})`}
      ${kinds.only === null ? db`` : db`AND kind = ANY(${kinds.only as string[]})`}
      ${kinds.without === null ? db`` : db`AND kind <> ALL(${kinds.without as string[]})`}
      ${after ? db`AND (created_at, id) < (${after.created_at}, ${after.id})` : db``}
    ORDER BY created_at DESC, id DESC
    LIMIT ${limit + 1}`
  return pageOf(rows, limit, (r) => r)
}

/** An activity row as the audit-log export writes it. */
export interface AuditRow {
  id: string
  created_at: Date
  kind: string
  target_type: string
  target_id: string | null
  summary: string
  user_id: string | null
  metadata: string | null
  /** The sequence of the message the row was made from (an attested export reads its event). */
  seq: string
}

/** A project's activity created within `window` (both ends included) and before sequence `beforeSeq`, oldest first: a query to stream with a cursor. */
function auditRows(db: Queryable, projectId: string, window: { from: Date; until: Date }, beforeSeq: number) {
  return db<AuditRow[]>`
    SELECT id, created_at, kind, target_type, target_id, summary, user_id, metadata, seq FROM activity
    WHERE project_id = ${projectId} AND created_at >= ${window.from} AND created_at <= ${window.until} AND seq < ${beforeSeq}
    ORDER BY created_at, id`
}

/**
 * A user's activity for their data export, newest first, at most 10,000 rows: their own rows, the
 * whole trail of `auditedProjectIds`, and of `projectIds` the rows about their membership. Each
 * branch is served by an index (activity_by_user, activity_by_project).
 */
async function ofUser(db: Queryable, userId: string, projects: { auditedProjectIds: readonly string[]; projectIds: readonly string[] }) {
  return db`
    SELECT id, project_id, kind, target_type, target_id, summary, metadata, created_at
    FROM activity
    WHERE user_id = ${userId}
      OR project_id = ANY(${projects.auditedProjectIds as string[]})
      OR (project_id = ANY(${projects.projectIds as string[]}) AND target_type = 'member' AND target_id = ${userId})
    ORDER BY created_at DESC, id DESC
    LIMIT 10000`
}

export const activityFeed = readModel(projection, { page, auditRows, ofUser })
