import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto'

/**
 * scrypt (memory-hard) with a per-user 16-byte salt. N = 2^15, r = 8 costs 32 MiB and ~60 ms of
 * one core here, run on libuv's thread pool so the event loop keeps serving. The parameters are
 * stored with each hash, so raising them later leaves old hashes verifiable.
 */
const cost = { N: 2 ** 15, r: 8, p: 1 }
const keyLength = 32

function derive(password: string, salt: Buffer, options: { N: number; r: number; p: number }): Promise<Buffer> {
  const scryptOptions: ScryptOptions = { ...options, maxmem: 256 * options.N * options.r + 1024 * 1024 }
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFKC'), salt, keyLength, scryptOptions, (err, key) => (err ? reject(err) : resolve(key))),
  )
}

/** `scrypt$<N>$<r>$<p>$<salt>$<hash>`, base64url salt and hash. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16)
  const key = await derive(password, salt, cost)
  return ['scrypt', cost.N, cost.r, cost.p, salt.toString('base64url'), key.toString('base64url')].join('$')
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$')
  if (scheme !== 'scrypt' || salt === undefined || hash === undefined) return false
  const expected = Buffer.from(hash, 'base64url')
  const key = await derive(password, Buffer.from(salt, 'base64url'), { N: Number(n), r: Number(r), p: Number(p) })
  return key.length === expected.length && timingSafeEqual(key, expected)
}

/**
 * A hash of nothing anyone knows: a login for an unknown address is checked against it, so it
 * costs the same time as one for a known address and the answer's timing reveals nothing.
 */
let decoy: Promise<string> | undefined
export function decoyPasswordHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(24).toString('base64url'))
  return decoy
}
