import { createHmac, randomBytes, randomInt } from 'node:crypto'
import { httpRequest, startHarness, type Harness, type HttpResponse, type TestLike } from './harness.ts'
import { startSmtpSink, tokenFromMail, type SmtpSink } from './smtp-sink.ts'

/**
 * TOTP (RFC 6238: HMAC-SHA1, 6 digits, 30 s) written from the RFC, independent of the service's
 * otplib, so tests check the service against the standard rather than against itself.
 */
export function totpCode(base32Secret: string, at: Date = new Date(), stepOffset = 0): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'
  let bits = ''
  for (const c of base32Secret.replace(/=+$/, '').toUpperCase()) {
    const v = alphabet.indexOf(c)
    if (v < 0) throw new Error(`not base32: ${c}`)
    bits += v.toString(2).padStart(5, '0')
  }
  const key = Buffer.from((bits.match(/.{8}/g) ?? []).map((b) => parseInt(b, 2)))
  const counter = Math.floor(at.getTime() / 1000 / 30) + stepOffset
  const message = Buffer.alloc(8)
  message.writeBigUInt64BE(BigInt(counter))
  const mac = createHmac('sha1', key).update(message).digest()
  const offset = mac[mac.length - 1]! & 0x0f
  const binary = (mac.readUInt32BE(offset) & 0x7fffffff) % 1_000_000
  return binary.toString().padStart(6, '0')
}

/** A fresh documentation-range address per caller, so the per-IP limit is each test's own. */
export function freshIp(): string {
  return `198.51.${randomInt(0, 255)}.${randomInt(1, 255)}`
}

export function freshEmail(tag = 'user'): string {
  return `${tag}-${randomBytes(5).toString('hex')}@example.com`
}

export interface PlatformHarness extends Harness {
  smtp: SmtpSink
  /** A request to the platform routes from `ip` (X-Forwarded-For; TRUST_PROXY is on here). */
  platform<T = any>(
    method: string,
    path: string,
    body?: unknown,
    options?: { ip?: string; jwt?: string; cookie?: string; headers?: Record<string, string> },
  ): Promise<HttpResponse<T>>
}

/** The service with a real SMTP sink and TRUST_PROXY=true (tests pick their client address). */
export async function startPlatformHarness(t: TestLike, file: string, options: Parameters<typeof startHarness>[2] = {}): Promise<PlatformHarness> {
  const smtp = await startSmtpSink(t)
  const h = await startHarness(t, file, {
    ...options,
    config: { smtpUrl: smtp.url, trustProxy: true, publicUrl: 'https://dash.example.test', ...options.config },
  })
  return {
    ...h,
    smtp,
    platform(method, path, body, o = {}) {
      const headers: Record<string, string> = { 'x-forwarded-for': o.ip ?? freshIp(), ...o.headers }
      if (o.jwt !== undefined) headers.authorization = `Bearer ${o.jwt}`
      if (o.cookie !== undefined) headers.cookie = o.cookie
      return httpRequest(h.url, null, method, path, body, headers)
    },
  }
}

/** The `sv_jwt` value a login answer set. */
export function sessionFrom(res: HttpResponse): string {
  const cookie = res.headers.get('set-cookie') ?? ''
  const match = /(?:^|,\s*)sv_jwt=([^;]*)/.exec(cookie)
  if (!match || match[1] === '') throw new Error(`no sv_jwt cookie in ${JSON.stringify(cookie)}`)
  return match[1]!
}

export interface VerifiedUser {
  userId: string
  email: string
  password: string
  projectId: string
  apiKey: string
  jwt: string
}

/** Sign up, read the e-mail, verify, log in: a user as a new customer would make one. */
export async function newVerifiedUser(h: PlatformHarness, options: { email?: string; password?: string; plan?: string } = {}): Promise<VerifiedUser> {
  const email = options.email ?? freshEmail()
  const password = options.password ?? `pw-${randomBytes(8).toString('hex')}`
  const signup = await h.platform('POST', '/platform/v1/auth/signup', {
    email,
    password,
    accept_terms: true,
    ...(options.plan ? { plan: options.plan } : {}),
  })
  if (signup.status !== 201) throw new Error(`signup: ${signup.status} ${JSON.stringify(signup.body)}`)
  const token = tokenFromMail(await h.smtp.next(email, /verify/i))
  const verified = await h.platform('POST', '/platform/v1/auth/verify', { token })
  if (verified.status !== 200) throw new Error(`verify: ${verified.status} ${JSON.stringify(verified.body)}`)
  const login = await h.platform('POST', '/platform/v1/auth/login', { email, password })
  if (login.status !== 200) throw new Error(`login: ${login.status} ${JSON.stringify(login.body)}`)
  return { userId: signup.body.user_id, email, password, projectId: verified.body.project_id, apiKey: verified.body.api_key, jwt: sessionFrom(login) }
}

/** Invites a fresh address into `projectId` with `role`, signs it up, verifies it and accepts the invitation. */
export async function joinProject(h: PlatformHarness, owner: VerifiedUser, projectId: string, role: string): Promise<VerifiedUser> {
  const email = freshEmail(role)
  const invited = await h.platform('POST', `/platform/v1/projects/${projectId}/members`, { email, role }, { jwt: owner.jwt })
  if (invited.status !== 201) throw new Error(`invite: ${invited.status} ${JSON.stringify(invited.body)}`)
  const member = await newVerifiedUser(h, { email })
  const token = tokenFromMail(await h.smtp.next(email, /invited/i))
  const accepted = await h.platform('POST', '/platform/v1/invites/accept', { token }, { jwt: member.jwt })
  if (accepted.status !== 200) throw new Error(`accept: ${accepted.status} ${JSON.stringify(accepted.body)}`)
  return member
}
