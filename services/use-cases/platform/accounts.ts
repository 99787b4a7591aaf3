import {
  InvalidResetToken,
  InvalidTotpCode,
  InvalidVerificationToken,
  TotpAlreadyEnabled,
  TotpNotEnabled,
  TotpNotInitialized,
  UserNotFound,
} from '../../../domain/errors.ts'
import { activeKeyPrefix, type Project, type SignupPlan } from '../../../domain/project/index.ts'
import {
  userDecider,
  type MailTopic,
  type NotificationPreferences,
  type TokenGrant,
  type UndeliverableAddress,
  type User,
  type UserCommand,
  type UserEvent,
} from '../../../domain/user.ts'
import type { CommandResult, Ref } from '../../../streams/aggregate-handler.ts'
import { emailClaimHandler, projectHandler, userHandler } from '../../../streams/aggregates.ts'
import { createProject, deleteProjectAsOperator } from '../projects/project-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { AuthLimits } from './auth-limits.ts'
import { passwordResetMail, reverificationMail, securityNoticeMail, tokenLink, verificationMail, type Mail } from '../../infrastructure/mailer.ts'
import { decoyPasswordHash, hashPassword, needsRehash, scryptRuns, verifyPassword } from './passwords.ts'
import { decryptAtRest, deriveKey, encryptAtRest, randomSecret, sha256Hex } from '../../infrastructure/secrets.ts'
import { SessionIssuer } from './sessions.ts'
import { hashRecoveryCode, newRecoveryCodes, newTotpSecret, otpauthUri, stepOfCode } from './totp.ts'
import { mailUser } from './user-mail.ts'

export const verificationTtlMs = 24 * 60 * 60 * 1000
export const passwordResetTtlMs = 60 * 60 * 1000

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase()
}

/** The claim's id is a digest: addresses hold characters a subject token cannot. */
export function emailRef(email: string): Ref<'email'> {
  return emailClaimHandler.ref(sha256Hex(normalizeEmail(email)).slice(0, 40))
}

const userIdPattern = /^usr_[0-9a-z]{26}$/

export function isUserId(id: string): boolean {
  return userIdPattern.test(id)
}

/** E-mailed tokens are `<user id>.<secret>`: the id finds the aggregate, the secret's digest is checked there. */
function newUserToken(userId: string, ttlMs: number, now: Date): { token: string; grant: TokenGrant } {
  const token = `${userId}.${randomSecret()}`
  return { token, grant: { token_hash: sha256Hex(token), expires_at: new Date(now.getTime() + ttlMs).toISOString() } }
}

function userIdOfToken(token: string): string | null {
  const userId = token.split('.')[0] ?? ''
  return userIdPattern.test(userId) ? userId : null
}

export interface ProjectSummary {
  id: string
  name: string
  plan: string
  api_key_prefix: string | null
}

export interface Profile {
  user_id: string
  email: string
  email_verified: boolean
  created_at: string
  is_admin: boolean
  display_name: string | null
  timezone: string
  locale: string
  totp_enabled: boolean
  /** Set while the e-mail provider reports the address undeliverable: nothing is sent to it. */
  email_undeliverable: UndeliverableAddress | null
  account: { id: string; name: string }
  products: Array<{ product_slug: string; enabled: boolean; plan: string }>
  projects: ProjectSummary[]
}

/** Where a login came from: a login from a pair the user has not used lately is a new sign-in. */
export interface LoginDevice {
  ip: string
  userAgent: string
}

export interface LoginResult {
  user: User
  session: string
  recoveryCodeUsed: boolean
  projects: ProjectSummary[]
}

/** Why a login was refused, for the edge to turn into the spec's statuses. */
export class LoginRefused extends Error {
  constructor(
    readonly reason: 'invalid_credentials' | 'invalid_totp_code' | 'email_not_verified' | 'totp_required' | 'account_suspended' | 'account_locked',
    readonly retryAfterMs = 0,
  ) {
    super(reason)
    this.name = 'LoginRefused'
  }
}

/**
 * The user's TOTP secret was sealed under another JOBSVC_SECRET than this process holds (the
 * secret was changed or lost), so no code can be checked against it. A pending secret (set up,
 * not yet verified) is mended by setting up again; an enabled one is not.
 */
