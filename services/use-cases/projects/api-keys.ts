import { randomBytes } from 'node:crypto'
import { isSameDigest, sha256Hex } from '../../infrastructure/secrets.ts'

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

/** The stored form of a key: its SHA-256 (the spec, Authentication 3). */
export const hashApiKey = sha256Hex

/** Compares two hex digests in constant time. */
export const isHashMatch = isSameDigest
