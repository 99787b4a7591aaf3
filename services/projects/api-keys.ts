import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'

/** `sv_<env>_sk_` and 32 lowercase hex characters: 43 characters in all (spec, Authentication). */
const apiKeyPattern = /^sv_(live|test)_sk_[0-9a-f]{32}$/

/** The non-secret part used to find the project: the key's first 24 characters. */
export const apiKeyPrefixLength = 24

export type KeyEnvironment = 'live' | 'test'

export function isApiKeyShape(key: string): boolean {
  return apiKeyPattern.test(key)
}

export function generateApiKey(env: KeyEnvironment): string {
  return `sv_${env}_sk_${randomBytes(16).toString('hex')}`
}

export function apiKeyPrefix(key: string): string {
  return key.slice(0, apiKeyPrefixLength)
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex')
}

/** Compares two hex digests in constant time. */
export function isHashMatch(givenHash: string, storedHash: string): boolean {
  const given = Buffer.from(givenHash, 'hex')
  const stored = Buffer.from(storedHash, 'hex')
  return given.length === stored.length && timingSafeEqual(given, stored)
}