export class TotpSecretUnreadable extends Error {
  readonly pending: boolean
  constructor(options: { cause: unknown; pending: boolean }) {
    super('the two-factor secret cannot be decrypted with this JOBSVC_SECRET', options)
    this.name = 'TotpSecretUnreadable'
    this.pending = options.pending
  }
}

export class WrongPassword extends Error {
  constructor() {
    super('the password is wrong')
    this.name = 'WrongPassword'
  }
}

/**
 * Sign-up, verification, login, passwords, profile and two-factor: every change a command on
 * the user aggregate (or the e-mail claim), every read a direct get of the log, so a login right
 * after a verification never waits for a projection.
 */
export class AccountService {
  readonly #deps: Deps
  readonly limits: AuthLimits
  readonly sessions: SessionIssuer
  readonly #totpKey: Uint8Array

  constructor(deps: Deps) {
    this.#deps = deps
    this.limits = new AuthLimits(deps.authLimits)
    this.sessions = new SessionIssuer(deps.config.secret)
    this.#totpKey = deriveKey(deps.config.secret, 'totp-at-rest')
    scryptRuns.max = deps.config.tunables.password_hashes_in_flight
  }

  #meta() {
    return { now: this.#deps.now().toISOString() }
  }

  #onUser(userId: string, command: UserCommand): Promise<CommandResult<UserEvent, User>> {
    return userHandler.decide(this.#deps, userHandler.ref(userId), command)
  }

