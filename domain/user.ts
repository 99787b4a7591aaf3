import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import {
  InvalidResetToken,
  InvalidState,
  InvalidTotpCode,
  InvalidVerificationToken,
  SecurityNoticesRequired,
  TotpAlreadyEnabled,
  TotpNotEnabled,
  TotpNotInitialized,
  UserAlreadyExists,
  UserNotFound,
} from './errors.ts'
import type { SignupPlan } from './project/index.ts'

/**
 * A dashboard user and the account that verifying their address opens. Secrets never reach
 * this module in plaintext: passwords arrive as KDF hashes, tokens and recovery codes as SHA-256
 * digests, the TOTP secret encrypted. What needs a secret to decide (does this password match,
 * which time step does this code belong to) is worked out at the edge; the aggregate keeps the
 * rules that need only state: single use, expiry, step replay, what 2FA state allows.
 */

/** A single-use token, kept as its digest, with its end of life. */
export interface TokenGrant {
  token_hash: string
  expires_at: string
}

export interface TotpState {
  secret_encrypted: string
  /** Null while set up but not yet confirmed with a code. */
  enabled_at: string | null
  /** Highest time step accepted so far; a code of this step or earlier is refused (no replay). */
  last_step: number
}

/** A session (a JWT's `jti`) ended by logout before its own expiry. */
export interface EndedSession {
  session_id: string
  expires_at: string
}

/**
 * Ended sessions kept per user at most. Logging out while this many are still unexpired ends
 * every session issued until then instead (`all_sessions_ended`), so the state stays small
 * however often a user logs in and out within a token's lifetime.
 */
export const maxEndedSessions = 100

/** The kinds of e-mail a user chooses to get or not. */
export const notificationTopics = ['security_notices', 'allowance_warnings', 'overage_charges', 'alert_emails', 'product_news'] as const
export type NotificationTopic = (typeof notificationTopics)[number]
export type NotificationPreferences = Record<NotificationTopic, boolean>

/**
 * Product news is opt-in (marketing mail needs consent); the service's own notices start on.
 * Security notices cannot be turned off at all.
 */
export const defaultNotificationPreferences: Readonly<NotificationPreferences> = {
  security_notices: true,
  allowance_warnings: true,
  overage_charges: true,
  alert_emails: true,
  product_news: false,
}

/** What the e-mail provider reported about the user's address: it refuses mail, or its owner complained. */
export interface UndeliverableAddress {
  reason: 'hard_bounce' | 'complaint'
  /** When the provider saw it (its report's timestamp). */
  reported_at: string
}

/**
 * Devices (digests of where a login came from) remembered per user; a login from any other is
 * a new sign-in. The oldest is forgotten first.
 */
export const maxKnownDevices = 20

export interface User {
  id: string
  email: string
  password_hash: string
  /** Sessions issued before this instant are no longer accepted. */
  password_changed_at: string
  /** Sessions ended by logout that have not expired yet. */
  ended_sessions: EndedSession[]
  /** Sessions issued before this instant were ended all at once (see maxEndedSessions). */
  sessions_ended_before: string | null
  plan: SignupPlan
  status: 'active' | 'suspended' | 'deleted'
  created_at: string
  updated_at: string
  terms_accepted_at: string
  email_verified_at: string | null
  display_name: string | null
  timezone: string
  locale: string
  is_admin: boolean
  account: { id: string; name: string } | null
  verification: TokenGrant | null
  password_reset: TokenGrant | null
  totp: TotpState | null
  recovery_code_hashes: string[]
  /**
   * Projects this user joined, newest last. An index for listing, written after the project's
   * own membership change; the project aggregate is the truth and listings check it.
   */
  project_ids: string[]
  /** The topics turned on or off; absent ones keep their default (see notificationPreferencesOf). */
  notifications: Partial<NotificationPreferences>
  /** Set while the provider reports the current address undeliverable; null otherwise. */
  email_undeliverable: UndeliverableAddress | null
  /** The last time the user proved the address receives mail again; older reports are stale. */
  email_reverified_at: string | null
  /** Devices seen at login, newest last. */
  known_devices: string[]
}

