import { KvWatchInclude, type KV } from '@nats-io/kv'
import { createHash } from 'node:crypto'
import { canonicalJson } from '../../../domain/canonical-json.ts'
import { decryptAtRest, encryptAtRest } from '../../infrastructure/secrets.ts'

/** Spec, Time limits: a key answers with the original response for 24 hours after first use. */
export const idempotencyLifetimeMs = 24 * 60 * 60 * 1000
/** A reservation older than this belongs to a request whose process died; another may take it. */
export const abandonedAfterMs = 60_000
/** How long a duplicate waits for the original request to finish before it is told to retry. */
export const duplicateWaitMs = 30_000

/**
 * The largest entry kept: NATS's default maximum message (1 MiB), less room for the message's
 * headers. A larger answer is recorded as unstored (see `complete`).
 */
const maxEntryBytes = 1024 * 1024 - 8 * 1024

const headerKeyPattern = /^[A-Za-z0-9_-]{1,200}$/

export function isIdempotencyKey(value: string): boolean {
  return headerKeyPattern.test(value)
}

/** What a stored answer repeats: its status, body bytes and the headers that describe it. */
export interface StoredResponse {
  status: number
  body: string
  headers: Record<string, string>
}

/**
 * `sealed`: the StoredResponse as JSON, AES-256-GCM under a key derived from JOBSVC_SECRET. Every
 * answer is sealed, not only those known to hold a secret (a webhook's signing secret, a job's
 * payload): which answers hold one is not this store's to know.
 */
type Entry =
  | { state: 'pending'; fingerprint: string; first_used_at: number; reserved_at: number }
  | { state: 'done'; fingerprint: string; first_used_at: number; sealed: string }
  /** Stored before answers were sealed: repeated as stored until it expires, 24 hours after the upgrade. */
  | { state: 'done'; fingerprint: string; first_used_at: number; response: StoredResponse }
  /** The request ran, but its answer was too large for one message of the bucket (a large batch). */
  | { state: 'done'; fingerprint: string; first_used_at: number; unstored: true }

export type Reservation =
  /** The caller runs the request and must `complete` or `release` the reservation. */
  | { outcome: 'reserved'; key: string; revision: number; firstUsedAt: number }
  | { outcome: 'replay'; response: StoredResponse }
  | { outcome: 'mismatch' }
  /** The stored answer was sealed under another JOBSVC_SECRET: it cannot be repeated, nor run again. */
  | { outcome: 'unreadable' }
  /** Still running elsewhere after the wait: the caller answers 409 and the client retries. */
  | { outcome: 'in_flight' }
  /** The request ran once but its answer could not be kept: it cannot be repeated, nor run again. */
  | { outcome: 'unstored' }

/**
 * The request's identity for reuse detection: method, path and the body with its keys sorted, so
 * the same JSON written with other spacing or key order is the same request.
 */
export function fingerprintOf(method: string, path: string, body: unknown): string {
  return createHash('sha256')
    .update(`${method} ${path}\n${canonicalJson(body ?? null)}`)
    .digest('hex')
}

/** A key found reserved by a request still running: the entry's revision, and when it counts as abandoned. */
interface Running {
  outcome: 'running'
  revision: number
  abandonedInMs: number
}

/** A reservation this process holds: settled when its request completes or releases it. */
interface Held {
  revision: number
  settled: Promise<void>
  settle: () => void
}

/**
 * Idempotency keys in a KV bucket (24-hour TTL), shared by every API process. `create` is an
 * atomic create-if-absent, so of concurrent requests with one key exactly one runs; the others
 * wait for its stored answer. Only 2xx answers are stored, sealed (`key`); any other releases
 * the key, so a repeat runs again.
 */
export class IdempotencyStore {
  readonly #kv: KV
  readonly #now: () => Date
  readonly #key: Uint8Array
  /** Reservations of this process's requests in flight, by key, for duplicates here to wait on. */
  readonly #held = new Map<string, Held>()

  constructor(kv: KV, now: () => Date, key: Uint8Array) {
    this.#kv = kv
    this.#now = now
    this.#key = key
  }

