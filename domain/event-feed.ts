import type { AlertEvent } from './alert.ts'
import type { AuditTrailEventType } from './audit-checkpoint.ts'
import type { DeliveryEvent } from './delivery.ts'
import type { JobEventType } from './job.ts'
import type { ProjectEventType } from './project/index.ts'
import type { RecurringJobEvent } from './recurring-job.ts'
import type { WebhookEvent } from './webhook.ts'

/**
 * What a project's event feed (`GET /jobsvc/v1/events`, docs/event-log.md "The event feed") shows
 * of the log: which aggregates, which event types, what of each event and state a tenant may
 * read, and which events a filter keeps. Pure; the reading is services/use-cases/events/.
 *
 * The feed holds the project's own aggregates: its jobs (and their progress reports), recurring
 * schedules, alerts, webhooks and their deliveries, the project itself (team, keys, billing) and
 * the signed checkpoints of its audit log (domain/audit-checkpoint.ts).
 * Users, e-mail claims and promotion codes belong to no project and are never in it.
 */

/**
 * Where a reader of a project's event feed stands: after event `index` of the message stored at
 * stream sequence `seq`, or after the whole message (`'all'`). A position is a point in the
 * log's order, which JetStream assigns at append: unlike a timestamp or a table's id, no event
 * can later appear before a position already read (docs/event-log.md, "Cursors"). Its text form,
 * the cursor, is services/use-cases/events/feed-cursor.ts.
 */
export interface FeedPosition {
  seq: number
  index: number | 'all'
}

/** The position before every message of the log. */
export const logStart: FeedPosition = { seq: 0, index: 'all' }

/** Whether `a` is later in the log than `b`. */
export function isAfter(a: FeedPosition, b: FeedPosition): boolean {
  if (a.seq !== b.seq) return a.seq > b.seq
  if (a.index === b.index) return false
  return a.index === 'all' || (b.index !== 'all' && a.index > b.index)
}

/** The aggregates of a project's feed, as its subjects name them (streams/names.ts). */
export const feedAggregates = ['job', 'progress', 'project', 'recurring', 'alert', 'webhook', 'delivery', 'audit'] as const
export type FeedAggregate = (typeof feedAggregates)[number]

/**
 * What a dashboard session below `admin` reads of the feed: the aggregates its role reads through
 * their own routes anyway (as the activity trail's rows, routes/activity.ts). Webhook URLs, the
 * team, keys and billing are for admins, owners and API keys.
 */
export const feedAggregatesBelowAdmin: readonly FeedAggregate[] = ['job', 'progress', 'recurring', 'alert']

/**
 * Every event type of each aggregate of the feed. A record keyed by the aggregate's event-type
 * union, so the compiler refuses a type added to an aggregate and forgotten here.
 */
const jobTypes: Record<JobEventType, true> = {
  job_created: true,
  job_child_attached: true,
  job_promoted: true,
  job_activated: true,
  job_parent_settled: true,
  job_claimed: true,
  job_limit_waiting: true,
  job_progressed: true,
  job_succeeded: true,
  job_attempt_failed: true,
  job_dead_lettered: true,
  job_cancelled: true,
  job_retried: true,
  job_cancel_requested: true,
  job_released: true,
  job_priority_changed: true,
  job_payload_replaced: true,
}
const projectTypes: Record<ProjectEventType, true> = {
  project_created: true,
  project_renamed: true,
  project_deleted: true,
  jobs_exported: true,
  audit_log_exported: true,
  history_expired: true,
  api_key_issued: true,
  api_key_rotated: true,
  api_key_revoked: true,
  member_invited: true,
  team_invite_accepted: true,
  member_joined: true,
  member_role_changed: true,
  member_removed: true,
  ownership_transferred: true,
  plan_changed: true,
  promo_code_applied: true,
  overage_enabled: true,
  overage_disabled: true,
  spend_cap_updated: true,
  billing_state_changed: true,
  billing_state_confirmed: true,
  allowance_warning_80: true,
  allowance_warning_100: true,
  billing_period_reset: true,
  overage_charged: true,
  rate_limit_overridden: true,
  retry_policy_updated: true,
  queue_paused: true,
  queue_resumed: true,
  queue_settings_updated: true,
  queue_limits_updated: true,
}
const recurringTypes: Record<RecurringJobEvent['type'], true> = {
  recurring_upserted: true,
  recurring_deleted: true,
  recurring_rescheduled: true,
  recurring_fired: true,
}
const alertTypes: Record<AlertEvent['type'], true> = {
  alert_created: true,
  alert_updated: true,
  alert_deleted: true,
  alert_triggered: true,
  alert_resolved: true,
}
const webhookTypes: Record<WebhookEvent['type'], true> = {
  webhook_created: true,
  webhook_updated: true,
  webhook_secret_rotated: true,
  webhook_deleted: true,
}
const deliveryTypes: Record<DeliveryEvent['type'], true> = { delivery_scheduled: true, delivery_attempted: true }
const auditTypes: Record<AuditTrailEventType, true> = { checkpoint_issued: true }

