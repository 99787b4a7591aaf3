import t from 'tap'
import { fold } from '../../domain/decider.ts'
import {
  InvalidResetToken,
  InvalidState,
  InvalidTotpCode,
  InvalidVerificationToken,
  TotpAlreadyEnabled,
  TotpNotEnabled,
  TotpNotInitialized,
  UserAlreadyExists,
  UserNotFound,
} from '../../domain/errors.ts'
import { isSessionLive, maxEndedSessions, userDecider, type TokenGrant, type User, type UserCommand, type UserEvent } from '../../domain/user.ts'
import { upgradeUser } from '../../domain/user.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
/** The instant `seconds` after t0. */
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()
const hour = 3600
const day = 24 * hour

const verification: TokenGrant = { token_hash: 'v'.repeat(64), expires_at: at(day) }
const reset: TokenGrant = { token_hash: 'r'.repeat(64), expires_at: at(hour) }

type Data<T extends UserCommand['type']> = Extract<UserCommand, { type: T }>['data']

/** A command of `type` decided at `seconds` after t0. */
function cmd<T extends UserCommand['type']>(type: T, data: Data<T>, seconds = 0): UserCommand {
  return { type, data, meta: { now: at(seconds) } } as UserCommand
}

const signUp = cmd('sign_up', {
  user_id: 'usr_1',
  email: 'ada@example.test',
  password_hash: 'scrypt$old',
  plan: 'starter',
  verification,
})

const signedUp: UserEvent[] = [
  { type: 'user_signed_up', data: { user_id: 'usr_1', email: 'ada@example.test', password_hash: 'scrypt$old', plan: 'starter', created_at: at(0) } },
  { type: 'terms_accepted', data: { accepted_at: at(0) } },
  { type: 'verification_token_issued', data: verification },
]

const verified: UserEvent[] = [
  ...signedUp,
  { type: 'email_verified', data: { account_id: 'acc_1', account_name: 'Ada', project_id: 'prj_1', verified_at: at(60) } },
  { type: 'project_joined', data: { project_id: 'prj_1' } },
]

const staged: UserEvent[] = [...verified, { type: 'totp_secret_staged', data: { secret_encrypted: 'enc:secret-1' } }]
const enabled: UserEvent[] = [...staged, { type: 'two_factor_enabled', data: { enabled_at: at(120), step: 100 } }]
const withCodes: UserEvent[] = [...enabled, { type: 'recovery_codes_regenerated', data: { code_hashes: ['c1', 'c2', 'c3'] } }]
const resetRequested: UserEvent[] = [...verified, { type: 'password_reset_requested', data: reset }]

const verify = (tokenHash = verification.token_hash, seconds = 60) =>
  cmd('verify_email', { token_hash: tokenHash, account_id: 'acc_1', account_name: 'Ada', project_id: 'prj_1' }, seconds)

const userSpec = (t: Parameters<typeof deciderSpec>[0]) => deciderSpec(t, userDecider)

/** The state reached by `events`, asserted to be a user. */
function stateOf(events: readonly UserEvent[]): User {
  const state = fold(userDecider, userDecider.initialState, events)
  if (state === null) throw new Error('the events do not create a user')
  return state
}

t.test('sign up: the user, the accepted terms and a verification token', async (t) => {
  const user = userSpec(t).given([]).when(signUp).then(signedUp)
  t.same(user, {
    id: 'usr_1',
    email: 'ada@example.test',
    password_hash: 'scrypt$old',
    password_changed_at: at(0),
    ended_sessions: [],
    sessions_ended_before: null,
    plan: 'starter',
    status: 'active',
    created_at: at(0),
    updated_at: at(0),
    terms_accepted_at: at(0),
    email_verified_at: null,
    display_name: null,
    timezone: 'UTC',
    locale: 'en-US',
    is_admin: false,
    account: null,
    verification,
    password_reset: null,
    totp: null,
    recovery_code_hashes: [],
    project_ids: [],
    notifications: {},
    email_undeliverable: null,
    email_reverified_at: null,
    known_devices: [],
  })
})

