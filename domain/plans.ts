import { plans, type Plan } from './project/index.ts'

/** What a plan allows (spec, Limits); JOBSVC_CONFIG may override any number per plan. */
export interface PlanLimits {
  requests_per_hour: number
  monthly_jobs: number
  /** Cents per 10,000 jobs beyond the allowance; null: overage cannot be enabled on this plan. */
  overage_cents_per_10k: number | null
  retention_days: number
  /** Bytes the project may append to the log in a sliding hour (domain/log-budget.ts says what past it is refused). */
  log_bytes_per_hour: number
  /** Live recurring schedules a project may have; one more is refused (409 `recurring_limit_reached`). */
  max_recurring_schedules: number
  /**
   * Shortest gap, in seconds (1 to 60), a 6-field cron expression (leading seconds) may leave
   * between two occurrences; one that fires more often is refused (400 `cron_interval_too_short`).
   * A 5-field expression fires at most once a minute and always passes.
   */
  min_cron_interval_seconds: number
  /** Named consumers of the event feed a project may have; one more is refused (409 `event_consumer_limit_reached`). */
  max_event_consumers: number
  /** Jobs one bulk action (`POST /jobsvc/v1/jobs/bulk`) may match; a filter matching more is refused (409 `bulk_limit_exceeded`). */
  bulk_operation_max_jobs: number
}

const mib = 2 ** 20

const businessLimits: PlanLimits = {
  requests_per_hour: 500_000,
  monthly_jobs: 30_000_000,
  overage_cents_per_10k: 50,
  retention_days: 180,
  log_bytes_per_hour: 4096 * mib,
  max_recurring_schedules: 1_000,
  min_cron_interval_seconds: 1,
  max_event_consumers: 100,
  bulk_operation_max_jobs: 1_000_000,
}

/**
 * The spec's tables (the log budget and the recurring bounds are this service's own). `enterprise` is "custom": until an operator configures it, it gets the
 * business numbers. The recurring bounds are ours: every schedule fires into the one scheduler
 * every tenant shares, so a plan bounds how many a project keeps and how often each may fire.
 */
export const defaultPlanLimits: Readonly<Record<Plan, PlanLimits>> = {
  free: {
    requests_per_hour: 1_000,
    monthly_jobs: 50_000,
    overage_cents_per_10k: null,
    retention_days: 30,
    log_bytes_per_hour: 64 * mib,
    max_recurring_schedules: 10,
    min_cron_interval_seconds: 60,
    max_event_consumers: 3,
    bulk_operation_max_jobs: 10_000,
  },
  starter: {
    requests_per_hour: 5_000,
    monthly_jobs: 300_000,
    overage_cents_per_10k: 150,
    retention_days: 30,
    log_bytes_per_hour: 256 * mib,
    max_recurring_schedules: 50,
    min_cron_interval_seconds: 15,
    max_event_consumers: 10,
    bulk_operation_max_jobs: 50_000,
  },
  pro: {
    requests_per_hour: 50_000,
    monthly_jobs: 3_000_000,
    overage_cents_per_10k: 100,
    retention_days: 90,
    log_bytes_per_hour: 1024 * mib,
    max_recurring_schedules: 200,
    min_cron_interval_seconds: 5,
    max_event_consumers: 25,
    bulk_operation_max_jobs: 250_000,
  },
  business: businessLimits,
  enterprise: businessLimits,
}

/** JOBSVC_CONFIG's `plans`: any number of any plan, validated by the configuration's schema. */
export type PlanOverrides = Partial<Record<Plan, Partial<PlanLimits>>>

export function resolvePlans(overrides: PlanOverrides = {}): Readonly<Record<Plan, PlanLimits>> {
  const resolved = Object.fromEntries(plans.map((plan) => [plan, Object.freeze({ ...defaultPlanLimits[plan], ...overrides[plan] })])) as Record<
    Plan,
    PlanLimits
  >
  return Object.freeze(resolved)
}
