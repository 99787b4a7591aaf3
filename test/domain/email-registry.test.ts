import t from 'tap'
import { emailRegistryDecider, type EmailClaimCommand, type EmailClaimEvent } from '../../domain/email-registry.ts'
import { EmailAlreadyRegistered } from '../../domain/errors.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()

const claim = (userId: string, goneHolder: string | null = null, seconds = 0): EmailClaimCommand => ({
  type: 'claim_email',
  data: { user_id: userId, gone_holder: goneHolder },
  meta: { now: at(seconds) },
})
const release = (userId: string, seconds = 0): EmailClaimCommand => ({
  type: 'release_email',
  data: { user_id: userId },
  meta: { now: at(seconds) },
})

const claimed = (userId: string, seconds = 0): EmailClaimEvent => ({ type: 'email_claimed', data: { user_id: userId, claimed_at: at(seconds) } })
const released = (userId: string, seconds = 0): EmailClaimEvent => ({ type: 'email_released', data: { user_id: userId, released_at: at(seconds) } })

t.test('claim an unclaimed address', async (t) => {
  const state = deciderSpec(t, emailRegistryDecider)
    .given([])
    .when(claim('usr_1'))
    .then([claimed('usr_1')])
  t.same(state, { user_id: 'usr_1', claimed_at: at(0) })
})

t.test('claim by the holder again decides nothing', async (t) => {
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1')])
    .when(claim('usr_1', null, 10))
    .then([])
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1')])
    .when(claim('usr_1', 'usr_1', 10))
    .then([], 'even naming itself as gone')
})

t.test('claim of an address held by another user is refused', async (t) => {
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1')])
    .when(claim('usr_2'))
    .thenThrows(EmailAlreadyRegistered, 'email_already_registered')
})

t.test('claim naming the current holder as gone takes the address over', async (t) => {
  const state = deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1')])
    .when(claim('usr_2', 'usr_1', 30))
    .then([claimed('usr_2', 30)])
  t.same(state, { user_id: 'usr_2', claimed_at: at(30) })
})

t.test('claim naming someone else as gone is refused (the holder changed since the edge looked)', async (t) => {
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1'), released('usr_1', 10), claimed('usr_3', 20)])
    .when(claim('usr_2', 'usr_1', 30))
    .thenThrows(EmailAlreadyRegistered, 'email_already_registered')
})

t.test('claim naming a gone holder on an unclaimed address simply claims it', async (t) => {
  deciderSpec(t, emailRegistryDecider)
    .given([])
    .when(claim('usr_2', 'usr_1'))
    .then([claimed('usr_2')])
})

t.test('release by the holder frees the address', async (t) => {
  const state = deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1')])
    .when(release('usr_1', 60))
    .then([released('usr_1', 60)])
  t.same(state, { user_id: null, claimed_at: null })
})

t.test('release by anyone but the holder decides nothing', async (t) => {
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1')])
    .when(release('usr_2'))
    .then([], 'another user')
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1'), released('usr_1', 10), claimed('usr_2', 20)])
    .when(release('usr_1', 30))
    .then([], 'a late release by an earlier holder')
  deciderSpec(t, emailRegistryDecider).given([]).when(release('usr_1')).then([], 'never claimed')
  deciderSpec(t, emailRegistryDecider)
    .given([claimed('usr_1'), released('usr_1', 10)])
    .when(release('usr_1', 20))
    .then([], 'already released')
})

t.test('claim after a release, by a new user or the earlier one', async (t) => {
  const history = [claimed('usr_1'), released('usr_1', 10)]
  const state = deciderSpec(t, emailRegistryDecider)
    .given(history)
    .when(claim('usr_2', null, 20))
    .then([claimed('usr_2', 20)])
  t.same(state, { user_id: 'usr_2', claimed_at: at(20) })
  deciderSpec(t, emailRegistryDecider)
    .given(history)
    .when(claim('usr_1', null, 20))
    .then([claimed('usr_1', 20)], 'the earlier holder again')
})

t.test('evolve on a missing state: email_claimed builds it, a release throws', async (t) => {
  evolveOnMissingState(t, emailRegistryDecider, claimed('usr_1'), [released('usr_1')])
})