/** The fields added to the user's state after its first release, absent from the states written before each. */
type AddedField = 'ended_sessions' | 'sessions_ended_before' | 'notifications' | 'email_undeliverable' | 'email_reverified_at' | 'known_devices'

/** A user's state as any message stored it. */
export type StoredUser = Omit<User, AddedField> & Partial<Pick<User, AddedField>>

/**
 * The user's state as a message stored it, in today's form: a state written before a field was
 * added gets the value it meant (no session ended, every notification at its default, the address
 * never reported nor re-verified, no device seen). Applied wherever a message is decoded
 * (streams/stored-forms.ts).
 */
export function upgradeUser(stored: StoredUser): User {
  return {
    ...stored,
    ended_sessions: stored.ended_sessions ?? [],
    sessions_ended_before: stored.sessions_ended_before ?? null,
    notifications: stored.notifications ?? {},
    email_undeliverable: stored.email_undeliverable ?? null,
    email_reverified_at: stored.email_reverified_at ?? null,
    known_devices: stored.known_devices ?? [],
  }
}

export type UserAggregate = User | null

export type UserEvent =
  | {
      type: 'user_signed_up'
      data: { user_id: string; email: string; password_hash: string; plan: SignupPlan; created_at: string }
    }
  | { type: 'terms_accepted'; data: { accepted_at: string } }
  | { type: 'verification_token_issued'; data: TokenGrant }
  | {
      type: 'email_verified'
      /** `project_id` null: an operator opened the account (command line) without a first project. */
      data: { account_id: string; account_name: string; project_id: string | null; verified_at: string }
    }
  /** `by_staff`: the staff member who acted (absent when the operator did, on the command line). */
  | { type: 'user_suspended'; data: { suspended_at: string; by_staff?: string } }
  | { type: 'user_reinstated'; data: { reinstated_at: string; by_staff?: string } }
  /** Staff status, given and taken only by the operator (command line). */
  | { type: 'admin_granted'; data: { granted_at: string } }
  | { type: 'admin_revoked'; data: { revoked_at: string } }
  | { type: 'password_reset_requested'; data: TokenGrant }
  | { type: 'password_reset'; data: { password_hash: string; changed_at: string } }
  | { type: 'password_changed'; data: { password_hash: string; changed_at: string } }
  /** The same password hashed again with stronger parameters: sessions are not affected. */
  | { type: 'password_rehashed'; data: { password_hash: string; rehashed_at: string } }
  | { type: 'profile_updated'; data: { display_name?: string | null; timezone?: string; locale?: string } }
  | { type: 'session_ended'; data: EndedSession & { ended_at: string } }
  | { type: 'all_sessions_ended'; data: { ended_at: string } }
  | { type: 'totp_secret_staged'; data: { secret_encrypted: string } }
  | { type: 'two_factor_enabled'; data: { enabled_at: string; step: number } }
  | { type: 'totp_step_accepted'; data: { step: number } }
  | { type: 'recovery_codes_regenerated'; data: { code_hashes: string[] } }
  | { type: 'recovery_code_used'; data: { code_hash: string } }
  | { type: 'two_factor_disabled'; data: { disabled_at: string } }
  | { type: 'project_joined'; data: { project_id: string } }
  | { type: 'project_left'; data: { project_id: string } }
  | { type: 'account_deleted'; data: { deleted_at: string } }
  | { type: 'notification_preferences_updated'; data: Partial<NotificationPreferences> }
  | { type: 'email_marked_undeliverable'; data: UndeliverableAddress & { email: string; marked_at: string } }
  | { type: 'email_reverified'; data: { email: string; reverified_at: string } }
  /** `first_device`: the first login ever recorded, which nothing earlier can be compared with. */
  | { type: 'new_device_signed_in'; data: { device_id: string; first_device: boolean; signed_in_at: string } }

export type UserEventType = UserEvent['type']

type Command<T extends string, D> = { type: T; data: D; meta: CommandMeta }