t.test('sign up refuses an id that already exists, deleted or not', async (t) => {
  userSpec(t).given(signedUp).when(signUp).thenThrows(UserAlreadyExists, 'invalid_state')
  userSpec(t)
    .given([...verified, { type: 'account_deleted', data: { deleted_at: at(90) } }])
    .when(signUp)
    .thenThrows(UserAlreadyExists, 'invalid_state', 'a deleted user id is not reused')
})

t.test('commands other than sign up need an existing user', async (t) => {
  userSpec(t).given([]).when(verify()).thenThrows(UserNotFound, 'user_not_found')
  userSpec(t)
    .given([])
    .when(cmd('change_password', { password_hash: 'x' }))
    .thenThrows(UserNotFound, 'user_not_found')
})

t.test('verify e-mail with the right token before expiry: verified and joined to the first project', async (t) => {
  const user = userSpec(t)
    .given(signedUp)
    .when(verify())
    .then([
      { type: 'email_verified', data: { account_id: 'acc_1', account_name: 'Ada', project_id: 'prj_1', verified_at: at(60) } },
      { type: 'project_joined', data: { project_id: 'prj_1' } },
    ])
  t.equal(user?.email_verified_at, at(60))
  t.equal(user?.verification, null, 'the token is spent')
  t.same(user?.account, { id: 'acc_1', name: 'Ada' })
  t.same(user?.project_ids, ['prj_1'])
  t.equal(user?.updated_at, at(60))
})

t.test('verify e-mail refuses a wrong, expired or used token', async (t) => {
  userSpec(t)
    .given(signedUp)
    .when(verify('w'.repeat(64)))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'wrong hash')
  userSpec(t)
    .given(signedUp)
    .when(verify(verification.token_hash, day))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'at expiry')
  userSpec(t)
    .given(signedUp)
    .when(verify(verification.token_hash, day + 1))
    .thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'after expiry')
  userSpec(t)
    .given(signedUp)
    .when(verify(verification.token_hash, day - 1))
    .then(
      [
        { type: 'email_verified', data: { account_id: 'acc_1', account_name: 'Ada', project_id: 'prj_1', verified_at: at(day - 1) } },
        { type: 'project_joined', data: { project_id: 'prj_1' } },
      ],
      'one second before expiry is still valid',
    )
  userSpec(t).given(verified).when(verify()).thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'already verified')
})

t.test('verify e-mail accepts only the latest issued token', async (t) => {
  const second: TokenGrant = { token_hash: 's'.repeat(64), expires_at: at(2 * day) }
  const given: UserEvent[] = [...signedUp, { type: 'verification_token_issued', data: second }]
  userSpec(t).given(given).when(verify()).thenThrows(InvalidVerificationToken, 'invalid_verification_token', 'the first token is replaced')
  userSpec(t)
    .given(given)
    .when(verify(second.token_hash, day + 60))
    .then([
      { type: 'email_verified', data: { account_id: 'acc_1', account_name: 'Ada', project_id: 'prj_1', verified_at: at(day + 60) } },
      { type: 'project_joined', data: { project_id: 'prj_1' } },
    ])
})

t.test('issue verification token: a new grant while unverified, nothing once verified', async (t) => {
  const next: TokenGrant = { token_hash: 'n'.repeat(64), expires_at: at(2 * day) }
  const user = userSpec(t)
    .given(signedUp)
    .when(cmd('issue_verification_token', { verification: next }))
    .then([{ type: 'verification_token_issued', data: next }])
  t.same(user?.verification, next)
  userSpec(t)
    .given(verified)
    .when(cmd('issue_verification_token', { verification: next }))
    .then([])
})

t.test('request password reset stores the grant', async (t) => {
  const user = userSpec(t)
    .given(verified)
    .when(cmd('request_password_reset', { reset }))
    .then([{ type: 'password_reset_requested', data: reset }])
  t.same(user?.password_reset, reset)
})

