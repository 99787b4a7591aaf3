import { createHmac, timingSafeEqual } from 'node:crypto'

/** The envelope of a webhook delivery (spec, Outbound webhooks). */
export interface WebhookEvent<D = Record<string, unknown>> {
  event_id: string
  event_type: string
  created_at: string
  data: D & { schema_version: number }
}

export interface VerifyWebhookOptions {
  /** The request body exactly as received: verify before any JSON parser touches it. */
  rawBody: string | Uint8Array
  /** The `X-Service-Signature` header: `t=<unix seconds>,v1=<hex>[,v1=<hex>]`. */
  signatureHeader: string | null | undefined
  /**
   * The subscription's secret, or several (the new and the previous one around a rotation). An
   * empty secret (or none) is a TypeError: anyone can sign with the empty key, so a secret read
   * from an unset variable would accept forged deliveries.
   */
  secrets: string | string[]
  /** How far the timestamp may be from now, either way. Default 300 s (the spec's reference). */
  toleranceSeconds?: number
  /** The current time, for tests. */
  now?: Date
}

/** Why a delivery was refused: `missing_signature`, `malformed_signature`, `timestamp_out_of_tolerance` or `invalid_signature`. */
export class WebhookVerificationError extends Error {
  override name = 'WebhookVerificationError'
  constructor(
    readonly code: 'missing_signature' | 'malformed_signature' | 'timestamp_out_of_tolerance' | 'invalid_signature',
    message: string,
  ) {
    super(message)
  }
}

/**
 * Checks a delivery's signature (HMAC-SHA256 of `<t>.<raw body>` under a secret) and answers the
 * parsed event, or throws {@link WebhookVerificationError}. The header carries one `v1=` per
 * secret that signs during a rotation; any of them matching any of `secrets` is enough. Digests
 * are compared in constant time.
 */
export function verifyWebhook<D = Record<string, unknown>>(options: VerifyWebhookOptions): WebhookEvent<D> {
  const { signatureHeader, toleranceSeconds = 300 } = options
  const secrets = typeof options.secrets === 'string' ? [options.secrets] : options.secrets
  if (!Array.isArray(secrets) || secrets.length === 0 || secrets.some((s) => typeof s !== 'string' || s === '')) {
    throw new TypeError('secrets must be one or more non-empty strings (the subscription secret)')
  }
  if (!signatureHeader) throw new WebhookVerificationError('missing_signature', 'no X-Service-Signature header')
  let timestamp: string | undefined
  const digests: Buffer[] = []
  for (const part of signatureHeader.split(',')) {
    const [key, value = ''] = part.trim().split('=', 2) as [string, string?]
    if (key === 't') timestamp = value
    else if (key === 'v1' && /^[0-9a-f]{64}$/i.test(value)) digests.push(Buffer.from(value, 'hex'))
  }
  if (timestamp === undefined || !/^\d+$/.test(timestamp) || digests.length === 0) {
    throw new WebhookVerificationError('malformed_signature', 'the signature header needs t=<seconds> and at least one v1=<hex digest>')
  }
  const nowSeconds = Math.floor((options.now ?? new Date()).getTime() / 1000)
  if (Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) {
    throw new WebhookVerificationError('timestamp_out_of_tolerance', `the signature's timestamp is more than ${toleranceSeconds} s from now`)
  }
  const body = typeof options.rawBody === 'string' ? Buffer.from(options.rawBody, 'utf8') : Buffer.from(options.rawBody)
  let matched = false
  for (const secret of secrets) {
    const expected = createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest()
    // Every pair is compared, so the time taken does not tell which secret or value matched.
    for (const digest of digests) matched = timingSafeEqual(expected, digest) || matched
  }
  if (!matched) throw new WebhookVerificationError('invalid_signature', 'no v1 signature matches the given secrets')
  return JSON.parse(body.toString('utf8')) as WebhookEvent<D>
}
