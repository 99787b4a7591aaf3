import { plans, type Plan } from './project.ts'

/** What a plan allows (spec, Limits); JOBSVC_CONFIG may override any number per plan. */
export interface PlanLimits {
  requests_per_hour: number
  monthly_jobs: number
  /** Cents per 10,000 jobs beyond the allowance; null: overage cannot be enabled on this plan. */
  overage_cents_per_10k: number | null
  retention_days: number
  /** Bytes the project may append to the log in a sliding hour (domain/log-budget.ts says what past it is refused). */
  log_bytes_per_hour: number
}

const mib = 2 ** 20

/**
 * The spec's tables (the log budget is this service's own). `enterprise` is "custom": until an
 * operator configures it, it gets the business numbers.
 */
export const defaultPlanLimits: Readonly<Record<Plan, PlanLimits>> = {
  free: { requests_per_hour: 1_000, monthly_jobs: 50_000, overage_cents_per_10k: null, retention_days: 30, log_bytes_per_hour: 64 * mib },
  starter: { requests_per_hour: 5_000, monthly_jobs: 300_000, overage_cents_per_10k: 150, retention_days: 30, log_bytes_per_hour: 256 * mib },
  pro: { requests_per_hour: 50_000, monthly_jobs: 3_000_000, overage_cents_per_10k: 100, retention_days: 90, log_bytes_per_hour: 1024 * mib },
  business: { requests_per_hour: 500_000, monthly_jobs: 30_000_000, overage_cents_per_10k: 50, retention_days: 180, log_bytes_per_hour: 4096 * mib },
  enterprise: {
    requests_per_hour: 500_000,
    monthly_jobs: 30_000_000,
    overage_cents_per_10k: 50,
    retention_days: 180,
    log_bytes_per_hour: 4096 * mib,
  },
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