  async loadUser(userId: string): Promise<User | null> {
    const user = (await userHandler.load(this.#deps.store, userHandler.ref(userId))).state
    return user === null || user.status === 'deleted' ? null : user
  }

  async findUserByEmail(email: string): Promise<User | null> {
    const claim = (await emailClaimHandler.load(this.#deps.store, emailRef(email))).state
    return claim?.user_id ? this.loadUser(claim.user_id) : null
  }

  publicUrl(): string {
    const { publicUrl, host, port } = this.#deps.config
    return publicUrl ?? `http://${host.includes(':') ? `[${host}]` : host}:${port}`
  }

  /**
   * Verification links go out whatever the address's state: proving that it receives mail is
   * how an undeliverable address is cleared. A failed delivery must not fail the request (the
   * user can ask again); it is logged.
   */
  async sendMail(mail: Mail): Promise<void> {
    try {
      await this.#deps.mailer.send(mail)
    } catch (err) {
      this.#deps.log.error({ err, subject: mail.subject }, 'e-mail could not be sent')
    }
  }

  /** Every other e-mail to a user honours their preferences and address (user-mail.ts); a failed delivery is logged. */
  async mailUser(user: User, topic: MailTopic, mail: Mail): Promise<void> {
    try {
      await mailUser(this.#deps, user, topic, mail)
    } catch (err) {
      this.#deps.log.error({ err, user_id: user.id, subject: mail.subject }, 'e-mail could not be sent')
    }
  }

  /** An e-mail to an address that may or may not be a user's (an invitation): a user's preferences and address state hold. */
  async mailAddress(topic: MailTopic, mail: Mail): Promise<void> {
    const user = await this.findUserByEmail(mail.to)
    await (user === null ? this.sendMail(mail) : this.mailUser(user, topic, mail))
  }

  /** `what`: a sentence without its full stop ("Your password was changed"); `detail`: what the request tells (securityNoticeMail). */
  async sendSecurityNotice(user: User, what: string, detail?: string): Promise<void> {
    await this.mailUser(user, 'security_notices', securityNoticeMail(user.email, what, this.#deps.now().toISOString(), detail))
  }

  async signUp(input: { email: string; password: string; plan: SignupPlan }): Promise<User> {
    const email = normalizeEmail(input.email)
    const { user, verificationToken } = await this.#createUser(email, input.password, input.plan)
    await this.sendMail(verificationMail(email, tokenLink(this.publicUrl(), '/verify', verificationToken)))
    return user
  }

  async #createUser(email: string, password: string, plan: SignupPlan): Promise<{ user: User; verificationToken: string }> {
    const passwordHash = await hashPassword(password)
    const userId = `usr_${this.#deps.newUlid().toLowerCase()}`
    // The claim comes first: it is the uniqueness check. A claim whose user never got written
    // (a crash between the two appends) names a holder that does not exist, and is taken over.
    const ref = emailRef(email)
    const holder = (await emailClaimHandler.load(this.#deps.store, ref)).state?.user_id ?? null
    const goneHolder = holder !== null && (await this.loadUser(holder)) === null ? holder : null
    await emailClaimHandler.decide(this.#deps, ref, {
      type: 'claim_email',
      data: { user_id: userId, gone_holder: goneHolder },
      meta: this.#meta(),
    })
    const { token, grant } = newUserToken(userId, verificationTtlMs, this.#deps.now())
    const result = await this.#onUser(userId, {
      type: 'sign_up',
      data: { user_id: userId, email, password_hash: passwordHash, plan, verification: grant },
      meta: this.#meta(),
    })
    return { user: result.state!, verificationToken: token }
  }

  /**
   * Opens the account: the first project and its key are created before the token is spent, so
   * a crash in between leaves the token usable; a verification that loses a race deletes the
   * project it made.
   */
  async verifyEmail(token: string): Promise<{ user: User; project: Project; apiKey: string }> {
    const userId = userIdOfToken(token)
    const user = userId === null ? null : await this.loadUser(userId)
    if (userId === null || user === null) throw new InvalidVerificationToken('the verification token is invalid, used or expired')
    const tokenHash = sha256Hex(token)
    const accountId = `acct_${this.#deps.newUlid().toLowerCase()}`
    const dryRun = {
      type: 'verify_email' as const,
      data: { token_hash: tokenHash, account_id: accountId, account_name: user.email, project_id: 'prj_dry_run' },
      meta: this.#meta(),
    }
    userDecider.decide(dryRun, user)
    const { project, apiKey } = await createProject(this.#deps, {
      name: 'My first project',
      plan: user.plan,
      ownerEmail: user.email,
      ownerUserId: user.id,
      keyEnvironment: 'live',
    })
    try {
      const result = await this.#onUser(userId, { ...dryRun, data: { ...dryRun.data, project_id: project.id } })
      return { user: result.state!, project, apiKey }
    } catch (err) {
      await deleteProjectAsOperator(this.#deps, project.id).catch(() => undefined)
      throw err
    }
  }

  /**
   * The operator's way in (`cli project create --email`): the user with this address, created
   * verified if there is none. Its password is random and unknown; the owner sets one through
   * "forgot password".
   */
  async ensureVerifiedUser(email: string, plan: SignupPlan): Promise<User> {
    const existing = await this.findUserByEmail(email)
    const user = existing ?? (await this.#createUser(normalizeEmail(email), randomSecret(), plan)).user
    const result = await this.#onUser(user.id, {
      type: 'open_account_by_operator',
      data: { account_id: user.account?.id ?? `acct_${this.#deps.newUlid().toLowerCase()}`, account_name: user.email },
      meta: this.#meta(),
    })
    return result.state!
  }

  /** Operator actions (command line): a suspended user cannot log in; sessions end at once. */
  async setSuspended(email: string, suspended: boolean): Promise<User> {
    const user = await this.findUserByEmail(email)
    if (user === null) throw new UserNotFound(`no user has the address ${email}`)
    const result = await this.#onUser(user.id, { type: suspended ? 'suspend_user' : 'reinstate_user', data: {}, meta: this.#meta() })
    return result.state!
  }

  /** Staff status: given and taken only by the operator (command line), never through the API. */
  async setAdmin(email: string, admin: boolean): Promise<User> {
    const user = await this.findUserByEmail(email)
    if (user === null) throw new UserNotFound(`no user has the address ${email}`)
    const result = await this.#onUser(user.id, { type: admin ? 'grant_admin' : 'revoke_admin', data: {}, meta: this.#meta() })
    return result.state!
  }

  /** A staff member's suspension or reinstatement (the admin routes), recorded with who acted. */
  async setSuspendedByStaff(staff: User, userId: string, suspended: boolean): Promise<User> {
    if (!isUserId(userId) || (await this.loadUser(userId)) === null) throw new UserNotFound(`user ${userId} was not found`)
    const result = await this.#onUser(userId, {
      type: suspended ? 'suspend_user' : 'reinstate_user',
      data: { staff_user_id: staff.id },
      meta: this.#meta(),
    })
    return result.state!
  }

  /**
   * Logout: the session token stops being accepted, in every process, before its own expiry.
   * Anything that is not a valid session (none, garbage, expired, already ended, a deleted
   * user's) is left as it is: logout answers the same either way.
   */
  async endSession(token: string | null): Promise<void> {
    const claims = token === null ? null : await this.sessions.verify(token, this.#deps.now())
    if (claims === null || claims.sessionId === null) return
    try {
      await this.#onUser(claims.userId, {
        type: 'end_session',
        data: { session_id: claims.sessionId, expires_at: claims.expiresAt, issued_at: new Date(claims.issuedAtMs).toISOString() },
        meta: this.#meta(),
      })
    } catch (err) {
      if (!(err instanceof UserNotFound)) throw err
    }
  }

  /** Issues a fresh 24-hour verification token to an unverified address; nothing otherwise. */
  async resendVerification(email: string): Promise<void> {
    const user = await this.findUserByEmail(email)
    if (user === null || user.email_verified_at !== null) return
    const { token, grant } = newUserToken(user.id, verificationTtlMs, this.#deps.now())
    const result = await this.#onUser(user.id, { type: 'issue_verification_token', data: { verification: grant }, meta: this.#meta() })
    if (result.appended) await this.sendMail(verificationMail(user.email, tokenLink(this.publicUrl(), '/verify', token)))
  }

  async requestPasswordReset(email: string): Promise<void> {
    const user = await this.findUserByEmail(email)
    if (user === null || user.status !== 'active') return
    const { token, grant } = newUserToken(user.id, passwordResetTtlMs, this.#deps.now())
    await this.#onUser(user.id, { type: 'request_password_reset', data: { reset: grant }, meta: this.#meta() })
    await this.mailUser(user, 'account', passwordResetMail(user.email, tokenLink(this.publicUrl(), '/reset-password', token)))
  }

  async resetPassword(token: string, newPassword: string): Promise<void> {
    const userId = userIdOfToken(token)
    const user = userId === null ? null : await this.loadUser(userId)
    if (user === null) throw new InvalidResetToken('the reset token is invalid, used or expired')
    // Checked before the slow hash, so bad tokens cost nothing.
    userDecider.decide({ type: 'reset_password', data: { token_hash: sha256Hex(token), password_hash: '' }, meta: this.#meta() }, user)
    const passwordHash = await hashPassword(newPassword)
    await this.#onUser(user.id, { type: 'reset_password', data: { token_hash: sha256Hex(token), password_hash: passwordHash }, meta: this.#meta() })
    await this.limits.clearLoginFailures(user.id)
    await this.sendSecurityNotice(user, 'Your password was reset through an e-mailed link')
  }

  async login(input: {
    email: string
    password: string
    totpCode?: string | undefined
    recoveryCode?: string | undefined
    device?: LoginDevice
  }): Promise<LoginResult> {
    const now = this.#deps.now()
    const user = await this.findUserByEmail(input.email)
    if (user === null) {
      await verifyPassword(input.password, await decoyPasswordHash())
      throw new LoginRefused('invalid_credentials')
    }
    // The attempt takes its slot in the failure window before the password is checked, so
    // parallel guesses cannot all pass a check that none of them has recorded yet. A wrong
    // password or second factor keeps the slot; a success clears the window; any other outcome
    // gives the slot back.
    const slot = await this.limits.reserveLoginAttempt(user.id, now)
    if (!slot.admitted) throw new LoginRefused('account_locked', slot.retryAfterMs)
    let outcome: 'failed' | 'succeeded' | 'neither' = 'neither'
    let recoveryCodeUsed = false
    try {
      if (!(await verifyPassword(input.password, user.password_hash))) {
        outcome = 'failed'
        throw new LoginRefused('invalid_credentials')
      }
      if (user.email_verified_at === null) throw new LoginRefused('email_not_verified')
      if (user.status === 'suspended') throw new LoginRefused('account_suspended')
      if (user.totp?.enabled_at) {
        if (input.totpCode !== undefined) {
          await this.#acceptTotpCode(user, input.totpCode, now)
        } else if (input.recoveryCode !== undefined) {
          await this.#useRecoveryCode(user, input.recoveryCode)
          recoveryCodeUsed = true
        } else {
          throw new LoginRefused('totp_required')
        }
      }
      outcome = 'succeeded'
    } catch (err) {
      if (err instanceof LoginRefused && err.reason === 'invalid_totp_code') outcome = 'failed'
      throw err
    } finally {
      if (outcome === 'neither') {
        await this.limits
          .releaseLoginAttempt(user.id, now)
          .catch((err) => this.#deps.log.warn({ err, user_id: user.id }, 'a login slot could not be given back'))
      }
    }
    await this.limits.clearLoginFailures(user.id)
    await this.#upgradePasswordHash(user, input.password)
    if (recoveryCodeUsed) await this.sendSecurityNotice(user, 'A recovery code was used to sign in')
    if (input.device) await this.#recordSignIn(user, input.device)
    return { user, session: await this.sessions.issue(user.id, now), recoveryCodeUsed, projects: await this.ownedProjects(user) }
  }

  /**
   * A hash made with older scrypt parameters is replaced once a login has proved the password.
   * A failure here does not fail the login: the old hash still verifies, and the next login
   * tries again.
   */
  async #upgradePasswordHash(user: User, password: string): Promise<void> {
    if (!needsRehash(user.password_hash)) return
    try {
      const passwordHash = await hashPassword(password)
      await this.#onUser(user.id, {
        type: 'upgrade_password_hash',
        data: { previous_hash: user.password_hash, password_hash: passwordHash },
        meta: this.#meta(),
      })
    } catch (err) {
      this.#deps.log.warn({ err, user_id: user.id }, 'the password hash could not be upgraded; the next login tries again')
    }
  }

  /**
   * A login from a device (address and User-Agent) the user has not signed in from lately gets a
   * security notice; the first login ever has nothing to compare with and gets none. A failure
   * here does not fail the login.
   */
  async #recordSignIn(user: User, device: LoginDevice): Promise<void> {
    try {
      const deviceId = sha256Hex(`${device.ip}\n${device.userAgent}`).slice(0, 32)
      const result = await this.#onUser(user.id, { type: 'record_sign_in', data: { device_id: deviceId }, meta: this.#meta() })
      const signedIn = result.events.find((e) => e.type === 'new_device_signed_in')
      if (signedIn?.type === 'new_device_signed_in' && !signedIn.data.first_device) {
        const agent = device.userAgent === '' ? 'an unnamed client' : JSON.stringify(device.userAgent.slice(0, 200))
        await this.sendSecurityNotice(user, 'A sign-in from a new device', `From ${device.ip}, with the client ${agent}.`)
      }
    } catch (err) {
      this.#deps.log.warn({ err, user_id: user.id }, 'a sign-in could not be recorded')
    }
  }

  async #acceptTotpCode(user: User, code: string, now: Date): Promise<void> {
    const step = await stepOfCode(this.#totpSecretOf(user), code, now)
    try {
      if (step === null) throw new InvalidTotpCode('the code does not match')
      await this.#onUser(user.id, { type: 'accept_totp_step', data: { step }, meta: this.#meta() })
    } catch (err) {
      if (!(err instanceof InvalidTotpCode)) throw err
      throw new LoginRefused('invalid_totp_code')
    }
  }

  async #useRecoveryCode(user: User, code: string): Promise<void> {
    try {
      await this.#onUser(user.id, { type: 'use_recovery_code', data: { code_hash: hashRecoveryCode(code) }, meta: this.#meta() })
    } catch (err) {
      if (!(err instanceof InvalidTotpCode)) throw err
      throw new LoginRefused('invalid_totp_code')
    }
  }

  #totpSecretOf(user: User): string {
    try {
      return decryptAtRest(this.#totpKey, user.totp!.secret_encrypted)
    } catch (err) {
      // The operator's problem more than the user's: said once per attempt in the log.
      this.#deps.log.error({ err, user_id: user.id }, 'a TOTP secret cannot be decrypted: it was sealed under another JOBSVC_SECRET')
      throw new TotpSecretUnreadable({ cause: err, pending: user.totp!.enabled_at === null })
    }
  }

  /**
   * Projects the user owns, oldest first. The user's index may name a project it has since left
   * (the index is written second); the project aggregate decides.
   */
  async ownedProjects(user: User): Promise<ProjectSummary[]> {
    const summaries = await Promise.all(
      user.project_ids.map(async (id) => {
        const project = (await projectHandler.load(this.#deps.store, projectHandler.ref(id))).state
        const isOwner = project?.status === 'active' && project.members.some((m) => m.user_id === user.id && m.role === 'owner')
        return isOwner ? project : null
      }),
    )
    return summaries
      .filter((p): p is Project => p !== null)
      .sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id))
      .map((p) => ({ id: p.id, name: p.name, plan: p.plan, api_key_prefix: activeKeyPrefix(p) }))
  }

  /** The spec's profile object (`GET /platform/v1/auth/me`). */
  async profile(user: User): Promise<Profile> {
    return {
      user_id: user.id,
      email: user.email,
      email_verified: user.email_verified_at !== null,
      created_at: user.created_at,
      is_admin: user.is_admin,
      display_name: user.display_name,
      timezone: user.timezone,
      locale: user.locale,
      totp_enabled: Boolean(user.totp?.enabled_at),
      email_undeliverable: user.email_undeliverable,
      account: user.account ?? { id: '', name: '' },
      products: [{ product_slug: 'jobsvc', enabled: user.email_verified_at !== null, plan: user.plan }],
      projects: await this.ownedProjects(user),
    }
  }

  /**
   * Runs `proof` (the check of a signed-in user's password, and of a second factor after it) in a
   * slot of the user's failed-login window, as a login's password check runs: with 10 failures in
   * 15 minutes it is 429 `account_locked` before scrypt runs, so a stolen session cannot guess
   * passwords at scrypt's pace. A wrong password or code keeps the slot as a failure; anything
   * else gives it back.
   */
  async #inLoginWindow<T>(user: User, proof: () => Promise<T>): Promise<T> {
    const now = this.#deps.now()
    const slot = await this.limits.reserveLoginAttempt(user.id, now)
    if (!slot.admitted) throw new LoginRefused('account_locked', slot.retryAfterMs)
    let failed = false
    try {
      return await proof()
    } catch (err) {
      failed = err instanceof WrongPassword || err instanceof InvalidTotpCode
      throw err
    } finally {
      if (!failed) {
        await this.limits
          .releaseLoginAttempt(user.id, now)
          .catch((err) => this.#deps.log.warn({ err, user_id: user.id }, 'a login slot could not be given back'))
      }
    }
  }

  async changePassword(user: User, currentPassword: string, newPassword: string): Promise<User> {
    await this.#inLoginWindow(user, async () => {
      if (!(await verifyPassword(currentPassword, user.password_hash))) throw new WrongPassword()
    })
    const passwordHash = await hashPassword(newPassword)
    const result = await this.#onUser(user.id, { type: 'change_password', data: { password_hash: passwordHash }, meta: this.#meta() })
    await this.sendSecurityNotice(result.state!, 'Your password was changed')
    return result.state!
  }

