import { Forbidden, InvalidToken } from '../../../domain/errors.ts'
import type { Project, ProjectRole } from '../../../domain/project/index.ts'
import { promoCodePattern, promoCodeRefusal, type PromoCode, type PromoCodeCommand } from '../../../domain/promo-code.ts'
import type { User } from '../../../domain/user.ts'
import { promoCodeHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { AuthLimits, WindowFull } from '../platform/auth-limits.ts'
import { commandProject } from '../projects/project-service.ts'
import { billingPeriodOf } from './allowance.ts'

/** Codes are compared upper-cased, so `spring-25` and `SPRING-25` are one code. */
export function normalizePromoCode(code: string): string {
  return code.trim().toUpperCase()
}

/** What staff choose for a new code; the rest is filled in on creation. */
export type NewPromoCode = Omit<PromoCode, 'uses' | 'project_ids' | 'created_by' | 'created_at'>

/**
 * Promotion codes: staff create them, owners apply them to a project. An apply redeems the code
 * on its own aggregate first (the use count's guard: an append at the code's expected sequence),
 * then records `promo_code_applied` on the project, which the allowance and the overage charge
 * read. Should the process stop between the two appends, the use stays counted and the project
 * has no promotion: staff see both in the lookups and can issue another code.
 */
export class PromoCodes {
  readonly #deps: Deps
  readonly #limits: AuthLimits

  constructor(deps: Deps) {
    this.#deps = deps
    this.#limits = new AuthLimits(deps.authLimits)
  }

  #on(code: string, command: PromoCodeCommand) {
    return promoCodeHandler.decide(this.#deps, promoCodeHandler.ref(code), command)
  }

  async create(staff: User, input: NewPromoCode): Promise<PromoCode> {
    const result = await this.#on(normalizePromoCode(input.code), {
      type: 'create_promo_code',
      data: { ...input, code: normalizePromoCode(input.code), created_by: staff.id },
      meta: { now: this.#deps.now().toISOString() },
    })
    return result.state!
  }

  /** The code, or null for one never created (or not a code's shape). */
  async read(code: string): Promise<PromoCode | null> {
    const normalized = normalizePromoCode(code)
    if (!promoCodePattern.test(normalized)) return null
    return (await promoCodeHandler.load(this.#deps.store, promoCodeHandler.ref(normalized))).state
  }

  /**
   * Applies `code` to `project` for `user`, who holds `role` there, from the current billing
   * period on. Unknown, expired, used-up or already-applied codes are 422 `invalid_token`, with
   * one message. The role is checked before the code is redeemed (the project checks it again),
   * so a refused caller never spends a use. Each apply takes a slot of the user's and the
   * project's failure windows first; a refused code keeps them, anything else gives them back.
   */
  async apply(user: User, project: Project, role: ProjectRole, code: string): Promise<Project> {
    if (role !== 'owner') throw new Forbidden('applying a promotion code needs the project role owner')
    const now = this.#deps.now()
    const verdict = await this.#limits.reservePromoAttempt(user.id, project.id, now)
    if (!verdict.admitted) throw new WindowFull('too many promotion codes that were not valid; try again later', verdict.retryAfterMs)
    try {
      const applied = await this.#redeem(user, project, code, now)
      await this.#limits.releasePromoAttempt(user.id, project.id, now)
      return applied
    } catch (err) {
      if (!(err instanceof InvalidToken)) await this.#limits.releasePromoAttempt(user.id, project.id, now)
      throw err
    }
  }

  async #redeem(user: User, project: Project, code: string, now: Date): Promise<Project> {
    const normalized = normalizePromoCode(code)
    if (!promoCodePattern.test(normalized)) throw new InvalidToken(promoCodeRefusal)
    const meta = { now: now.toISOString() }
    const redeemed = await this.#on(normalized, { type: 'redeem_promo_code', data: { project_id: project.id, redeemed_by: user.id }, meta })
    const promo = redeemed.state!
    const applied = await commandProject(this.#deps, project.id, {
      type: 'apply_promo_code',
      data: {
        actor_user_id: user.id,
        code: promo.code,
        kind: promo.kind,
        amount: promo.amount,
        periods: promo.periods,
        period: billingPeriodOf(now).start,
      },
      meta,
    })
    return applied.state!
  }
}