export type UserCommand =
  | Command<'sign_up', { user_id: string; email: string; password_hash: string; plan: SignupPlan; verification: TokenGrant }>
  | Command<'issue_verification_token', { verification: TokenGrant }>
  | Command<'verify_email', { token_hash: string; account_id: string; account_name: string; project_id: string }>
  | Command<'open_account_by_operator', { account_id: string; account_name: string }>
  /** `staff_user_id`: the staff member acting; absent for the operator. */
  | Command<'suspend_user', { staff_user_id?: string }>
  | Command<'reinstate_user', { staff_user_id?: string }>
  | Command<'grant_admin', Record<string, never>>
  | Command<'revoke_admin', Record<string, never>>
  | Command<'request_password_reset', { reset: TokenGrant }>
  | Command<'reset_password', { token_hash: string; password_hash: string }>
  | Command<'change_password', { password_hash: string }>
  /** `previous_hash`: the hash the password was verified against; a change since then wins. */
  | Command<'upgrade_password_hash', { previous_hash: string; password_hash: string }>
  | Command<'update_profile', { display_name?: string | null; timezone?: string; locale?: string }>
  /** Logout: `issued_at` is the session's own issue instant (its JWT's). */
  | Command<'end_session', EndedSession & { issued_at: string }>
  | Command<'stage_totp', { secret_encrypted: string }>
  /** `secret_encrypted`: the staged secret the code was checked against (a setup in between makes it stale). */
  | Command<'enable_totp', { step: number; secret_encrypted: string }>
  | Command<'accept_totp_step', { step: number }>
  | Command<'use_recovery_code', { code_hash: string }>
  | Command<'regenerate_recovery_codes', { code_hashes: string[] }>
  | Command<'disable_totp', { step: number }>
  | Command<'join_project', { project_id: string }>
  | Command<'leave_project', { project_id: string }>
  | Command<'delete_account', Record<string, never>>
  | Command<'update_notification_preferences', Partial<NotificationPreferences>>
  /** `email`: the address the provider reported; a report about an address the user no longer has changes nothing. */
  | Command<'mark_email_undeliverable', UndeliverableAddress & { email: string }>
  /** A fresh token for a verified user to prove the address receives mail again. */
  | Command<'issue_reverification_token', { verification: TokenGrant }>
  | Command<'reverify_email', { token_hash: string }>
  | Command<'record_sign_in', { device_id: string }>

const isLive = (grant: TokenGrant | null, tokenHash: string, now: string): boolean =>
  grant !== null && grant.token_hash === tokenHash && Date.parse(grant.expires_at) > Date.parse(now)

function requireUser(state: UserAggregate): User {
  if (state === null || state.status === 'deleted') throw new UserNotFound('the user was not found')
  return state
}

function requireEnabledTotp(user: User): TotpState {
  if (user.totp === null || user.totp.enabled_at === null) throw new TotpNotEnabled('two-factor authentication is not enabled')
  return user.totp
}

/** A code's step must be newer than every step accepted before (RFC 6238 §5.2). */
function requireFreshStep(totp: TotpState, step: number): void {
  if (step <= totp.last_step) throw new InvalidTotpCode('this code was already used')
}

/**
 * False for a session that logout, a password change or reset, or an end of every session has
 * ended. The token's signature and expiry are checked at the edge; this is what only the
 * user's state can say.
 */
export function isSessionLive(user: User, session: { session_id: string | null; issued_at_ms: number }): boolean {
  if (session.issued_at_ms < Date.parse(user.password_changed_at)) return false
  if (user.sessions_ended_before && session.issued_at_ms < Date.parse(user.sessions_ended_before)) return false
  return session.session_id === null || !user.ended_sessions.some((s) => s.session_id === session.session_id)
}

export function notificationPreferencesOf(user: User): NotificationPreferences {
  return { ...defaultNotificationPreferences, ...user.notifications, security_notices: true }
}

/** `account`: mail the user asked for or needs to act (a reset link, an invitation); no preference turns it off. */
export type MailTopic = NotificationTopic | 'account'

/**
 * Whether the service may e-mail `user` about `topic`, or why not. An undeliverable address gets
 * nothing, security notices included: sending on would only bounce again (or reach someone who
 * complained), and providers suspend senders who keep doing it.
 */
export function mailVerdict(user: User, topic: MailTopic): 'send' | 'turned_off' | 'undeliverable' {
  if (user.email_undeliverable) return 'undeliverable'
  if (topic !== 'account' && !notificationPreferencesOf(user)[topic]) return 'turned_off'
  return 'send'
}

