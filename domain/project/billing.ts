import { InvalidToken, OverageUnavailable } from '../errors.ts'
import { promoCodeRefusal, type PromoKind } from '../promo-code.ts'
import {
  requireProject,
  requireRole,
  type Acting,
  type AppliedPromotion,
  type BillingState,
  type Command,
  type Plan,
  type Project,
  type ProjectAggregate,
} from './state.ts'

/**
 * What the project pays: its plan, overage and spend cap as its owner and admins set them, the
 * billing state the payment provider reports (each provider event applied once), the allowance
 * warnings and period roll-overs the scheduler records, and the promotion codes applied.
 */

const monthIndexOf = (period: string) => Number(period.slice(0, 4)) * 12 + Number(period.slice(5, 7)) - 1

/** The last billing period (`YYYY-MM-01`) a promotion counts in. */
export function lastPeriodOf(promotion: AppliedPromotion): string {
  const month = monthIndexOf(promotion.first_period) + promotion.periods - 1
  return `${Math.floor(month / 12)}-${String((month % 12) + 1).padStart(2, '0')}-01`
}

/**
 * What the project's promotions give in `period`: bonuses add up; of several discounts the
 * largest applies (discounts that added up could pass 100 %).
 */
export function promotionTermsOf(project: Project, period: string): { bonusJobs: number; discountPercent: number } {
  let bonusJobs = 0
  let discountPercent = 0
  for (const p of project.promotions) {
    const offset = monthIndexOf(period) - monthIndexOf(p.first_period)
    if (offset < 0 || offset >= p.periods) continue
    if (p.kind === 'allowance_bonus') bonusJobs += p.amount
    else discountPercent = Math.max(discountPercent, p.amount)
  }
  return { bonusJobs, discountPercent }
}

/**
 * How long and how many of the provider's event ids a project remembers. A signed delivery is
 * accepted within 5 minutes either side of its timestamp, so a replay of the same bytes arrives
 * within 10 minutes of the first; a day covers that and the provider's own retries, and the
 * count bounds the state should the provider send a burst.
 */
export const providerEventMemory = { ms: 24 * 60 * 60 * 1000, count: 100 }

/** True when the provider's event `id` was applied to the project (within providerEventMemory). */
export function hasProviderEvent(project: Project, id: string): boolean {
  return project.provider_events.some((e) => e.id === id)
}

function rememberProviderEvent(project: Project, id: string | null, at: string): Project['provider_events'] {
  const kept = project.provider_events.filter((e) => Date.parse(e.at) > Date.parse(at) - providerEventMemory.ms)
  return id === null ? kept : [...kept, { id, at }].slice(-providerEventMemory.count)
}

/** A project's billing settings. */
export function billingOf(project: Project): { state: BillingState; overageEnabled: boolean; spendCapCents: number | null } {
  return { state: project.billing_state, overageEnabled: project.overage_enabled, spendCapCents: project.spend_cap_cents }
}

export type BillingEvent =
  /** `changed_by_staff`: the staff member who changed it (absent when the owner did). */
  | { type: 'plan_changed'; data: { plan: Plan; previous_plan: Plan; changed_at: string; changed_by_staff?: string } }
  | { type: 'promo_code_applied'; data: AppliedPromotion & { applied_by: string; applied_at: string } }
  | { type: 'overage_enabled'; data: { enabled_at: string } }
  | { type: 'overage_disabled'; data: { disabled_at: string } }
  | { type: 'spend_cap_updated'; data: { spend_cap_cents: number | null; updated_at: string } }
  | {
      type: 'billing_state_changed'
      data: { state: BillingState; previous_state: BillingState; provider_event_id: string | null; changed_at: string }
    }
  /** The provider reported the state the project is already in: recorded so a replay of it is known. */
  | { type: 'billing_state_confirmed'; data: { state: BillingState; provider_event_id: string; confirmed_at: string } }
  | { type: 'allowance_warning_80' | 'allowance_warning_100'; data: { period: string; used: number; allowance: number; warned_at: string } }
  | {
      type: 'billing_period_reset'
      data: {
        period: string
        previous_period: string | null
        previous_used: number
        previous_overage: number
        previous_overage_cents: number
        reset_at: string
      }
    }
  | { type: 'overage_charged'; data: { period: string; overage: number; cents: number; charged_at: string } }

export type BillingCommand =
  /**
   * Plan, overage and cap in one decision, so a refused part leaves everything unchanged.
   * `overage_available`: whether the plan the project ends on has an overage rate (plan numbers
   * live outside the domain).
   */
  | Command<'update_billing', Acting & { plan?: Plan; overage_enabled?: boolean; spend_cap_cents?: number | null; overage_available: boolean }>
  | Command<'set_billing_state', { state: BillingState; provider_event_id: string | null }>
  /** The code was redeemed on its own aggregate first; `period` is the billing period it is applied in. */
  | Command<'apply_promo_code', Acting & { code: string; kind: PromoKind; amount: number; periods: number; period: string }>
  | Command<'warn_allowance', { period: string; percent: 80 | 100; used: number; allowance: number }>
  | Command<'roll_billing_period', { period: string; previous_used: number; previous_overage: number; previous_overage_cents: number }>

