import t from 'tap'
import { InvalidVerificationToken, SecurityNoticesRequired } from '../../domain/errors.ts'
import {
  defaultNotificationPreferences,
  mailVerdict,
  maxKnownDevices,
  notificationPreferencesOf,
  userDecider,
  type TokenGrant,
  type User,
  type UserCommand,
  type UserEvent,
} from '../../domain/user.ts'
import { fold } from '../../domain/decider.ts'
import { deciderSpec } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()
const day = 24 * 3600

type Data<T extends UserCommand['type']> = Extract<UserCommand, { type: T }>['data']
function cmd<T extends UserCommand['type']>(type: T, data: Data<T>, seconds = 0): UserCommand {
  return { type, data, meta: { now: at(seconds) } } as UserCommand
}

const verification: TokenGrant = { token_hash: 'v'.repeat(64), expires_at: at(day) }
const reverification: TokenGrant = { token_hash: 'w'.repeat(64), expires_at: at(3 * day) }

const stateOf = (events: readonly UserEvent[]) => fold(userDecider, userDecider.initialState, events) as User
/** `history` and the events `command` decides after it. */
const after = (history: UserEvent[], command: UserCommand) => [
  ...history,
  ...userDecider.decide(command, history.length === 0 ? null : stateOf(history)),
]

const signedUp = after([], cmd('sign_up', { user_id: 'usr_1', email: 'ada@example.test', password_hash: 'scrypt$x', plan: 'free', verification }))
const verified = after(
  signedUp,
  cmd('verify_email', { token_hash: verification.token_hash, account_id: 'acc_1', account_name: 'Ada', project_id: 'prj_1' }, 60),
)
const bounced: UserEvent[] = [
  ...verified,
  { type: 'email_marked_undeliverable', data: { email: 'ada@example.test', reason: 'hard_bounce', reported_at: at(100), marked_at: at(101) } },
]
const reverificationIssued: UserEvent[] = [...bounced, { type: 'verification_token_issued', data: reverification }]
const reverified = after(reverificationIssued, cmd('reverify_email', { token_hash: reverification.token_hash }, 400))

const spec = (t: Parameters<typeof deciderSpec>[0]) => deciderSpec(t, userDecider)
/** The provider's report about `email`, seen at `seconds` and handled a second later. */
const report = (email: string, reason: 'hard_bounce' | 'complaint', seconds: number) =>
  cmd('mark_email_undeliverable', { email, reason, reported_at: at(seconds) }, seconds + 1)

t.test('a new user gets the default preferences: every notice on, product news off', async (t) => {
  t.same(notificationPreferencesOf(stateOf(verified)), defaultNotificationPreferences)
  t.equal(defaultNotificationPreferences.product_news, false)
})

t.test('updating preferences records only what changes', async (t) => {
  const user = spec(t)
    .given(verified)
    .when(cmd('update_notification_preferences', { allowance_warnings: false, alert_emails: true, product_news: true, security_notices: true }))
    .then([{ type: 'notification_preferences_updated', data: { allowance_warnings: false, product_news: true } }])
  t.same(notificationPreferencesOf(user!), { ...defaultNotificationPreferences, allowance_warnings: false, product_news: true })
  spec(t)
    .given(verified)
    .when(cmd('update_notification_preferences', { alert_emails: true }))
    .then([], 'nothing to change, no event')
})

t.test('security notices cannot be turned off', async (t) => {
  spec(t)
    .given(verified)
    .when(cmd('update_notification_preferences', { security_notices: false, product_news: true }))
    .thenThrows(SecurityNoticesRequired, 'security_notices_required')
})

t.test('what may be mailed: turned-off topics and undeliverable addresses get nothing', async (t) => {
  const optedOut = stateOf([...verified, { type: 'notification_preferences_updated', data: { alert_emails: false } }])
  t.equal(mailVerdict(optedOut, 'alert_emails'), 'turned_off')
  t.equal(mailVerdict(optedOut, 'allowance_warnings'), 'send')
  t.equal(mailVerdict(optedOut, 'security_notices'), 'send')
  t.equal(mailVerdict(optedOut, 'account'), 'send', 'a reset link or an invitation has no preference')
  const undeliverable = stateOf(bounced)
  for (const topic of ['security_notices', 'account', 'allowance_warnings'] as const) {
    t.equal(mailVerdict(undeliverable, topic), 'undeliverable', `${topic} is not sent to an undeliverable address`)
  }
})

