import { plans, type Plan } from './project.ts'

/** What a plan allows (spec, Limits); JOBSVC_CONFIG may override any number per plan. */
export interface PlanLimits {
  requests_per_hour: number
  monthly_jobs: number
  /** Cents per 10,000 jobs beyond the allowance; null: overage cannot be enabled on this plan. */
  overage_cents_per_10k: number | null
  retention_days: number
}

/**
 * The spec's tables. `enterprise` is "custom": until an operator configures it, it gets the
 * business numbers.
 */
export const defaultPlanLimits: Readonly<Record<Plan, PlanLimits>> = {
  free: { requests_per_hour: 1_000, monthly_jobs: 50_000, overage_cents_per_10k: null, retention_days: 30 },
  starter: { requests_per_hour: 5_000, monthly_jobs: 300_000, overage_cents_per_10k: 150, retention_days: 30 },
  pro: { requests_per_hour: 50_000, monthly_jobs: 3_000_000, overage_cents_per_10k: 100, retention_days: 90 },
  business: { requests_per_hour: 500_000, monthly_jobs: 30_000_000, overage_cents_per_10k: 50, retention_days: 180 },
  enterprise: { requests_per_hour: 500_000, monthly_jobs: 30_000_000, overage_cents_per_10k: 50, retention_days: 180 },
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