  async updateProfile(user: User, changes: { display_name?: string | null; timezone?: string; locale?: string }): Promise<User> {
    const result = await this.#onUser(user.id, { type: 'update_profile', data: changes, meta: this.#meta() })
    return result.state!
  }

  async setUpTotp(user: User): Promise<{ secret: string; uri: string }> {
    if (user.totp?.enabled_at) throw new TotpAlreadyEnabled('two-factor authentication is already enabled')
    const secret = newTotpSecret()
    await this.#onUser(user.id, { type: 'stage_totp', data: { secret_encrypted: encryptAtRest(this.#totpKey, secret) }, meta: this.#meta() })
    return { secret, uri: otpauthUri(secret, user.email) }
  }

  async enableTotp(user: User, code: string): Promise<User> {
    if (user.totp?.enabled_at) throw new TotpAlreadyEnabled('two-factor authentication is already enabled')
    if (user.totp === null) throw new TotpNotInitialized('call 2fa/setup first')
    const step = await stepOfCode(this.#totpSecretOf(user), code, this.#deps.now())
    if (step === null) throw new InvalidTotpCode('the code does not match')
    const checked = { step, secret_encrypted: user.totp.secret_encrypted }
    const enabled = (await this.#onUser(user.id, { type: 'enable_totp', data: checked, meta: this.#meta() })).state!
    await this.sendSecurityNotice(enabled, 'Two-factor authentication was enabled')
    return enabled
  }

  async disableTotp(user: User, password: string, code: string): Promise<void> {
    if (!user.totp?.enabled_at) throw new TotpNotEnabled('two-factor authentication is not enabled')
    const step = await this.#inLoginWindow(user, async () => {
      if (!(await verifyPassword(password, user.password_hash))) throw new WrongPassword()
      const matched = await stepOfCode(this.#totpSecretOf(user), code, this.#deps.now())
      if (matched === null) throw new InvalidTotpCode('the code does not match')
      return matched
    })
    await this.#onUser(user.id, { type: 'disable_totp', data: { step }, meta: this.#meta() })
    await this.sendSecurityNotice(user, 'Two-factor authentication was disabled')
  }

  async updateNotificationPreferences(user: User, changes: Partial<NotificationPreferences>): Promise<User> {
    return (await this.#onUser(user.id, { type: 'update_notification_preferences', data: changes, meta: this.#meta() })).state!
  }

  /**
   * The e-mail provider's report of a hard bounce or a complaint. Resolves to whether it marked
   * a user's address: an address no user has, a report older than the user's last
   * re-verification, or one already marked changes nothing.
   */
  async markUndeliverable(email: string, report: UndeliverableAddress): Promise<boolean> {
    const user = await this.findUserByEmail(email)
    if (user === null) return false
    const result = await this.#onUser(user.id, {
      type: 'mark_email_undeliverable',
      data: { email: normalizeEmail(email), ...report },
      meta: this.#meta(),
    })
    if (result.appended)
      this.#deps.log.warn({ user_id: user.id, reason: report.reason }, 'e-mail address marked undeliverable: nothing more is sent to it')
    return result.appended
  }

