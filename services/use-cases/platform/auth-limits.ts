import type { KV } from '@nats-io/kv'
import ipaddr from 'ipaddr.js'
import { sha256Hex } from '../../infrastructure/secrets.ts'

/** Spec, Limits: 20 anonymous POSTs per IP and 10 failed logins per account, each per 15 minutes. */
export const anonymousPostsPerWindow = 20
export const loginFailuresPerWindow = 10
export const authWindowMs = 15 * 60 * 1000
/**
 * Failed promotion-code applies, per user and per project, each per hour: a person mistyping a
 * code never meets it, and guessing codes (staff choose words like SPRING-25) costs an hour per
 * ten tries, whatever the number of projects a user opens to try from.
 */
export const promoFailuresPerWindow = 10
export const promoWindowMs = 60 * 60 * 1000

/**
 * Compare-and-set rounds before a window update gives up. A round is lost only to another
 * request's successful write, and a full window needs no write, so taking a slot needs at most
 * about `limit` rounds however many requests race for it; giving slots back adds a few.
 */
const maxRounds = 50

/**
 * Invitations a project sends per hour: each is a mail to an address its admins typed, so a
 * project cannot turn the service into a mailer.
 */
export const invitationsPerWindow = 30
export const invitationWindowMs = 60 * 60 * 1000

/** A window below is full: 429 `rate_limit_exceeded` with `Retry-After` at the edge. */
export class WindowFull extends Error {
  readonly retryAfterMs: number
  constructor(message: string, retryAfterMs: number) {
    super(message)
    this.name = 'WindowFull'
    this.retryAfterMs = retryAfterMs
  }
}

/**
 * Who an anonymous POST from `ip` is counted against: an IPv4 address itself (an IPv4-mapped IPv6
 * address, `::ffff:a.b.c.d`, is that IPv4 address), an IPv6 address by its /64: the smallest
 * network a provider hands one subscriber, whose 2^64 addresses one client can cycle through at
 * will. Anything else (an odd `X-Forwarded-For` entry a trusted proxy passed on) as it is.
 */
export function anonymousClientOf(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip
  const address = ipaddr.process(ip)
  if (address.kind() === 'ipv4') return address.toString()
  const network = (address as ipaddr.IPv6).parts.slice(0, 4).map((part) => part.toString(16))
  return `${network.join(':')}::/64`
}

export interface Verdict {
  admitted: boolean
  /** Until the window admits again; 0 when admitted. */
  retryAfterMs: number
}

/**
 * Sliding windows kept in a KV bucket, so every API process counts against the same numbers. A
 * window is the list of its recent instants; each change is a compare-and-set on the entry's
 * revision, so concurrent requests in several processes never both take the last slot.
 */
export class AuthLimits {
  readonly #kv: KV

  constructor(kv: KV) {
    this.#kv = kv
  }

