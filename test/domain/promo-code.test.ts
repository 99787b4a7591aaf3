import t from 'tap'
import { InvalidToken, PromoCodeAlreadyExists } from '../../domain/errors.ts'
import { promoCodeDecider, type PromoCodeCommand, type PromoCodeEvent } from '../../domain/promo-code.ts'
import { deciderSpec } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()

const definition = {
  code: 'SPRING',
  kind: 'allowance_bonus' as const,
  amount: 1000,
  periods: 2,
  expires_at: at(3600),
  max_uses: 2,
  created_by: 'usr_staff',
}
const create: PromoCodeCommand = { type: 'create_promo_code', data: definition, meta: { now: at(0) } }
const created: PromoCodeEvent = { type: 'promo_code_created', data: { ...definition, created_at: at(0) } }
const redeem = (projectId: string, seconds = 60): PromoCodeCommand => ({
  type: 'redeem_promo_code',
  data: { project_id: projectId, redeemed_by: 'usr_owner' },
  meta: { now: at(seconds) },
})
const redeemed = (projectId: string, seconds = 60): PromoCodeEvent => ({
  type: 'promo_code_redeemed',
  data: { project_id: projectId, redeemed_by: 'usr_owner', redeemed_at: at(seconds) },
})

t.test('staff create a code once', async (t) => {
  const spec = deciderSpec(t, promoCodeDecider)
  const state = spec.given([]).when(create).then([created])
  t.match(state, { code: 'SPRING', uses: 0, project_ids: [] })
  spec.given([created]).when(create).thenThrows(PromoCodeAlreadyExists, 'invalid_state')
})

t.test('each redemption counts one use, one per project, up to the limit', async (t) => {
  const spec = deciderSpec(t, promoCodeDecider)
  const state = spec
    .given([created])
    .when(redeem('prj_a'))
    .then([redeemed('prj_a')])
  t.match(state, { uses: 1, project_ids: ['prj_a'] })
  spec
    .given([created, redeemed('prj_a')])
    .when(redeem('prj_a'))
    .thenThrows(InvalidToken, 'invalid_token', 'the same project twice')
  spec
    .given([created, redeemed('prj_a'), redeemed('prj_b')])
    .when(redeem('prj_c'))
    .thenThrows(InvalidToken, 'invalid_token', 'used up')
})

t.test('unknown and expired codes are invalid tokens', async (t) => {
  const spec = deciderSpec(t, promoCodeDecider)
  spec.given([]).when(redeem('prj_a')).thenThrows(InvalidToken, 'invalid_token', 'unknown')
  spec.given([created]).when(redeem('prj_a', 3600)).thenThrows(InvalidToken, 'invalid_token', 'at its expiry')
})

t.test('unknown, expired, used-up and already-applied codes are refused with one message (no oracle)', async (t) => {
  const refusalOf = (history: PromoCodeEvent[], command: PromoCodeCommand) => {
    const state = history.reduce(promoCodeDecider.evolve, promoCodeDecider.initialState)
    try {
      promoCodeDecider.decide(command, state)
      return null
    } catch (err) {
      return err instanceof InvalidToken ? err.message : err
    }
  }
  const messages = [
    refusalOf([], redeem('prj_a')),
    refusalOf([created], redeem('prj_a', 3600)),
    refusalOf([created, redeemed('prj_a'), redeemed('prj_b')], redeem('prj_c')),
    refusalOf([created, redeemed('prj_a')], redeem('prj_a')),
  ]
  t.equal(new Set(messages).size, 1, JSON.stringify(messages))
  t.type(messages[0], 'string')
})
