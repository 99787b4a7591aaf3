import { InvalidRateLimitOverride } from '../errors.ts'
import { billingOf, type BillingEvent } from './billing.ts'
import { requireProject, type Command, type Plan, type Project, type ProjectAggregate, type RateLimitOverride } from './state.ts'

/**
 * What staff change on a project (the edge checks `is_admin`): a request limit above the plan's
 * for a while, and the plan itself.
 */

/** How far ahead an override may end: far enough for any plan, and a later date is more often a typo. */
export const maxRateLimitOverrideDays = 366

/** The project's hourly request limit at `now`: a staff override while it lasts, else the plan's. */
export function requestsPerHourOf(project: Project, planRequestsPerHour: number, now: Date): number {
  const override = project.rate_limit_override
  if (!override || Date.parse(override.expires_at) <= now.getTime()) return planRequestsPerHour
  return Math.max(override.requests_per_hour, planRequestsPerHour)
}

export type StaffEvent = { type: 'rate_limit_overridden'; data: RateLimitOverride & { previous_requests_per_hour: number } }

export type StaffCommand =
  /** `plan_requests_per_hour` is the plan's limit now. */
  | Command<
      'override_rate_limit',
      { staff_user_id: string; requests_per_hour: number; plan_requests_per_hour: number; expires_at: string; reason: string }
    >
  | Command<'change_plan_by_staff', { staff_user_id: string; plan: Plan; overage_available: boolean }>

export function decideStaff(command: StaffCommand, state: ProjectAggregate): Array<StaffEvent | BillingEvent> {
  const { now } = command.meta
  const project = requireProject(state)
  switch (command.type) {
    case 'override_rate_limit': {
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
    case 'change_plan_by_staff': {
      const d = command.data
      if (d.plan === project.plan) return []
      const events: BillingEvent[] = [
        { type: 'plan_changed', data: { plan: d.plan, previous_plan: project.plan, changed_at: now, changed_by_staff: d.staff_user_id } },
      ]
      // As for an owner's change: a plan without overage turns it off.
      if (billingOf(project).overageEnabled && !d.overage_available) events.push({ type: 'overage_disabled', data: { disabled_at: now } })
      return events
    }
  }
}

export function evolveStaff(state: Project, event: StaffEvent): Project {
  const { previous_requests_per_hour: _previous, ...override } = event.data
  return { ...state, rate_limit_override: override, updated_at: event.data.set_at }
}