  #unseal(sealed: string): StoredResponse | null {
    try {
      return JSON.parse(decryptAtRest(this.#key, sealed)) as StoredResponse
    } catch {
      return null
    }
  }

  /** One key space per project; the digest makes any client string a valid KV key. */
  static keyOf(projectId: string, idempotencyKey: string): string {
    return `${projectId}.${createHash('sha256').update(idempotencyKey).digest('hex').slice(0, 48)}`
  }

  /**
   * Reserves `key` for a request, or answers what it gets instead. A duplicate of a request still
   * running waits (up to `duplicateWaitMs`) until that request's entry changes, then looks again:
   * the wait is a promise when this process runs the request, a KV watch of the key when another
   * does, never a read of the bucket on a timer. `wait: false` (a long poll, which may run for as
   * long as the wait) answers `in_flight` at once instead.
   */
  async reserve(key: string, fingerprint: string, options: { wait?: boolean } = {}): Promise<Reservation> {
    const waitUntil = Date.now() + (options.wait === false ? 0 : duplicateWaitMs)
    for (;;) {
      const found = await this.#reserveOnce(key, fingerprint)
      if (found.outcome !== 'running') return found
      const left = waitUntil - Date.now()
      if (left <= 0) return { outcome: 'in_flight' }
      await this.#untilChanged(key, found.revision, Math.min(left, found.abandonedInMs))
    }
  }

  /**
   * One reservation attempt: reads the key and, where it is free, expired or abandoned, takes it
   * with an atomic create or compare-and-set (a lost race reads again at once).
   */
  async #reserveOnce(key: string, fingerprint: string): Promise<Reservation | Running> {
    for (;;) {
      const now = this.#now().getTime()
      const fresh: Entry = { state: 'pending', fingerprint, first_used_at: now, reserved_at: now }
      const entry = await this.#kv.get(key)
      const current = entry !== null && entry.operation === 'PUT' ? entry.json<Entry>() : null
      const isLive = current !== null && now - current.first_used_at < idempotencyLifetimeMs
      if (!isLive) {
        try {
          const revision =
            entry === null ? await this.#kv.create(key, JSON.stringify(fresh)) : await this.#kv.update(key, JSON.stringify(fresh), entry.revision)
          return this.#hold(key, revision, now)
        } catch (err) {
          if (isLostRace(err)) continue
          throw err
        }
      }
      if (current.fingerprint !== fingerprint) return { outcome: 'mismatch' }
      if (current.state === 'done') {
        if ('unstored' in current) return { outcome: 'unstored' }
        const response = 'sealed' in current ? this.#unseal(current.sealed) : current.response
        return response === null ? { outcome: 'unreadable' } : { outcome: 'replay', response }
      }
      if (now - current.reserved_at > abandonedAfterMs) {
        try {
          const taken: Entry = { ...current, reserved_at: now }
          const revision = await this.#kv.update(key, JSON.stringify(taken), entry!.revision)
          return this.#hold(key, revision, current.first_used_at)
        } catch (err) {
          if (isLostRace(err)) continue
          throw err
        }
      }
      return { outcome: 'running', revision: entry!.revision, abandonedInMs: current.reserved_at + abandonedAfterMs - now + 1 }
    }
  }

  #hold(key: string, revision: number, firstUsedAt: number): Extract<Reservation, { outcome: 'reserved' }> {
    let settle = () => {}
    const settled = new Promise<void>((resolve) => (settle = resolve))
    this.#held.get(key)?.settle()
    this.#held.set(key, { revision, settled, settle })
    return { outcome: 'reserved', key, revision, firstUsedAt }
  }

  /** The reservation's request is over, whatever became of its entry: duplicates waiting here look again. */
  #settle(reservation: Extract<Reservation, { outcome: 'reserved' }>): void {
    const held = this.#held.get(reservation.key)
    if (held?.revision !== reservation.revision) return
    this.#held.delete(reservation.key)
    held.settle()
  }

  /** Resolves once `key` has moved past `revision` (completed, released or taken over), or after `ms`. */
  async #untilChanged(key: string, revision: number, ms: number): Promise<void> {
    const held = this.#held.get(key)
    if (held?.revision === revision) return settledWithin(held.settled, ms)
    const watch = await this.#kv.watch({ key, include: KvWatchInclude.UpdatesOnly })
    try {
      // The watch sees changes from its start on; one read covers a change made since the reservation was read.
      const entry = await this.#kv.get(key)
      if (entry === null || entry.revision !== revision) return
      await settledWithin(firstOf(watch), ms)
    } finally {
      watch.stop()
    }
  }

  /**
   * Stores the answer. One too large for a message of the bucket (a batch of a thousand jobs with
   * long job types can answer over a megabyte) is recorded as unstored instead: a repeat is then
   * refused rather than run a second time.
   */
  async complete(reservation: Extract<Reservation, { outcome: 'reserved' }>, fingerprint: string, response: StoredResponse): Promise<void> {
    const done = { state: 'done', fingerprint, first_used_at: reservation.firstUsedAt } as const
    const stored = JSON.stringify({ ...done, sealed: encryptAtRest(this.#key, JSON.stringify(response)) } satisfies Entry)
    const entry = Buffer.byteLength(stored) <= maxEntryBytes ? stored : JSON.stringify({ ...done, unstored: true } satisfies Entry)
    try {
      await this.#kv.update(reservation.key, entry, reservation.revision)
    } finally {
      this.#settle(reservation)
    }
  }

  /** The request did not succeed: the key is free again. */
  async release(reservation: Extract<Reservation, { outcome: 'reserved' }>): Promise<void> {
    await this.#kv.delete(reservation.key, { previousSeq: reservation.revision }).catch(() => undefined)
    this.#settle(reservation)
  }
}

/** Waits for `promise` at most `ms`; never rejects (the caller looks at the key again either way). */
async function settledWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([promise.catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, ms)))])
  clearTimeout(timer)
}

/** Resolves at the watch's first entry, or when the watch ends. */
async function firstOf(watch: AsyncIterable<unknown>): Promise<void> {
  for await (const _change of watch) return
}

function isLostRace(err: unknown): boolean {
  return /wrong last sequence|key exists/i.test((err as Error).message)
}
