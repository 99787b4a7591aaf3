import { createHmac, timingSafeEqual } from 'node:crypto'

/** Spec, Dashboard JWT: inbound provider webhooks are accepted within 5 minutes of their timestamp. */
export const signatureToleranceMs = 5 * 60 * 1000
export const signatureHeader = 'jobsvc-signature'

/**
 * `Jobsvc-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` (the scheme of
 * the common payment providers). Several `v1=` entries may be sent while a secret rotates.
 */
export function signPayload(secret: string, body: string, at: Date): string {
  const t = Math.floor(at.getTime() / 1000)
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`
}

export type SignatureCheck = 'ok' | 'missing' | 'invalid'

export function checkSignature(secret: string, header: string | undefined, body: string, now: Date): SignatureCheck {
  if (header === undefined || header.trim() === '') return 'missing'
  const parts = header.split(',').map((p) => p.trim().split('='))
  const t = Number(parts.find(([k]) => k === 't')?.[1])
  const signatures = parts.filter(([k]) => k === 'v1').map(([, v]) => v ?? '')
  if (!Number.isInteger(t) || signatures.length === 0) return 'invalid'
  if (Math.abs(now.getTime() - t * 1000) > signatureToleranceMs) return 'invalid'
  const expected = createHmac('sha256', secret).update(`${t}.${body}`).digest()
  const matches = signatures.some((s) => {
    const given = /^[0-9a-f]{64}$/i.test(s) ? Buffer.from(s, 'hex') : Buffer.alloc(0)
    return given.length === expected.length && timingSafeEqual(given, expected)
  })
  return matches ? 'ok' : 'invalid'
}