t.test('reset password with the right token before expiry, once', async (t) => {
  const user = userSpec(t)
    .given(resetRequested)
    .when(cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'scrypt$new' }, 600))
    .then([{ type: 'password_reset', data: { password_hash: 'scrypt$new', changed_at: at(600) } }])
  t.equal(user?.password_hash, 'scrypt$new')
  t.equal(user?.password_changed_at, at(600), 'sessions issued before the reset stop working')
  t.equal(user?.password_reset, null, 'the reset grant is cleared after use')
  t.equal(user?.updated_at, at(600))
  if (user === null) return
  userSpec(t)
    .givenState(user)
    .when(cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'scrypt$again' }, 700))
    .thenThrows(InvalidResetToken, 'invalid_reset_token', 'a reused token is refused')
})

t.test('reset password refuses a wrong, expired or missing token', async (t) => {
  userSpec(t)
    .given(resetRequested)
    .when(cmd('reset_password', { token_hash: 'w'.repeat(64), password_hash: 'scrypt$new' }, 60))
    .thenThrows(InvalidResetToken, 'invalid_reset_token', 'wrong hash')
  userSpec(t)
    .given(resetRequested)
    .when(cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'scrypt$new' }, hour))
    .thenThrows(InvalidResetToken, 'invalid_reset_token', 'at expiry')
  userSpec(t)
    .given(resetRequested)
    .when(cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'scrypt$new' }, 2 * hour))
    .thenThrows(InvalidResetToken, 'invalid_reset_token', 'after expiry')
  userSpec(t)
    .given(verified)
    .when(cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'scrypt$new' }, 60))
    .thenThrows(InvalidResetToken, 'invalid_reset_token', 'no reset was requested')
})

t.test('change password replaces the hash and moves password_changed_at', async (t) => {
  const user = userSpec(t)
    .given(resetRequested)
    .when(cmd('change_password', { password_hash: 'scrypt$changed' }, 300))
    .then([{ type: 'password_changed', data: { password_hash: 'scrypt$changed', changed_at: at(300) } }])
  t.equal(user?.password_hash, 'scrypt$changed')
  t.equal(user?.password_changed_at, at(300))
  t.equal(user?.password_reset, null, 'a pending reset grant does not survive a password change')
})

t.test('a password hash upgrade replaces the hash, not password_changed_at; a change in between wins', async (t) => {
  const user = userSpec(t)
    .given(verified)
    .when(cmd('upgrade_password_hash', { previous_hash: 'scrypt$old', password_hash: 'scrypt$stronger' }, 300))
    .then([{ type: 'password_rehashed', data: { password_hash: 'scrypt$stronger', rehashed_at: at(300) } }])
  t.equal(user?.password_hash, 'scrypt$stronger')
  t.equal(user?.password_changed_at, at(0), 'sessions issued before the upgrade go on')
  userSpec(t)
    .given([...verified, { type: 'password_changed', data: { password_hash: 'scrypt$changed', changed_at: at(200) } }])
    .when(cmd('upgrade_password_hash', { previous_hash: 'scrypt$old', password_hash: 'scrypt$stronger' }, 300))
    .then([], 'the hash of the old password does not replace the new one')
})

t.test('update profile emits only the fields that change', async (t) => {
  const user = userSpec(t)
    .given(verified)
    .when(cmd('update_profile', { display_name: 'Ada L.', timezone: 'UTC', locale: 'fr-FR' }))
    .then([{ type: 'profile_updated', data: { display_name: 'Ada L.', locale: 'fr-FR' } }])
  t.equal(user?.display_name, 'Ada L.')
  t.equal(user?.locale, 'fr-FR')
  t.equal(user?.timezone, 'UTC')
  if (user === null) return
  userSpec(t)
    .givenState(user)
    .when(cmd('update_profile', { display_name: 'Ada L.', locale: 'fr-FR' }))
    .then([], 'no change, no event')
  userSpec(t).givenState(user).when(cmd('update_profile', {})).then([], 'empty update, no event')
  const cleared = userSpec(t)
    .givenState(user)
    .when(cmd('update_profile', { display_name: null, timezone: 'Europe/Paris' }))
    .then([{ type: 'profile_updated', data: { display_name: null, timezone: 'Europe/Paris' } }])
  t.equal(cleared?.display_name, null, 'null clears the display name')
  t.equal(cleared?.timezone, 'Europe/Paris')
  t.equal(cleared?.locale, 'fr-FR', 'an omitted field is kept')
})