  async #read(key: string): Promise<{ times: number[]; revision: number | null }> {
    const entry = await this.#kv.get(key)
    if (entry === null || entry.operation !== 'PUT') return { times: [], revision: entry?.revision ?? null }
    return { times: entry.json<number[]>(), revision: entry.revision }
  }

  async #write(key: string, times: number[], revision: number | null): Promise<boolean> {
    const value = JSON.stringify(times)
    try {
      if (revision === null) await this.#kv.create(key, value)
      else await this.#kv.update(key, value, revision)
      return true
    } catch (err) {
      if (/wrong last sequence|key exists/i.test((err as Error).message)) return false
      throw err
    }
  }

  /** Takes one slot of `key`'s window if one is free. */
  async #take(key: string, limit: number, windowMs: number, now: number): Promise<Verdict> {
    for (let round = 0; round < maxRounds; round++) {
      const { times, revision } = await this.#read(key)
      const live = times.filter((t) => t > now - windowMs)
      if (live.length >= limit) return { admitted: false, retryAfterMs: live[live.length - limit]! + windowMs - now }
      live.push(now)
      if (await this.#write(key, live, revision)) return { admitted: true, retryAfterMs: 0 }
    }
    throw new Error(`auth limits: could not update ${key}`)
  }

  /** Gives back one slot taken at `at` (when several were taken in the same millisecond, one of them). */
  async #give(key: string, at: number): Promise<void> {
    for (let round = 0; round < maxRounds; round++) {
      const { times, revision } = await this.#read(key)
      const index = times.indexOf(at)
      if (index < 0) return
      if (await this.#write(key, [...times.slice(0, index), ...times.slice(index + 1)], revision)) return
    }
    throw new Error(`auth limits: could not update ${key}`)
  }

  /** Counts one anonymous POST from `ip`'s client (`anonymousClientOf`; every POST counts, whatever its answer). */
  admitAnonymousPost(ip: string, now: Date): Promise<Verdict> {
    return this.#take(`ip.${sha256Hex(anonymousClientOf(ip)).slice(0, 32)}`, anonymousPostsPerWindow, authWindowMs, now.getTime())
  }

  /**
   * Takes a slot of the account's failure window before its password is checked, or answers how
   * long the account is locked. Every attempt in flight holds a slot of its own, so no more than
   * `loginFailuresPerWindow` passwords are checked per window however many arrive at once. The
   * slot stands as the attempt's failure unless it is given back (`releaseLoginAttempt`) or the
   * window is cleared by a success.
   */
  reserveLoginAttempt(userId: string, now: Date): Promise<Verdict> {
    return this.#take(`login.${userId}`, loginFailuresPerWindow, authWindowMs, now.getTime())
  }

  /** An attempt that turned out not to be a failure (right password, but no second factor yet). */
  releaseLoginAttempt(userId: string, now: Date): Promise<void> {
    return this.#give(`login.${userId}`, now.getTime())
  }

  /** A successful login (or a password reset) starts the count again. */
  async clearLoginFailures(userId: string): Promise<void> {
    await this.#kv.delete(`login.${userId}`)
  }

  /**
   * Takes a slot of both failure windows of promotion-code applies, the user's and the project's,
   * before the code is looked at (as a login takes its slot before the password is checked), so
   * parallel guesses get no more tries than sequential ones; or answers how long until both admit
   * again. The slots stand as the attempt's failure unless given back (`releasePromoAttempt`).
   */
  async reservePromoAttempt(userId: string, projectId: string, now: Date): Promise<Verdict> {
    const at = now.getTime()
    const user = await this.#take(`promo.user.${userId}`, promoFailuresPerWindow, promoWindowMs, at)
    if (!user.admitted) return user
    const project = await this.#take(`promo.project.${projectId}`, promoFailuresPerWindow, promoWindowMs, at)
    if (!project.admitted) await this.#give(`promo.user.${userId}`, at)
    return project
  }

  /** An apply that was not a failure (it succeeded, or something else than the code refused it). */
  async releasePromoAttempt(userId: string, projectId: string, now: Date): Promise<void> {
    await this.#give(`promo.user.${userId}`, now.getTime())
    await this.#give(`promo.project.${projectId}`, now.getTime())
  }

  /** Takes one of the project's invitations of the hour, or answers how long until one frees. */
  takeInvitation(projectId: string, now: Date): Promise<Verdict> {
    return this.#take(`invite.${projectId}`, invitationsPerWindow, invitationWindowMs, now.getTime())
  }

  /** An invitation that was refused and sent no mail. */
  giveInvitationBack(projectId: string, now: Date): Promise<void> {
    return this.#give(`invite.${projectId}`, now.getTime())
  }

  /** One use per `periodMs` per key (the account export's 1 per 60 s per user). */
  takeCooldown(purpose: string, id: string, periodMs: number, now: Date): Promise<Verdict> {
    return this.#take(`cooldown.${purpose}.${id}`, 1, periodMs, now.getTime())
  }
}
