import type { KV } from '@nats-io/kv'
import { sha256Hex } from './secrets.ts'

/** Spec, Limits: 20 anonymous POSTs per IP and 10 failed logins per account, each per 15 minutes. */
export const anonymousPostsPerWindow = 20
export const loginFailuresPerWindow = 10
export const authWindowMs = 15 * 60 * 1000

/** Compare-and-set rounds before a window update gives up (only under a storm on one key). */
const maxRounds = 20

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

  /** Counts one anonymous POST from `ip` (every POST counts, whatever its answer). */
  admitAnonymousPost(ip: string, now: Date): Promise<Verdict> {
    return this.#take(`ip.${sha256Hex(ip).slice(0, 32)}`, anonymousPostsPerWindow, authWindowMs, now.getTime())
  }

  /** How long the account is locked out of logins, 0 when it is not. Checked before the password. */
  async lockedForMs(userId: string, now: Date): Promise<number> {
    const { times } = await this.#read(`login.${userId}`)
    const live = times.filter((t) => t > now.getTime() - authWindowMs)
    return live.length >= loginFailuresPerWindow ? live[live.length - loginFailuresPerWindow]! + authWindowMs - now.getTime() : 0
  }

  async recordLoginFailure(userId: string, now: Date): Promise<void> {
    // Counting cannot be refused here: the window only tells the next attempt it is locked.
    await this.#take(`login.${userId}`, Number.MAX_SAFE_INTEGER, authWindowMs, now.getTime())
  }

  /** A successful login (or a password reset) starts the count again. */
  async clearLoginFailures(userId: string): Promise<void> {
    await this.#kv.delete(`login.${userId}`)
  }

  /** One use per `periodMs` per key (the account export's 1 per 60 s per user). */
  takeCooldown(purpose: string, id: string, periodMs: number, now: Date): Promise<Verdict> {
    return this.#take(`cooldown.${purpose}.${id}`, 1, periodMs, now.getTime())
  }
}