/** The event types each aggregate of the feed appends. */
export const feedEventTypes: Readonly<Record<FeedAggregate, readonly string[]>> = {
  job: Object.keys(jobTypes).filter((t) => t !== 'job_progressed'),
  progress: ['job_progressed'],
  project: Object.keys(projectTypes),
  recurring: Object.keys(recurringTypes),
  alert: Object.keys(alertTypes),
  webhook: Object.keys(webhookTypes),
  delivery: Object.keys(deliveryTypes),
  audit: Object.keys(auditTypes),
}

/** The aggregate that appends each event type (logs of schema 1 also hold `job_progressed` on a job's own subject). */
const aggregateOfType: ReadonlyMap<string, FeedAggregate> = new Map(
  feedAggregates.flatMap((aggregate) => feedEventTypes[aggregate].map((type) => [type, aggregate] as const)),
)

export function isFeedEventType(type: string): boolean {
  return aggregateOfType.has(type)
}

/** One event as the feed shows it. */
export interface FeedEvent {
  id: string
  /** Where a reader resumes after this event (opaque; services/use-cases/events/feed-cursor.ts). */
  cursor: string
  type: string
  occurred_at: string
  project_id: string
  aggregate: FeedAggregate
  aggregate_id: string
  data: unknown
  /** The aggregate after this event, as the log holds it (null: a progress report's job is in `data`). */
  state: unknown
  /**
   * Its place in the project's Merkle log (docs/audit.md); null only while the audit log has not
   * taken it in (a reader at the log's very end, when the projector lags past the feed's wait).
   */
  leaf_index: number | null
}

/** What a reader asked the feed for (all optional; together they must all hold). */
export interface FeedFilter {
  /** Event types to keep; null: every type. */
  types: ReadonlySet<string> | null
  queue: string | null
  jobType: string | null
  jobId: string | null
  /** The aggregates the caller may read (all, or those below admin). */
  aggregates: ReadonlySet<FeedAggregate>
}

/** The queue and job type an event is about, where its aggregate has them. */
export interface WorkAttributes {
  queue: string | null
  job_type: string | null
}

/**
 * Whether a filter on queue or job type keeps an event about work with these attributes: jobs,
 * their progress reports and recurring schedules have both, alerts may watch a queue; the
 * project, webhooks and deliveries have neither, so such a filter drops them.
 */
export function keepsWork(filter: Pick<FeedFilter, 'queue' | 'jobType'>, work: WorkAttributes | null): boolean {
  if (filter.queue === null && filter.jobType === null) return true
  if (work === null) return false
  return (filter.queue === null || work.queue === filter.queue) && (filter.jobType === null || work.job_type === filter.jobType)
}

/** Whether a filter on queue or job type needs the event's work attributes at all. */
export function filtersWork(filter: Pick<FeedFilter, 'queue' | 'jobType'>): boolean {
  return filter.queue !== null || filter.jobType !== null
}

/** The queue and job type of an aggregate's state, where it has them (a progress report's come from its job). */
export function workOf(aggregate: FeedAggregate, state: unknown): WorkAttributes | null {
  if (state === null || typeof state !== 'object') return null
  const s = state as { queue?: unknown; job_type?: unknown }
  switch (aggregate) {
    case 'job':
    case 'recurring':
    case 'alert':
      return {
        queue: typeof s.queue === 'string' ? s.queue : null,
        job_type: typeof s.job_type === 'string' ? s.job_type : null,
      }
    default:
      return null
  }
}

/**
 * If every event type a filter keeps belongs to one aggregate, that aggregate: the feed can then
 * ask the log for that aggregate's subjects alone.
 */
export function singleAggregateOf(types: ReadonlySet<string> | null): FeedAggregate | null {
  if (types === null || types.size === 0) return null
  const aggregates = new Set([...types].map((t) => aggregateOfType.get(t)))
  if (aggregates.size !== 1) return null
  return [...aggregates][0] ?? null
}

/**
 * Fields no feed event or state ever carries: digests of keys, invitation and reset tokens and
 * passwords, and sealed secrets. Digests are not secrets in plaintext, but a digest of a
 * low-entropy token can be searched, and no reader of the feed needs one.
 */
const secretFields: ReadonlySet<string> = new Set([
  'key_hash',
  'token_hash',
  'password_hash',
  'code_hash',
  'code_hashes',
  'secret_encrypted',
  'previous_secret_encrypted',
])

/** The aggregates whose events and states hold such fields; the others hold the tenant's own data (payloads) and pass as they are. */
const mayHoldSecrets: ReadonlySet<FeedAggregate> = new Set(['project', 'webhook'])

/** A copy of `value` without the secret fields, at any depth. */
function withoutSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutSecrets)
  if (value === null || typeof value !== 'object') return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) if (!secretFields.has(k)) out[k] = withoutSecrets(v)
  return out
}

/** An event's data or an aggregate's state as the feed shows it: without digests and sealed secrets. */
export function readableByTenant(aggregate: FeedAggregate, value: unknown): unknown {
  return mayHoldSecrets.has(aggregate) ? withoutSecrets(value) : value
}

/** The names of the fields the feed removes (docs and the scan test). */
export const feedSecretFields: readonly string[] = [...secretFields]
