import {
  billingOf,
  hasProviderEvent,
  lastPeriodOf,
  promotionTermsOf,
  requestsPerHourOf,
  type AppliedPromotion,
  type BillingState,
  type Plan,
  type Project,
  type ProjectCommand,
  type ProjectEvent,
} from '../../../domain/project/index.ts'
import type { MailTopic, User } from '../../../domain/user.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { userHandler } from '../../../streams/aggregates.ts'
import { commandProject } from '../projects/project-service.ts'
import { mailUser } from '../platform/user-mail.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { Allowance, billingPeriodOf, overageCostCents, type QuotaTerms } from './allowance.ts'

export interface BillingView {
  plan: Plan
  billing_state: BillingState
  overage_enabled: boolean
  overage_available: boolean
  spend_cap_cents: number | null
  period_start: string
  period_end: string
  allowance: number
  used: number
  overage: number
  overage_cost_cents: number
  overage_cents_per_10k: number | null
  requests_per_hour: number
  /** Extra jobs this period from promotion codes (included in `allowance`). */
  allowance_bonus: number
  /** Percent off this period's overage charge from promotion codes (included in `overage_cost_cents`). */
  overage_discount_percent: number
  /** Every promotion applied, with the periods it counts in. */
  promotions: Array<AppliedPromotion & { last_period: string }>
}

/** The marks of the allowance (80 % rounded up, 100 %) that the create counted `usedAfter` reaches. */
export function allowanceMarksOf(terms: QuotaTerms, usedAfter: number): Array<80 | 100> {
  const marks: Array<80 | 100> = []
  if (terms.allowance > 0 && usedAfter === Math.ceil(terms.allowance * 0.8)) marks.push(80)
  if (terms.allowance > 0 && usedAfter === terms.allowance) marks.push(100)
  return marks
}

/**
 * Plans, overage, spend caps and billing states of a project (commands on the project
 * aggregate), and the allowance counter they govern.
 */
export class BillingService {
  readonly #deps: Deps
  readonly allowance: Allowance

  constructor(deps: Deps) {
    this.#deps = deps
    this.allowance = new Allowance(deps.meteringSql)
  }