t.test('stage TOTP: a pending secret, replaceable until enabled', async (t) => {
  const user = userSpec(t)
    .given(verified)
    .when(cmd('stage_totp', { secret_encrypted: 'enc:secret-1' }))
    .then([{ type: 'totp_secret_staged', data: { secret_encrypted: 'enc:secret-1' } }])
  t.same(user?.totp, { secret_encrypted: 'enc:secret-1', enabled_at: null, last_step: 0 })
  const restaged = userSpec(t)
    .given(staged)
    .when(cmd('stage_totp', { secret_encrypted: 'enc:secret-2' }))
    .then([{ type: 'totp_secret_staged', data: { secret_encrypted: 'enc:secret-2' } }])
  t.same(restaged?.totp, { secret_encrypted: 'enc:secret-2', enabled_at: null, last_step: 0 })
  userSpec(t)
    .given(enabled)
    .when(cmd('stage_totp', { secret_encrypted: 'enc:secret-3' }))
    .thenThrows(TotpAlreadyEnabled, 'totp_already_enabled')
})

t.test('enable TOTP needs a staged secret and records the step', async (t) => {
  userSpec(t)
    .given(verified)
    .when(cmd('enable_totp', { step: 100, secret_encrypted: 'enc:secret-1' }))
    .thenThrows(TotpNotInitialized, 'totp_not_initialized')
  const user = userSpec(t)
    .given(staged)
    .when(cmd('enable_totp', { step: 100, secret_encrypted: 'enc:secret-1' }, 120))
    .then([{ type: 'two_factor_enabled', data: { enabled_at: at(120), step: 100 } }])
  t.same(user?.totp, { secret_encrypted: 'enc:secret-1', enabled_at: at(120), last_step: 100 })
  userSpec(t)
    .given(enabled)
    .when(cmd('enable_totp', { step: 101, secret_encrypted: 'enc:secret-1' }))
    .thenThrows(TotpAlreadyEnabled, 'totp_already_enabled')
})