const unexpired = (sessions: readonly EndedSession[], now: string) => sessions.filter((s) => Date.parse(s.expires_at) > Date.parse(now))

function decide(command: UserCommand, state: UserAggregate): UserEvent[] {
  const { now } = command.meta
  if (command.type === 'sign_up') {
    // A deleted user's id is never reused; a new sign-up with the same address gets a new id.
    if (state !== null) throw new UserAlreadyExists('a user with this id already exists')
    const d = command.data
    return [
      { type: 'user_signed_up', data: { user_id: d.user_id, email: d.email, password_hash: d.password_hash, plan: d.plan, created_at: now } },
      { type: 'terms_accepted', data: { accepted_at: now } },
      { type: 'verification_token_issued', data: d.verification },
    ]
  }
  const user = requireUser(state)
  switch (command.type) {
    case 'issue_verification_token':
      // Verified addresses get nothing new; the answer to the caller is the same either way.
      return user.email_verified_at !== null ? [] : [{ type: 'verification_token_issued', data: command.data.verification }]
    case 'verify_email': {
      if (user.email_verified_at !== null || !isLive(user.verification, command.data.token_hash, now)) {
        throw new InvalidVerificationToken('the verification token is invalid, used or expired')
      }
      const { account_id, account_name, project_id } = command.data
      return [
        { type: 'email_verified', data: { account_id, account_name, project_id, verified_at: now } },
        { type: 'project_joined', data: { project_id } },
      ]
    }
    case 'open_account_by_operator':
      if (user.email_verified_at !== null) return []
      return [{ type: 'email_verified', data: { ...command.data, project_id: null, verified_at: now } }]
    case 'suspend_user': {
      const by = command.data.staff_user_id
      // A staff member locked out by their own hand would need the operator to get back in.
      if (by === user.id) throw new InvalidState('staff cannot suspend themselves')
      return user.status === 'suspended' ? [] : [{ type: 'user_suspended', data: { suspended_at: now, ...(by ? { by_staff: by } : {}) } }]
    }
    case 'reinstate_user': {
      const by = command.data.staff_user_id
      return user.status === 'active' ? [] : [{ type: 'user_reinstated', data: { reinstated_at: now, ...(by ? { by_staff: by } : {}) } }]
    }
    case 'grant_admin':
      return user.is_admin ? [] : [{ type: 'admin_granted', data: { granted_at: now } }]
    case 'revoke_admin':
      return user.is_admin ? [{ type: 'admin_revoked', data: { revoked_at: now } }] : []
    case 'request_password_reset':
      return [{ type: 'password_reset_requested', data: command.data.reset }]
    case 'reset_password':
      if (!isLive(user.password_reset, command.data.token_hash, now)) {
        throw new InvalidResetToken('the reset token is invalid, used or expired')
      }
      return [{ type: 'password_reset', data: { password_hash: command.data.password_hash, changed_at: now } }]
    case 'change_password':
      return [{ type: 'password_changed', data: { password_hash: command.data.password_hash, changed_at: now } }]
    case 'upgrade_password_hash':
      if (user.password_hash !== command.data.previous_hash) return []
      return [{ type: 'password_rehashed', data: { password_hash: command.data.password_hash, rehashed_at: now } }]
    case 'update_profile': {
      const changes: Extract<UserEvent, { type: 'profile_updated' }>['data'] = {}
      const d = command.data
      if (d.display_name !== undefined && d.display_name !== user.display_name) changes.display_name = d.display_name
      if (d.timezone !== undefined && d.timezone !== user.timezone) changes.timezone = d.timezone
      if (d.locale !== undefined && d.locale !== user.locale) changes.locale = d.locale
      return Object.keys(changes).length === 0 ? [] : [{ type: 'profile_updated', data: changes }]
    }
    case 'end_session': {
      const { session_id, expires_at, issued_at } = command.data
      // Ending a session that has already ended, or expired, changes nothing (logout is idempotent).
      if (Date.parse(expires_at) <= Date.parse(now) || !isSessionLive(user, { session_id, issued_at_ms: Date.parse(issued_at) })) return []
      if (unexpired(user.ended_sessions, now).length >= maxEndedSessions) return [{ type: 'all_sessions_ended', data: { ended_at: now } }]
      return [{ type: 'session_ended', data: { session_id, expires_at, ended_at: now } }]
    }
    case 'stage_totp':
      if (user.totp?.enabled_at) throw new TotpAlreadyEnabled('two-factor authentication is already enabled')
      return [{ type: 'totp_secret_staged', data: command.data }]
    case 'enable_totp':
      if (user.totp?.enabled_at) throw new TotpAlreadyEnabled('two-factor authentication is already enabled')
      if (user.totp === null) throw new TotpNotInitialized('call 2fa/setup first')
      if (user.totp.secret_encrypted !== command.data.secret_encrypted)
        throw new InvalidTotpCode('2fa/setup ran again meanwhile; use the newest secret')
      requireFreshStep(user.totp, command.data.step)
      return [{ type: 'two_factor_enabled', data: { enabled_at: now, step: command.data.step } }]
    case 'accept_totp_step':
      requireFreshStep(requireEnabledTotp(user), command.data.step)
      return [{ type: 'totp_step_accepted', data: { step: command.data.step } }]
    case 'use_recovery_code':
      requireEnabledTotp(user)
      if (!user.recovery_code_hashes.includes(command.data.code_hash)) throw new InvalidTotpCode('the recovery code is invalid or used')
      return [{ type: 'recovery_code_used', data: command.data }]
    case 'regenerate_recovery_codes':
      requireEnabledTotp(user)
      return [{ type: 'recovery_codes_regenerated', data: command.data }]
    case 'disable_totp':
      requireFreshStep(requireEnabledTotp(user), command.data.step)
      return [{ type: 'two_factor_disabled', data: { disabled_at: now } }]
    case 'join_project':
      return user.project_ids.includes(command.data.project_id) ? [] : [{ type: 'project_joined', data: command.data }]
    case 'leave_project':
      return user.project_ids.includes(command.data.project_id) ? [{ type: 'project_left', data: command.data }] : []
    case 'delete_account':
      return [{ type: 'account_deleted', data: { deleted_at: now } }]
    case 'update_notification_preferences': {
      if (command.data.security_notices === false) throw new SecurityNoticesRequired('security notices cannot be turned off')
      const current = notificationPreferencesOf(user)
      const changes = Object.fromEntries(
        notificationTopics
          .filter((topic) => command.data[topic] !== undefined && command.data[topic] !== current[topic])
          .map((t) => [t, command.data[t]]),
      )
      return Object.keys(changes).length === 0 ? [] : [{ type: 'notification_preferences_updated', data: changes }]
    }
    case 'mark_email_undeliverable': {
      const { email, reason, reported_at } = command.data
      const isCurrentAddress = email.toLowerCase() === user.email.toLowerCase()
      const isStale = user.email_reverified_at != null && Date.parse(reported_at) <= Date.parse(user.email_reverified_at)
      if (!isCurrentAddress || isStale || user.email_undeliverable) return []
      return [{ type: 'email_marked_undeliverable', data: { email: user.email, reason, reported_at, marked_at: now } }]
    }
    case 'issue_reverification_token':
      if (user.email_verified_at === null) throw new InvalidVerificationToken('the address was never verified: verify it first')
      return [{ type: 'verification_token_issued', data: command.data.verification }]
    case 'reverify_email':
      if (user.email_verified_at === null || !isLive(user.verification, command.data.token_hash, now)) {
        throw new InvalidVerificationToken('the verification token is invalid, used or expired')
      }
      return [{ type: 'email_reverified', data: { email: user.email, reverified_at: now } }]
    case 'record_sign_in': {
      const known = user.known_devices
      if (known.includes(command.data.device_id)) return []
      return [{ type: 'new_device_signed_in', data: { device_id: command.data.device_id, first_device: known.length === 0, signed_in_at: now } }]
    }
  }
}