  /**
   * The terms of `period` (the current one by default): the plan's allowance and overage rate,
   * with the project's promotions for that period (a bonus raises the allowance, a discount
   * lowers the rate, so every overage charge and spend-cap check sees it).
   */
  termsOf(project: Project, period = billingPeriodOf(this.#deps.now()).start): QuotaTerms {
    const limits = this.#deps.config.plans[project.plan]
    const billing = billingOf(project)
    const promotion = promotionTermsOf(project, period)
    return {
      allowance: limits.monthly_jobs + promotion.bonusJobs,
      overageEnabled: billing.overageEnabled && limits.overage_cents_per_10k !== null,
      centsPer10k: ((limits.overage_cents_per_10k ?? 0) * (100 - promotion.discountPercent)) / 100,
      spendCapCents: billing.spendCapCents,
    }
  }

  #on(projectId: string, command: ProjectCommand): Promise<CommandResult<ProjectEvent, Project>> {
    return commandProject(this.#deps, projectId, command)
  }

  #meta() {
    return { now: this.#deps.now().toISOString() }
  }

  async view(project: Project): Promise<BillingView> {
    const now = this.#deps.now()
    const { start, endsAt } = billingPeriodOf(now)
    const reading = await this.allowance.read(project.id, this.termsOf(project, start), now)
    const limits = this.#deps.config.plans[project.plan]
    const billing = billingOf(project)
    const promotion = promotionTermsOf(project, start)
    return {
      plan: project.plan,
      billing_state: billing.state,
      overage_enabled: billing.overageEnabled,
      overage_available: limits.overage_cents_per_10k !== null,
      spend_cap_cents: billing.spendCapCents,
      period_start: `${start}T00:00:00.000Z`,
      period_end: endsAt.toISOString(),
      allowance: reading.limit,
      used: reading.used,
      overage: reading.overage,
      overage_cost_cents: reading.overageCostCents,
      overage_cents_per_10k: limits.overage_cents_per_10k,
      requests_per_hour: requestsPerHourOf(project, limits.requests_per_hour, now),
      allowance_bonus: promotion.bonusJobs,
      overage_discount_percent: promotion.discountPercent,
      promotions: project.promotions.map((p) => ({ ...p, last_period: lastPeriodOf(p) })),
    }
  }

  /** Applies plan, overage and cap changes as one decision: all of them or, on a refusal, none. */
  async update(user: User, project: Project, changes: { plan?: Plan; overage_enabled?: boolean; spend_cap_cents?: number | null }): Promise<Project> {
    const plan = changes.plan ?? project.plan
    const overageAvailable = this.#deps.config.plans[plan].overage_cents_per_10k !== null
    const result = await this.#on(project.id, {
      type: 'update_billing',
      data: { actor_user_id: user.id, ...changes, overage_available: overageAvailable },
      meta: this.#meta(),
    })
    return result.state!
  }

  /**
   * The payment provider's word (a verified webhook) on a project's billing state. `duplicate`:
   * the event id was applied before, so nothing changed (the aggregate decides, so of concurrent
   * deliveries of one event exactly one applies).
   */
  async setBillingState(projectId: string, state: BillingState, providerEventId: string | null): Promise<{ project: Project; duplicate: boolean }> {
    const result = await this.#on(projectId, { type: 'set_billing_state', data: { state, provider_event_id: providerEventId }, meta: this.#meta() })
    const project = result.state!
    return { project, duplicate: !result.appended && providerEventId !== null && hasProviderEvent(project, providerEventId) }
  }

  /**
   * Records the 80 % and 100 % marks of the allowance. Each count is seen by exactly one create
   * (the counter hands out distinct values), and the aggregate keeps one warning per period.
   */
  async noteUsage(project: Project, terms: QuotaTerms, usedAfter: number, period: string): Promise<void> {
    for (const percent of allowanceMarksOf(terms, usedAfter)) {
      const result = await this.#on(project.id, {
        type: 'warn_allowance',
        data: { period, percent, used: usedAfter, allowance: terms.allowance },
        meta: this.#meta(),
      })
      if (!result.appended) continue
      const next = terms.overageEnabled
        ? 'Overage is on: creation continues and the extra jobs are billed.'
        : 'Overage is off: once the allowance is used up, job creation answers 429 until the period ends.'
      await this.#mailOwner(
        project,
        'allowance_warnings',
        `${project.name}: ${percent}% of this month's job allowance used`,
        `The project "${project.name}" (${project.id}) has created ${usedAfter} of its ${terms.allowance} jobs for the period starting ${period}.\n\n${next}\n`,
      )
    }
  }

  /** Moves a project into the current period: the last period's overage is charged, counts start at 0. */
  async rollPeriod(project: Project): Promise<boolean> {
    const now = this.#deps.now()
    const { start } = billingPeriodOf(now)
    const previous = project.billing_period
    if (previous !== null && previous >= start) return false
    let usedBefore = 0
    let overage = 0
    let cents = 0
    if (previous !== null) {
      // Only jobs created as overage (overage on, beyond the allowance at the time) are charged.
      const usage = await this.allowance.usageOf(project.id, previous)
      usedBefore = usage.used
      overage = usage.overage
      cents = overageCostCents(overage, this.termsOf(project, previous).centsPer10k)
    }
    const result = await this.#on(project.id, {
      type: 'roll_billing_period',
      data: { period: start, previous_used: usedBefore, previous_overage: overage, previous_overage_cents: cents },
      meta: this.#meta(),
    })
    if (result.appended && overage > 0) {
      await this.#mailOwner(
        project,
        'overage_charges',
        `${project.name}: overage charged for ${previous}`,
        `The project "${project.name}" (${project.id}) created ${overage} jobs beyond its allowance in the period starting ${previous}: ${(cents / 100).toFixed(2)} USD.\n`,
      )
    }
    return result.appended
  }

  /**
   * Billing notices go to the owner, as their notification preferences allow (a project the
   * operator made without an owner account goes to its owner address as it is); a failed
   * delivery is logged, never fails the request.
   */
  async #mailOwner(project: Project, topic: MailTopic, subject: string, text: string): Promise<void> {
    const ownerId = project.members.find((m) => m.role === 'owner')?.user_id
    const loaded = ownerId === undefined ? null : (await userHandler.load(this.#deps.store, userHandler.ref(ownerId))).state
    const owner = loaded?.status === 'deleted' ? null : loaded
    if (owner === null && !project.owner_email) return
    const sending =
      owner === null
        ? this.#deps.mailer.send({ to: project.owner_email!, subject, text })
        : mailUser(this.#deps, owner, topic, { to: owner.email, subject, text })
    await sending.catch((err) => {
      this.#deps.log.error({ err, project_id: project.id, subject }, 'billing e-mail could not be sent')
    })
  }
}
