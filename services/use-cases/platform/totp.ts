import { randomInt } from 'node:crypto'
import { generateSecret, generateURI, verify } from 'otplib'
import { sha256Hex } from '../../infrastructure/secrets.ts'

/** RFC 6238 as the spec fixes it: SHA1, 6 digits, 30-second steps, ±1 step accepted. */
const period = 30

export function newTotpSecret(): string {
  return generateSecret()
}

export function otpauthUri(secret: string, email: string): string {
  return generateURI({ issuer: 'jobsvc', label: email, secret, algorithm: 'sha1', digits: 6, period })
}

/**
 * The time step a 6-digit code belongs to (current step ±1), or null when it matches none.
 * Replay (a step at or before the last accepted one) is the user aggregate's rule.
 */
export async function stepOfCode(secret: string, code: string, now: Date): Promise<number | null> {
  if (!/^\d{6}$/.test(code)) return null
  const epoch = Math.floor(now.getTime() / 1000)
  const result = await verify({ secret, token: code, epoch, epochTolerance: period, algorithm: 'sha1', digits: 6, period })
  return result.valid ? Math.floor(epoch / period) + result.delta : null
}

const recoveryAlphabet = 'abcdefghjkmnpqrstuvwxyz23456789'
export const recoveryCodePattern = /^[a-z0-9]{4}-[a-z0-9]{4}$/i
export const recoveryCodeCount = 10

/** Ten `xxxx-xxxx` codes from an alphabet without look-alike characters (no 0/o, 1/l/i). */
export function newRecoveryCodes(): string[] {
  const pick = () => recoveryAlphabet[randomInt(recoveryAlphabet.length)]!
  const part = () => Array.from({ length: 4 }, pick).join('')
  return Array.from({ length: recoveryCodeCount }, () => `${part()}-${part()}`)
}

/** Codes are compared case-insensitively; only this digest is stored. */
export function hashRecoveryCode(code: string): string {
  return sha256Hex(code.trim().toLowerCase())
}
