import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { InvalidToken, PromoCodeAlreadyExists } from './errors.ts'

/**
 * A promotion code made by staff and applied by project owners. The code's own aggregate counts
 * its uses: an apply is a redemption appended at the code's expected sequence, so of concurrent
 * applies past the use limit exactly the allowed number win, whatever the number of processes.
 */

export const promoKinds = ['allowance_bonus', 'overage_discount'] as const
/** `allowance_bonus`: extra jobs per billing period; `overage_discount`: percent off the overage charge. */
export type PromoKind = (typeof promoKinds)[number]

/** Codes are subject tokens (the aggregate's id), upper-cased so that a code is typed either way. */
export const promoCodePattern = /^[A-Z0-9][A-Z0-9_-]{2,39}$/

/**
 * Uses a code allows at most. The code remembers the projects that used it (one use per
 * project), so this bounds its state.
 */
export const maxPromoUses = 10_000

export interface PromoCode {
  code: string
  kind: PromoKind
  /** Jobs per period for a bonus, whole percent (1–100) for a discount. */
  amount: number
  /** Billing periods it lasts, counted from the one it is applied in. */
  periods: number
  /** No apply is accepted from this instant on; periods already granted run their course. */
  expires_at: string
  max_uses: number
  uses: number
  /** Projects that applied the code, oldest first. */
  project_ids: string[]
  created_by: string
  created_at: string
}

export type PromoCodeAggregate = PromoCode | null

export type PromoCodeEvent =
  | { type: 'promo_code_created'; data: Omit<PromoCode, 'uses' | 'project_ids'> }
  | { type: 'promo_code_redeemed'; data: { project_id: string; redeemed_by: string; redeemed_at: string } }

type Command<T extends string, D> = { type: T; data: D; meta: CommandMeta }

export type PromoCodeCommand =
  | Command<'create_promo_code', Omit<PromoCode, 'uses' | 'project_ids' | 'created_at'>>
  | Command<'redeem_promo_code', { project_id: string; redeemed_by: string }>

/**
 * The one refusal of a code that cannot be applied: unknown, expired, used up and already applied
 * read alike, so an owner trying codes learns nothing about the ones that exist (no oracle).
 */
export const promoCodeRefusal = 'the promotion code is not valid for this project'

/** Whether the code can be applied now to this project. */
export function isRedeemable(code: PromoCodeAggregate, projectId: string, now: string): code is PromoCode {
  return code !== null && Date.parse(code.expires_at) > Date.parse(now) && code.uses < code.max_uses && !code.project_ids.includes(projectId)
}

function decide(command: PromoCodeCommand, state: PromoCodeAggregate): PromoCodeEvent[] {
  const { now } = command.meta
  switch (command.type) {
    case 'create_promo_code':
      if (state !== null) throw new PromoCodeAlreadyExists(`the promotion code ${state.code} already exists`)
      return [{ type: 'promo_code_created', data: { ...command.data, created_at: now } }]
    case 'redeem_promo_code': {
      if (!isRedeemable(state, command.data.project_id, now)) throw new InvalidToken(promoCodeRefusal)
      return [{ type: 'promo_code_redeemed', data: { ...command.data, redeemed_at: now } }]
    }
  }
}

function evolve(state: PromoCodeAggregate, event: PromoCodeEvent): PromoCodeAggregate {
  if (event.type === 'promo_code_created') return { ...event.data, uses: 0, project_ids: [] }
  if (state === null) throw new EventBeforeCreation(event.type, 'promo_code_created')
  return { ...state, uses: state.uses + 1, project_ids: [...state.project_ids, event.data.project_id] }
}

export const promoCodeDecider: Decider<PromoCodeCommand, PromoCodeEvent, PromoCodeAggregate> = { initialState: null, decide, evolve }