  /** A link (valid 24 hours) that proves the address receives mail again; sent even to an undeliverable address, which it clears. */
  async requestReverification(user: User): Promise<void> {
    const { token, grant } = newUserToken(user.id, verificationTtlMs, this.#deps.now())
    await this.#onUser(user.id, { type: 'issue_reverification_token', data: { verification: grant }, meta: this.#meta() })
    await this.sendMail(reverificationMail(user.email, tokenLink(this.publicUrl(), '/reverify', token)))
  }

  async reverifyEmail(token: string): Promise<void> {
    const userId = userIdOfToken(token)
    const user = userId === null ? null : await this.loadUser(userId)
    if (user === null) throw new InvalidVerificationToken('the verification token is invalid, used or expired')
    await this.#onUser(user.id, { type: 'reverify_email', data: { token_hash: sha256Hex(token) }, meta: this.#meta() })
  }

  async regenerateRecoveryCodes(user: User): Promise<string[]> {
    const codes = newRecoveryCodes()
    await this.#onUser(user.id, { type: 'regenerate_recovery_codes', data: { code_hashes: codes.map(hashRecoveryCode) }, meta: this.#meta() })
    return codes
  }

  /** Adds a project to the user's index (after the project's own membership change). */
  async indexProject(userId: string, projectId: string, joined: boolean): Promise<void> {
    await this.#onUser(userId, {
      type: joined ? 'join_project' : 'leave_project',
      data: { project_id: projectId },
      meta: this.#meta(),
    }).catch((err) => {
      if (!(err instanceof UserNotFound)) throw err
    })
  }

  async deleteAccount(user: User): Promise<void> {
    await this.#onUser(user.id, { type: 'delete_account', data: {}, meta: this.#meta() })
    await emailClaimHandler.decide(this.#deps, emailRef(user.email), {
      type: 'release_email',
      data: { user_id: user.id },
      meta: this.#meta(),
    })
  }
}
