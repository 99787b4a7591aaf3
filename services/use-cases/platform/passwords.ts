import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto'

/**
 * scrypt (memory-hard) with a per-user 16-byte salt, at the minimum of OWASP's Password Storage
 * Cheat Sheet: N = 2^17, r = 8, p = 1. That is 128 MiB and ~350 ms of one core per hash here, run
 * on libuv's thread pool (4 threads, so at most 512 MiB at once) while the event loop keeps
 * serving. The parameters are stored with each hash, so hashes made with older ones (N = 2^15)
 * still verify; `needsRehash` tells the login to replace them. Runs in flight are bounded per
 * process (`scryptRuns`).
 */
const cost = { N: 2 ** 17, r: 8, p: 1 }
const keyLength = 32

interface Cost {
  N: number
  r: number
  p: number
}

/** Too many scrypt runs are in flight in this process: the request is refused at once (429), not queued. */
export class PasswordWorkBusy extends Error {
  /** A run takes about 350 ms; four run at once. */
  readonly retryAfterMs = 1000
  constructor(max: number) {
    super(`${max} password checks are already running on this server`)
    this.name = 'PasswordWorkBusy'
  }
}

/**
 * The scrypt runs in flight in this process, running or queued on libuv's pool of 4 threads (which
 * file, DNS and compression work share). Unbounded, a burst of password checks (logins, sign-ups,
 * change-password and 2fa/disable from stolen sessions) queued seconds of pool work ahead of
 * everything else; past `max` a run is refused instead. One per process, like the pool; the API
 * sets `max` from `password_hashes_in_flight`.
 */
export class ScryptRuns {
  max = 16
  #running = 0

  /** Takes a place, or null when all `max` are taken; the caller gives it back exactly once. */
  tryEnter(): (() => void) | null {
    if (this.#running >= this.max) return null
    this.#running++
    let given = false
    return () => {
      if (given) return
      given = true
      this.#running--
    }
  }
}

export const scryptRuns = new ScryptRuns()

async function derive(password: string, salt: Buffer, options: Cost): Promise<Buffer> {
  const exit = scryptRuns.tryEnter()
  if (exit === null) throw new PasswordWorkBusy(scryptRuns.max)
  // OpenSSL's own bound (the 128·r·p and 128·r·(N + 2) byte blocks) plus slack; Node's default
  // maxmem (32 MiB) would refuse these parameters.
  const scryptOptions: ScryptOptions = { ...options, maxmem: 128 * options.r * (options.N + options.p + 2) + 1024 * 1024 }
  try {
    return await new Promise<Buffer>((resolve, reject) =>
      scrypt(password.normalize('NFKC'), salt, keyLength, scryptOptions, (err, key) => (err ? reject(err) : resolve(key))),
    )
  } finally {
    exit()
  }
}

/** `scrypt$<N>$<r>$<p>$<salt>$<hash>`, base64url salt and hash. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16)
  const key = await derive(password, salt, cost)
  return ['scrypt', cost.N, cost.r, cost.p, salt.toString('base64url'), key.toString('base64url')].join('$')
}

function costOf(stored: string): Cost | null {
  const [scheme, n, r, p] = stored.split('$')
  const parsed = { N: Number(n), r: Number(r), p: Number(p) }
  return scheme === 'scrypt' && Object.values(parsed).every((v) => Number.isSafeInteger(v) && v > 0) ? parsed : null
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [, , , , salt, hash] = stored.split('$')
  const storedCost = costOf(stored)
  if (storedCost === null || salt === undefined || hash === undefined) return false
  const expected = Buffer.from(hash, 'base64url')
  const key = await derive(password, Buffer.from(salt, 'base64url'), storedCost)
  return key.length === expected.length && timingSafeEqual(key, expected)
}

/** True for a hash made with weaker parameters than today's: the next successful login replaces it. */
export function needsRehash(stored: string): boolean {
  const storedCost = costOf(stored)
  return storedCost === null || storedCost.N < cost.N || storedCost.r < cost.r || storedCost.p < cost.p
}

/**
 * A hash of nothing anyone knows, with today's parameters: a login for an unknown address is
 * checked against it, so it costs the same time as one for a known address and the answer's
 * timing reveals nothing.
 */
let decoy: Promise<string> | undefined
export function decoyPasswordHash(): Promise<string> {
  // A run refused for want of room is not kept: the next login makes the decoy again.
  decoy ??= hashPassword(randomBytes(24).toString('base64url')).catch((err: unknown) => {
    decoy = undefined
    throw err
  })
  return decoy
}
