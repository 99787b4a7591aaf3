import type { FastifyInstance, FastifyRequest } from 'fastify'
import { checkSignature, signatureHeader } from '../../use-cases/metering/provider-signature.ts'
import { invalidRequest, invalidSignature, missingSignature } from './errors.ts'

/**
 * The inbound providers' webhooks (payment, e-mail): signed, not authenticated, outside the
 * anonymous limit. The signature covers the raw bytes, so a scope that serves one reads JSON as
 * text (`readJsonAsText`) and parses it only once it verifies (`verifiedJson`).
 */
export function readJsonAsText(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => done(null, body))
}

/**
 * The request's body parsed as JSON, once its `Jobsvc-Signature` verifies under `secret` within
 * 5 minutes of `now`: 400 `missing_signature` without the header, 400 `invalid_signature` when it
 * does not verify (always, without a secret), 400 `invalid_request` for a body that is not JSON.
 */
export function verifiedJson(secret: string | null, request: FastifyRequest, now: Date): unknown {
  const raw = typeof request.body === 'string' ? request.body : ''
  const header = request.headers[signatureHeader]
  const check = checkSignature(secret ?? '', Array.isArray(header) ? header.join(',') : header, raw, now)
  if (check === 'missing') throw missingSignature(signatureHeader)
  // Without a secret nothing verifies: an empty key would let anyone sign.
  if (check === 'invalid' || secret === null) throw invalidSignature()
  try {
    return JSON.parse(raw)
  } catch {
    throw invalidRequest('the body is not valid JSON')
  }
}