function evolve(state: UserAggregate, event: UserEvent): UserAggregate {
  if (event.type === 'user_signed_up') {
    const d = event.data
    return {
      id: d.user_id,
      email: d.email,
      password_hash: d.password_hash,
      password_changed_at: d.created_at,
      ended_sessions: [],
      sessions_ended_before: null,
      plan: d.plan,
      status: 'active',
      created_at: d.created_at,
      updated_at: d.created_at,
      terms_accepted_at: d.created_at,
      email_verified_at: null,
      display_name: null,
      timezone: 'UTC',
      locale: 'en-US',
      is_admin: false,
      account: null,
      verification: null,
      password_reset: null,
      totp: null,
      recovery_code_hashes: [],
      project_ids: [],
      notifications: {},
      email_undeliverable: null,
      email_reverified_at: null,
      known_devices: [],
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'user_signed_up')
  switch (event.type) {
    case 'terms_accepted':
      return { ...state, terms_accepted_at: event.data.accepted_at }
    case 'verification_token_issued':
      return { ...state, verification: event.data }
    case 'email_verified':
      return {
        ...state,
        email_verified_at: event.data.verified_at,
        verification: null,
        account: { id: event.data.account_id, name: event.data.account_name },
        updated_at: event.data.verified_at,
      }
    case 'user_suspended':
      return { ...state, status: 'suspended', updated_at: event.data.suspended_at }
    case 'user_reinstated':
      return { ...state, status: 'active', updated_at: event.data.reinstated_at }
    case 'admin_granted':
      return { ...state, is_admin: true, updated_at: event.data.granted_at }
    case 'admin_revoked':
      return { ...state, is_admin: false, updated_at: event.data.revoked_at }
    case 'password_reset_requested':
      return { ...state, password_reset: event.data }
    case 'password_reset':
    case 'password_changed':
      return {
        ...state,
        password_hash: event.data.password_hash,
        password_changed_at: event.data.changed_at,
        // Every ended session was issued before the change, which now refuses it on its own.
        ended_sessions: [],
        password_reset: null,
        updated_at: event.data.changed_at,
      }
    case 'password_rehashed':
      return { ...state, password_hash: event.data.password_hash }
    case 'profile_updated':
      return { ...state, ...event.data }
    case 'session_ended': {
      const { session_id, expires_at, ended_at } = event.data
      // Sessions past their expiry are refused on their own; only the live ones need keeping.
      return { ...state, ended_sessions: [...unexpired(state.ended_sessions, ended_at), { session_id, expires_at }] }
    }
    case 'all_sessions_ended':
      return { ...state, ended_sessions: [], sessions_ended_before: event.data.ended_at }
    case 'totp_secret_staged':
      return { ...state, totp: { secret_encrypted: event.data.secret_encrypted, enabled_at: null, last_step: 0 } }
    case 'two_factor_enabled':
      return { ...state, totp: { ...state.totp!, enabled_at: event.data.enabled_at, last_step: event.data.step } }
    case 'totp_step_accepted':
      return { ...state, totp: { ...state.totp!, last_step: event.data.step } }
    case 'recovery_codes_regenerated':
      return { ...state, recovery_code_hashes: event.data.code_hashes }
    case 'recovery_code_used':
      return { ...state, recovery_code_hashes: state.recovery_code_hashes.filter((h) => h !== event.data.code_hash) }
    case 'two_factor_disabled':
      return { ...state, totp: null, recovery_code_hashes: [], updated_at: event.data.disabled_at }
    case 'project_joined':
      return { ...state, project_ids: [...state.project_ids, event.data.project_id] }
    case 'project_left':
      return { ...state, project_ids: state.project_ids.filter((id) => id !== event.data.project_id) }
    case 'account_deleted':
      return {
        ...state,
        status: 'deleted',
        updated_at: event.data.deleted_at,
        verification: null,
        password_reset: null,
        totp: null,
        recovery_code_hashes: [],
        project_ids: [],
      }
    case 'notification_preferences_updated':
      return { ...state, notifications: { ...state.notifications, ...event.data } }
    case 'email_marked_undeliverable':
      return { ...state, email_undeliverable: { reason: event.data.reason, reported_at: event.data.reported_at } }
    case 'email_reverified':
      return { ...state, email_undeliverable: null, email_reverified_at: event.data.reverified_at, verification: null }
    case 'new_device_signed_in':
      return { ...state, known_devices: [...state.known_devices, event.data.device_id].slice(-maxKnownDevices) }
  }
}

export const userDecider: Decider<UserCommand, UserEvent, UserAggregate> = { initialState: null, decide, evolve }
