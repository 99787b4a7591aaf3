import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto'

/**
 * Key material derived from JOBSVC_SECRET, one key per purpose (HKDF-SHA256), so the JWT
 * signing key and the encryption-at-rest key are never the same bytes.
 */
export function deriveKey(
  secret: string,
  purpose: 'jwt-signing' | 'totp-at-rest' | 'webhook-secret-at-rest' | 'idempotent-answers-at-rest',
): Uint8Array {
  return new Uint8Array(hkdfSync('sha256', secret, 'jobsvc', purpose, 32))
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex')
}

/** Compares two hex digests in constant time. */
export function isSameDigest(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex')
  const y = Buffer.from(b, 'hex')
  return x.length === y.length && timingSafeEqual(x, y)
}

/** 32 random bytes, URL-safe: the secret part of e-mailed tokens. */
export function randomSecret(): string {
  return randomBytes(32).toString('base64url')
}

const cipherName = 'aes-256-gcm'

/** AES-256-GCM with a fresh 96-bit IV: `v1.<iv>.<tag>.<ciphertext>`, base64url parts. */
export function encryptAtRest(key: Uint8Array, plaintext: string): string {
  const iv = randomBytes(12)
  const cipher = createCipheriv(cipherName, key, iv)
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()])
  return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.')
}

export function decryptAtRest(key: Uint8Array, sealed: string): string {
  const [version, iv, tag, body] = sealed.split('.')
  if (version !== 'v1' || iv === undefined || tag === undefined || body === undefined) throw new Error('not a sealed value')
  const decipher = createDecipheriv(cipherName, key, Buffer.from(iv, 'base64url'))
  decipher.setAuthTag(Buffer.from(tag, 'base64url'))
  return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8')
}