t.test("a hard bounce or complaint marks the user's current address, once", async (t) => {
  const user = spec(t)
    .given(verified)
    .when(report('ADA@example.test', 'hard_bounce', 100))
    .then(bounced.slice(-1))
  t.same(user!.email_undeliverable, { reason: 'hard_bounce', reported_at: at(100) })
})

t.test('reports that change nothing', async (t) => {
  const unchanged: Array<[string, UserEvent[], UserCommand]> = [
    ['already marked', bounced, report('ada@example.test', 'complaint', 200)],
    ['an address the user does not have', verified, report('someone-else@example.test', 'complaint', 100)],
    ['a bounce from before the address was proved again', reverified, report('ada@example.test', 'hard_bounce', 350)],
  ]
  for (const [why, history, command] of unchanged) spec(t).given(history).when(command).then([], why)
})

t.test('re-verifying lifts the mark, once', async (t) => {
  spec(t)
    .given(bounced)
    .when(cmd('issue_reverification_token', { verification: reverification }, 300))
    .then([{ type: 'verification_token_issued', data: reverification }])
  const user = spec(t)
    .given(reverificationIssued)
    .when(cmd('reverify_email', { token_hash: reverification.token_hash }, 400))
    .then([{ type: 'email_reverified', data: { email: 'ada@example.test', reverified_at: at(400) } }])
  t.equal(user!.email_undeliverable, null)
  t.equal(user!.verification, null, 'the token is spent')
  t.equal(mailVerdict(user!, 'security_notices'), 'send')
  spec(t)
    .given(reverified)
    .when(cmd('reverify_email', { token_hash: reverification.token_hash }, 500))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'single use')
})

t.test('re-verification refuses a wrong or expired token, and an address never verified', async (t) => {
  spec(t)
    .given(reverificationIssued)
    .when(cmd('reverify_email', { token_hash: 'x'.repeat(64) }, 400))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token')
  spec(t)
    .given(reverificationIssued)
    .when(cmd('reverify_email', { token_hash: reverification.token_hash }, 3 * day))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token')
  spec(t)
    .given(signedUp)
    .when(cmd('issue_reverification_token', { verification: reverification }))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token')
  spec(t)
    .given(signedUp)
    .when(cmd('reverify_email', { token_hash: verification.token_hash }))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'the sign-up token does not re-verify')
})

t.test('sign-ins: the first device is recorded quietly, a known one not at all, another one as new', async (t) => {
  const first = spec(t)
    .given(verified)
    .when(cmd('record_sign_in', { device_id: 'd1' }, 70))
    .then([{ type: 'new_device_signed_in', data: { device_id: 'd1', first_device: true, signed_in_at: at(70) } }])
  t.same(first!.known_devices, ['d1'])
  const seen: UserEvent[] = [...verified, { type: 'new_device_signed_in', data: { device_id: 'd1', first_device: true, signed_in_at: at(70) } }]
  spec(t)
    .given(seen)
    .when(cmd('record_sign_in', { device_id: 'd1' }, 80))
    .then([])
  spec(t)
    .given(seen)
    .when(cmd('record_sign_in', { device_id: 'd2' }, 80))
    .then([{ type: 'new_device_signed_in', data: { device_id: 'd2', first_device: false, signed_in_at: at(80) } }])
})

t.test('known devices are bounded: the oldest is forgotten', async (t) => {
  const logins: UserEvent[] = Array.from({ length: maxKnownDevices + 1 }, (_, i) => ({
    type: 'new_device_signed_in',
    data: { device_id: `d${i}`, first_device: i === 0, signed_in_at: at(100 + i) },
  }))
  const user = stateOf([...verified, ...logins])
  t.equal(user.known_devices!.length, maxKnownDevices)
  t.notOk(user.known_devices!.includes('d0'))
})
