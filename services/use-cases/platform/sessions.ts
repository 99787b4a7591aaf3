import { randomBytes } from 'node:crypto'
import { jwtVerify, SignJWT } from 'jose'
import { deriveKey } from '../../infrastructure/secrets.ts'

/** Dashboard sessions: HS256 JWTs, 7 days, signed with a key derived from JOBSVC_SECRET. */
export const sessionTtlSeconds = 7 * 24 * 60 * 60
export const sessionCookieName = 'sv_jwt'

const issuer = 'jobsvc'
const audience = 'jobsvc-platform'

export interface SessionClaims {
  userId: string
  /**
   * Issue instant in milliseconds. `iat` has whole seconds only, too coarse to compare with a
   * password change in the same second; sessions issued before the change are refused.
   */
  issuedAtMs: number
  /** The JWT's `jti`: what logout ends. */
  sessionId: string | null
  expiresAt: string
}

export class SessionIssuer {
  readonly #key: Uint8Array

  constructor(secret: string) {
    this.#key = deriveKey(secret, 'jwt-signing')
  }

  async issue(userId: string, now: Date): Promise<string> {
    const iat = Math.floor(now.getTime() / 1000)
    return new SignJWT({ iat_ms: now.getTime() })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(userId)
      .setIssuer(issuer)
      .setAudience(audience)
      .setIssuedAt(iat)
      .setExpirationTime(iat + sessionTtlSeconds)
      .setJti(randomBytes(12).toString('base64url'))
      .sign(this.#key)
  }

  /** The claims of a valid, unexpired session token; null for anything else. */
  async verify(token: string, now: Date): Promise<SessionClaims | null> {
    try {
      const { payload } = await jwtVerify(token, this.#key, {
        issuer,
        audience,
        algorithms: ['HS256'],
        currentDate: now,
        requiredClaims: ['sub', 'iat', 'exp'],
      })
      const issuedAtMs = typeof payload.iat_ms === 'number' ? payload.iat_ms : payload.iat! * 1000
      return {
        userId: payload.sub!,
        issuedAtMs,
        sessionId: typeof payload.jti === 'string' ? payload.jti : null,
        expiresAt: new Date(payload.exp! * 1000).toISOString(),
      }
    } catch {
      return null
    }
  }
}

const cookieAttributes = 'HttpOnly; Secure; SameSite=Strict; Path=/'

export function sessionCookie(token: string): string {
  return `${sessionCookieName}=${token}; ${cookieAttributes}; Max-Age=${sessionTtlSeconds}`
}

export const expiredSessionCookie = `${sessionCookieName}=; ${cookieAttributes}; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT`

/** The session token from `Authorization: Bearer` or, failing that, the `sv_jwt` cookie. */
export function sessionTokenOf(headers: { authorization?: string | undefined; cookie?: string | undefined }): string | null {
  const bearer = /^bearer\s+(\S+)$/i.exec(headers.authorization ?? '')
  if (bearer) return bearer[1]!
  for (const part of (headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=')
    if (eq > 0 && part.slice(0, eq).trim() === sessionCookieName) {
      const value = part.slice(eq + 1).trim()
      return value === '' ? null : value
    }
  }
  return null
}