t.test('accept TOTP step: only steps newer than the last accepted one (no replay)', async (t) => {
  userSpec(t)
    .given(enabled)
    .when(cmd('accept_totp_step', { step: 100 }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'same step')
  userSpec(t)
    .given(enabled)
    .when(cmd('accept_totp_step', { step: 99 }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'earlier step')
  const user = userSpec(t)
    .given(enabled)
    .when(cmd('accept_totp_step', { step: 101 }))
    .then([{ type: 'totp_step_accepted', data: { step: 101 } }])
  t.equal(user?.totp?.last_step, 101)
  t.equal(user?.totp?.enabled_at, at(120), 'accepting a step keeps 2FA enabled')
  if (user === null) return
  userSpec(t)
    .givenState(user)
    .when(cmd('accept_totp_step', { step: 101 }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'replay of 101')
  userSpec(t)
    .given(verified)
    .when(cmd('accept_totp_step', { step: 1 }))
    .thenThrows(TotpNotEnabled, 'totp_not_enabled', '2FA off')
  userSpec(t)
    .given(staged)
    .when(cmd('accept_totp_step', { step: 1 }))
    .thenThrows(TotpNotEnabled, 'totp_not_enabled', 'staged only')
})

t.test('use recovery code removes only that code', async (t) => {
  const user = userSpec(t)
    .given(withCodes)
    .when(cmd('use_recovery_code', { code_hash: 'c2' }))
    .then([{ type: 'recovery_code_used', data: { code_hash: 'c2' } }])
  t.same(user?.recovery_code_hashes, ['c1', 'c3'])
  if (user === null) return
  userSpec(t)
    .givenState(user)
    .when(cmd('use_recovery_code', { code_hash: 'c2' }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'a used code')
  userSpec(t)
    .given(withCodes)
    .when(cmd('use_recovery_code', { code_hash: 'zz' }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'unknown')
  userSpec(t)
    .given(verified)
    .when(cmd('use_recovery_code', { code_hash: 'c1' }))
    .thenThrows(TotpNotEnabled, 'totp_not_enabled', '2FA off')
})

t.test('regenerate recovery codes replaces the whole list', async (t) => {
  const user = userSpec(t)
    .given(withCodes)
    .when(cmd('regenerate_recovery_codes', { code_hashes: ['d1', 'd2'] }))
    .then([{ type: 'recovery_codes_regenerated', data: { code_hashes: ['d1', 'd2'] } }])
  t.same(user?.recovery_code_hashes, ['d1', 'd2'], 'earlier codes are gone')
  if (user === null) return
  userSpec(t)
    .givenState(user)
    .when(cmd('use_recovery_code', { code_hash: 'c1' }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'an old code')
  userSpec(t)
    .given(staged)
    .when(cmd('regenerate_recovery_codes', { code_hashes: ['d1'] }))
    .thenThrows(TotpNotEnabled, 'totp_not_enabled')
})

t.test('disable TOTP clears the secret and the recovery codes', async (t) => {
  const user = userSpec(t)
    .given(withCodes)
    .when(cmd('disable_totp', { step: 102 }, 300))
    .then([{ type: 'two_factor_disabled', data: { disabled_at: at(300) } }])
  t.equal(user?.totp, null)
  t.same(user?.recovery_code_hashes, [])
  t.equal(user?.updated_at, at(300))
  userSpec(t)
    .given(withCodes)
    .when(cmd('disable_totp', { step: 100 }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code', 'a replayed step')
  userSpec(t)
    .given(verified)
    .when(cmd('disable_totp', { step: 102 }))
    .thenThrows(TotpNotEnabled, 'totp_not_enabled')
  userSpec(t)
    .given(staged)
    .when(cmd('disable_totp', { step: 102 }))
    .thenThrows(TotpNotEnabled, 'totp_not_enabled', 'staged only')
  if (user === null) return
  userSpec(t)
    .givenState(user)
    .when(cmd('enable_totp', { step: 103, secret_encrypted: 'enc:secret-1' }))
    .thenThrows(TotpNotInitialized, 'totp_not_initialized', 'setup again first')
})

t.test('join and leave project are idempotent', async (t) => {
  const joined = userSpec(t)
    .given(verified)
    .when(cmd('join_project', { project_id: 'prj_2' }))
    .then([{ type: 'project_joined', data: { project_id: 'prj_2' } }])
  t.same(joined?.project_ids, ['prj_1', 'prj_2'], 'newest last')
  userSpec(t)
    .given(verified)
    .when(cmd('join_project', { project_id: 'prj_1' }))
    .then([], 'joining twice adds nothing')
  const left = userSpec(t)
    .given(verified)
    .when(cmd('leave_project', { project_id: 'prj_1' }))
    .then([{ type: 'project_left', data: { project_id: 'prj_1' } }])
  t.same(left?.project_ids, [])
  if (left === null) return
  userSpec(t)
    .givenState(left)
    .when(cmd('leave_project', { project_id: 'prj_1' }))
    .then([], 'leaving twice removes nothing')
  userSpec(t)
    .given(verified)
    .when(cmd('leave_project', { project_id: 'prj_9' }))
    .then([], 'never joined')
})

t.test('delete account: status deleted, secrets cleared, every later command refused', async (t) => {
  const user = userSpec(t)
    .given(withCodes)
    .when(cmd('delete_account', {}, 900))
    .then([{ type: 'account_deleted', data: { deleted_at: at(900) } }])
  t.equal(user?.status, 'deleted')
  t.equal(user?.updated_at, at(900))
  t.equal(user?.totp, null)
  t.same(user?.recovery_code_hashes, [])
  t.same(user?.project_ids, [])
  t.equal(user?.verification, null)
  t.equal(user?.password_reset, null)
  if (user === null) return
  const later: UserCommand[] = [
    cmd('delete_account', {}),
    cmd('issue_verification_token', { verification }),
    verify(),
    cmd('request_password_reset', { reset }),
    cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'x' }),
    cmd('change_password', { password_hash: 'x' }),
    cmd('update_profile', { display_name: 'x' }),
    cmd('stage_totp', { secret_encrypted: 'x' }),
    cmd('enable_totp', { step: 200, secret_encrypted: 'enc:secret-1' }),
    cmd('accept_totp_step', { step: 200 }),
    cmd('use_recovery_code', { code_hash: 'c1' }),
    cmd('regenerate_recovery_codes', { code_hashes: [] }),
    cmd('disable_totp', { step: 200 }),
    cmd('join_project', { project_id: 'prj_2' }),
    cmd('leave_project', { project_id: 'prj_1' }),
  ]
  for (const command of later) {
    userSpec(t).givenState(user).when(command).thenThrows(UserNotFound, 'user_not_found', `${command.type} after deletion`)
  }
})

t.test('a deleted account pending reset or verification tokens cannot be used', async (t) => {
  const deleted = stateOf([...signedUp, { type: 'password_reset_requested', data: reset }, { type: 'account_deleted', data: { deleted_at: at(30) } }])
  userSpec(t).givenState(deleted).when(verify(verification.token_hash, 60)).thenThrows(UserNotFound, 'user_not_found')
  userSpec(t)
    .givenState(deleted)
    .when(cmd('reset_password', { token_hash: reset.token_hash, password_hash: 'x' }, 60))
    .thenThrows(UserNotFound, 'user_not_found')
})

t.test('evolve on a missing state: user_signed_up builds it, any other event throws', async (t) => {
  const [created, ...later] = [...withCodes, ...resetRequested.slice(verified.length)]
  evolveOnMissingState(t, userDecider, created!, [
    ...later,
    { type: 'password_changed', data: { password_hash: 'scrypt$changed', changed_at: at(900) } },
    { type: 'session_ended', data: { session_id: 's1', expires_at: at(60 + 7 * day), ended_at: at(600) } },
    { type: 'all_sessions_ended', data: { ended_at: at(1000) } },
    { type: 'account_deleted', data: { deleted_at: at(90) } },
  ])
})

t.test('enable_totp refuses a code checked against a secret that a second setup replaced', async (t) => {
  const restaged: UserEvent[] = [...staged, { type: 'totp_secret_staged', data: { secret_encrypted: 'enc:secret-2' } }]
  userSpec(t)
    .given(restaged)
    .when(cmd('enable_totp', { step: 100, secret_encrypted: 'enc:secret-1' }))
    .thenThrows(InvalidTotpCode, 'invalid_totp_code')
})

/** Logout of the session `id`, issued at `issued` and expiring 7 days later, decided at `seconds`. */
const endSession = (id: string, seconds: number, issued = 60) =>
  cmd('end_session', { session_id: id, issued_at: at(issued), expires_at: at(issued + 7 * day) }, seconds)
const session = (id: string, issued = 60) => ({ session_id: id, issued_at_ms: Date.parse(at(issued)) })

t.test('logout ends exactly the session it names, until that session would have expired anyway', async (t) => {
  const user = userSpec(t)
    .given(verified)
    .when(endSession('s1', 600))
    .then([{ type: 'session_ended', data: { session_id: 's1', expires_at: at(60 + 7 * day), ended_at: at(600) } }])
  t.equal(isSessionLive(user!, session('s1')), false, 'the ended session is refused')
  t.equal(isSessionLive(user!, session('s2')), true, 'another session of the same user still works')
  t.equal(
    isSessionLive(user!, { session_id: null, issued_at_ms: Date.parse(at(60)) }),
    true,
    'a token without an id is judged by its issue time only',
  )

  const ended: UserEvent[] = [...verified, { type: 'session_ended', data: { session_id: 's1', expires_at: at(60 + 7 * day), ended_at: at(600) } }]
  userSpec(t).given(ended).when(endSession('s1', 700)).then([], 'ending it again changes nothing')
  userSpec(t)
    .given(verified)
    .when(endSession('s3', 8 * day, 0))
    .then([], 'an expired session needs no ending')
  const later = userSpec(t)
    .given(ended)
    .when(endSession('s4', 8 * day, 7 * day))
    .then([{ type: 'session_ended', data: { session_id: 's4', expires_at: at(14 * day), ended_at: at(8 * day) } }])
  t.strictSame(later!.ended_sessions, [{ session_id: 's4', expires_at: at(14 * day) }], 'sessions past their expiry are no longer kept')
})

t.test('logout of a session the password change already ended changes nothing; a change forgets ended sessions', async (t) => {
  const changed: UserEvent[] = [
    ...verified,
    { type: 'session_ended', data: { session_id: 's1', expires_at: at(60 + 7 * day), ended_at: at(600) } },
    { type: 'password_changed', data: { password_hash: 'scrypt$changed', changed_at: at(900) } },
  ]
  t.strictSame(stateOf(changed).ended_sessions, [], 'every ended session was issued before the change')
  userSpec(t).given(changed).when(endSession('s2', 1000)).then([], 'issued before the change')
  t.equal(isSessionLive(stateOf(changed), session('s5', 950)), true, 'a session issued after the change works')
})

t.test(`past ${maxEndedSessions} unexpired ended sessions, logout ends every session issued until then`, async (t) => {
  const many: UserEvent[] = [...verified]
  for (let i = 0; i < maxEndedSessions; i++) {
    many.push({ type: 'session_ended', data: { session_id: `s${i}`, expires_at: at(60 + 7 * day), ended_at: at(100 + i) } })
  }
  const user = userSpec(t)
    .given(many)
    .when(endSession('last', 1000))
    .then([{ type: 'all_sessions_ended', data: { ended_at: at(1000) } }])
  t.strictSame(user!.ended_sessions, [], 'the list is replaced by one instant')
  t.equal(user!.sessions_ended_before, at(1000))
  t.equal(isSessionLive(user!, session('last')), false, 'the session logging out is ended')
  t.equal(isSessionLive(user!, session('other', 500)), false, 'so is every other session issued before')
  t.equal(isSessionLive(user!, session('s0')), false, 'and those ended one by one before')
  t.equal(isSessionLive(user!, session('fresh', 1001)), true, 'a session issued afterwards works')
})

t.test('a state written before logout ended sessions (no ended_sessions field) still decides and judges, as read', async (t) => {
  const { ended_sessions: _e, sessions_ended_before: _b, ...old } = stateOf(verified)
  const read = upgradeUser(old)
  t.equal(isSessionLive(read, session('s1')), true)
  const state = userSpec(t)
    .givenState(read)
    .when(endSession('s1', 600))
    .then([{ type: 'session_ended', data: { session_id: 's1', expires_at: at(60 + 7 * day), ended_at: at(600) } }])
  t.equal(isSessionLive(state!, session('s1')), false)
})

t.test('a deleted user has no session to end', async (t) => {
  userSpec(t)
    .given([...verified, { type: 'account_deleted', data: { deleted_at: at(90) } }])
    .when(endSession('s1', 600))
    .thenThrows(UserNotFound, 'user_not_found')
})

t.test('staff status comes and goes; staff suspend others, never themselves', async (t) => {
  const spec = userSpec(t)
  const admin = spec
    .given(verified)
    .when(cmd('grant_admin', {}, 60))
    .then([{ type: 'admin_granted', data: { granted_at: at(60) } }])
  t.equal(admin!.is_admin, true)
  spec
    .given([...verified, { type: 'admin_granted', data: { granted_at: at(60) } }])
    .when(cmd('grant_admin', {}, 61))
    .then([], 'granting twice changes nothing')
  spec
    .given([...verified, { type: 'admin_granted', data: { granted_at: at(60) } }])
    .when(cmd('revoke_admin', {}, 90))
    .then([{ type: 'admin_revoked', data: { revoked_at: at(90) } }])
  spec
    .given(verified)
    .when(cmd('suspend_user', { staff_user_id: 'usr_staff' }, 90))
    .then([{ type: 'user_suspended', data: { suspended_at: at(90), by_staff: 'usr_staff' } }])
  spec
    .given(verified)
    .when(cmd('suspend_user', {}, 90))
    .then([{ type: 'user_suspended', data: { suspended_at: at(90) } }], 'the operator')
  spec
    .given(verified)
    .when(cmd('suspend_user', { staff_user_id: 'usr_1' }, 90))
    .thenThrows(InvalidState, 'invalid_state', 'oneself')
})
