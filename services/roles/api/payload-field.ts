import { z } from 'zod'
import { maxPayloadDepth } from '../../../domain/job-options.ts'
import { invalidRequest } from './errors.ts'
import { findUnstorableText } from '../../../projections/storable-values.ts'
import { unstorableTextMessage } from './storable.ts'
import { anyText } from './text-fields.ts'

/**
 * The JSON payload a job carries, wherever it comes from: job creation and recurring schedules
 * (whose payload every fired job carries) take the same limits (docs/api-notes.md, "Limits we chose").
 */

/**
 * What makes a payload unfit, if anything, checked without recursion (the input is untrusted):
 * nesting deeper than maxPayloadDepth, or a number JSON cannot write back (`1e999` parses as
 * Infinity, which the read model would store as null and the log as Infinity).
 */
function payloadProblem(value: unknown): string | null {
  const stack: Array<[unknown, number]> = [[value, 1]]
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!
    if (typeof v === 'number' && !Number.isFinite(v)) return 'must not hold numbers outside the range of a double'
    if (v === null || typeof v !== 'object') continue
    if (depth > maxPayloadDepth) return `must not nest deeper than ${maxPayloadDepth} levels`
    for (const child of Object.values(v)) stack.push([child, depth + 1])
  }
  return null
}

/** Keys in a refusal's path are cut here: a key may be as long as the body. */
const maxPathKeyLength = 100

/**
 * A JSON object within the depth limit whose strings, keys and values at any depth, every read
 * model holds unchanged (projections/storable-values.ts), else refused naming the first one's
 * path (refused, not altered: the worker must get the payload it was given); its size is
 * checked by `assertPayloadSize` once the body is read.
 */
export const jobPayload = z.record(anyText(), z.unknown()).superRefine(refuseUnstorable)

/** Refuses a JSON value nested too deep, with a number JSON cannot write back, or with text a read model cannot hold. */
function refuseUnstorable(value: unknown, ctx: z.RefinementCtx): void {
  const problem = payloadProblem(value)
  if (problem !== null) return void ctx.addIssue({ code: 'custom', message: problem })
  const unstorable = findUnstorableText(value)
  if (unstorable === null) return
  const path = unstorable.path.map((k) => (typeof k === 'string' && k.length > maxPathKeyLength ? `${k.slice(0, maxPathKeyLength)}…` : k))
  const message = unstorable.isKey ? `a key ${unstorableTextMessage}` : unstorableTextMessage
  ctx.addIssue({ code: 'custom', message, path })
}

/** The largest result an ack may carry, as JSON text (README, "Security and limits"). */
export const maxResultBytes = 64 * 1024

/**
 * What a worker's handler returned, on a successful ack: any JSON value under the payload's rules
 * (depth, numbers, storable text) and at most maxResultBytes as JSON; null means none.
 */
export const jobResult = z
  .unknown()
  .superRefine((value, ctx) => {
    if (value === undefined || value === null) return
    refuseUnstorable(value, ctx)
    const bytes = Buffer.byteLength(JSON.stringify(value))
    if (bytes > maxResultBytes) ctx.addIssue({ code: 'custom', message: `${bytes} bytes is over the limit of ${maxResultBytes}` })
  })
  .describe(`what the handler returned: any JSON, at most ${maxResultBytes} bytes; kept when \`status\` is \`succeeded\``)

/**
 * 400 `invalid_request` when the payload's JSON is over `limitBytes` (the `max_payload_bytes`
 * tunable). A body no larger than the limit needs no measuring: the payload is part of it.
 */
export function assertPayloadSize(payload: unknown, bodyBytes: number, limitBytes: number, field = 'body.payload'): void {
  const payloadBytes = bodyBytes <= limitBytes ? bodyBytes : Buffer.byteLength(JSON.stringify(payload))
  if (payloadBytes > limitBytes) throw invalidRequest(`${field}: ${payloadBytes} bytes is over the limit of ${limitBytes}`)
}

/** The request's declared body size, or Infinity (chunked) so that the payload is measured. */
export function bodyBytesOf(headers: { 'content-length'?: string | undefined }): number {
  return Number(headers['content-length'] ?? Number.POSITIVE_INFINITY)
}
