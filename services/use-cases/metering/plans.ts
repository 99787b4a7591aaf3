import { z } from 'zod'
import type { Plan } from '../../../domain/project.ts'

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

export const planOverridesSchema = z
  .object({
    requests_per_hour: z.number().int().min(0),
    monthly_jobs: z.number().int().min(0),
    overage_cents_per_10k: z.number().min(0).nullable(),
    retention_days: z.number().int().min(1),
  })
  .partial()
  .strict()

export const plansFileSchema = z
  .object({
    free: planOverridesSchema,
    starter: planOverridesSchema,
    pro: planOverridesSchema,
    business: planOverridesSchema,
    enterprise: planOverridesSchema,
  })
  .partial()
  .strict()

export function resolvePlans(overrides: z.infer<typeof plansFileSchema> = {}): Readonly<Record<Plan, PlanLimits>> {
  const plans = Object.fromEntries(
    (Object.keys(defaultPlanLimits) as Plan[]).map((plan) => [plan, Object.freeze({ ...defaultPlanLimits[plan], ...overrides[plan] })]),
  ) as Record<Plan, PlanLimits>
  return Object.freeze(plans)
}