export function decideBilling(command: BillingCommand, state: ProjectAggregate): BillingEvent[] {
  const { now } = command.meta
  const project = requireProject(state)
  switch (command.type) {
    case 'set_billing_state': {
      const { state: next, provider_event_id: eventId } = command.data
      // A provider event already applied (a replay, or a retry of the same event) changes nothing,
      // even when a later event has moved the state on since.
      if (eventId !== null && hasProviderEvent(project, eventId)) return []
      const current = billingOf(project).state
      if (next === current)
        return eventId === null ? [] : [{ type: 'billing_state_confirmed', data: { state: next, provider_event_id: eventId, confirmed_at: now } }]
      return [{ type: 'billing_state_changed', data: { state: next, previous_state: current, provider_event_id: eventId, changed_at: now } }]
    }
    case 'warn_allowance': {
      const mark = `${command.data.period}:${command.data.percent}`
      if (project.allowance_warnings.includes(mark)) return []
      const { period, used, allowance } = command.data
      return [
        { type: command.data.percent === 80 ? 'allowance_warning_80' : 'allowance_warning_100', data: { period, used, allowance, warned_at: now } },
      ]
    }
    case 'roll_billing_period': {
      const previous = project.billing_period
      if (previous !== null && previous >= command.data.period) return []
      const d = command.data
      const events: BillingEvent[] = [
        {
          type: 'billing_period_reset',
          data: {
            period: d.period,
            previous_period: previous,
            previous_used: d.previous_used,
            previous_overage: d.previous_overage,
            previous_overage_cents: d.previous_overage_cents,
            reset_at: now,
          },
        },
      ]
      if (previous !== null && d.previous_overage > 0) {
        events.unshift({
          type: 'overage_charged',
          data: { period: previous, overage: d.previous_overage, cents: d.previous_overage_cents, charged_at: now },
        })
      }
      return events
    }
    case 'update_billing': {
      const d = command.data
      const billing = billingOf(project)
      const changesPlan = d.plan !== undefined && d.plan !== project.plan
      const actor = command.data.actor_user_id
      requireRole(project, actor, changesPlan ? 'owner' : 'admin', changesPlan ? 'changing the plan' : 'changing billing settings')
      const wantsOverage = d.overage_enabled ?? billing.overageEnabled
      if (d.overage_enabled === true && !d.overage_available) throw new OverageUnavailable(`the ${d.plan ?? project.plan} plan has no overage`)
      const events: BillingEvent[] = []
      if (changesPlan) events.push({ type: 'plan_changed', data: { plan: d.plan!, previous_plan: project.plan, changed_at: now } })
      // A plan without overage turns it off, whatever was asked for.
      const overage = wantsOverage && d.overage_available
      if (overage !== billing.overageEnabled) {
        events.push(overage ? { type: 'overage_enabled', data: { enabled_at: now } } : { type: 'overage_disabled', data: { disabled_at: now } })
      }
      if (d.spend_cap_cents !== undefined && d.spend_cap_cents !== billing.spendCapCents) {
        events.push({ type: 'spend_cap_updated', data: { spend_cap_cents: d.spend_cap_cents, updated_at: now } })
      }
      return events
    }
    case 'apply_promo_code': {
      const actor = command.data.actor_user_id
      requireRole(project, actor, 'owner', 'applying a promotion code')
      const { code, kind, amount, periods, period } = command.data
      if (project.promotions.some((p) => p.code === code)) throw new InvalidToken(promoCodeRefusal)
      return [
        { type: 'promo_code_applied', data: { code, kind, amount, first_period: period, periods, applied_by: actor ?? 'operator', applied_at: now } },
      ]
    }
  }
}

export function evolveBilling(state: Project, event: BillingEvent): Project {
  switch (event.type) {
    case 'plan_changed':
      return { ...state, plan: event.data.plan, updated_at: event.data.changed_at }
    case 'overage_enabled':
      return { ...state, overage_enabled: true, updated_at: event.data.enabled_at }
    case 'overage_disabled':
      return { ...state, overage_enabled: false, updated_at: event.data.disabled_at }
    case 'spend_cap_updated':
      return { ...state, spend_cap_cents: event.data.spend_cap_cents, updated_at: event.data.updated_at }
    case 'billing_state_changed':
      return {
        ...state,
        billing_state: event.data.state,
        provider_events: rememberProviderEvent(state, event.data.provider_event_id, event.data.changed_at),
        updated_at: event.data.changed_at,
      }
    case 'billing_state_confirmed':
      return { ...state, provider_events: rememberProviderEvent(state, event.data.provider_event_id, event.data.confirmed_at) }
    case 'allowance_warning_80':
    case 'allowance_warning_100': {
      const mark = `${event.data.period}:${event.type === 'allowance_warning_80' ? 80 : 100}`
      const kept = state.allowance_warnings.filter((w) => w.startsWith(`${event.data.period}:`))
      return { ...state, allowance_warnings: [...kept, mark] }
    }
    case 'billing_period_reset':
      return { ...state, billing_period: event.data.period, allowance_warnings: [] }
    case 'promo_code_applied': {
      const { code, kind, amount, first_period, periods } = event.data
      return { ...state, promotions: [...state.promotions, { code, kind, amount, first_period, periods }], updated_at: event.data.applied_at }
    }
    case 'overage_charged':
      return state
  }
}
