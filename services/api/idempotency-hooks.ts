import type { FastifyInstance, FastifyReply, FastifyRequest, onSendHookHandler, preHandlerHookHandler, preValidationHookHandler } from 'fastify'
import { fingerprintOf, IdempotencyStore, isIdempotencyKey, type Reservation } from '../metering/idempotency.ts'
import { deriveKey } from '../platform/secrets.ts'
import type { Deps } from '../runtime.ts'
import { ApiError } from './errors.ts'

declare module 'fastify' {
  interface FastifyRequest {
    idempotency: { reservation: Extract<Reservation, { outcome: 'reserved' }>; fingerprint: string } | null
  }
}

const stateChanging = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])
/** The headers a replay repeats besides the body (the quota and rate headers are current, not stored). */
const repeatedHeaders = ['location', 'x-event-seq', 'deprecation']
/** RFC 9745: the body-field `idempotency_key` is deprecated since the platform's beta (2026-04-14). */
export const bodyKeyDeprecation = '@1776124800'

const invalidKey = () =>
  new ApiError(400, 'invalid_idempotency_key', 'Idempotency-Key must be 1 to 200 of A-Z a-z 0-9 _ -')

function bodyKeyOf(request: FastifyRequest): string | null {
  const body = request.body as { idempotency_key?: unknown } | undefined
  return request.method === 'POST' && typeof body?.idempotency_key === 'string' ? body.idempotency_key : null
}

function sendStored(reply: FastifyReply, stored: { status: number; body: string; headers: Record<string, string> }): FastifyReply {
  return reply.code(stored.status).headers(stored.headers).header('Idempotent-Replay', 'true').type('application/json; charset=utf-8').send(stored.body)
}

/**
 * The spec's replay rules for every state-changing `/jobsvc/v1` route: the `Idempotency-Key`
 * header (and on job creation the deprecated body field) reserves the key before the handler
 * runs; a 2xx answer is stored, anything else frees the key. A duplicate of a request still
 * running waits for its answer and replays it.
 */
export function registerIdempotency(app: FastifyInstance, deps: Deps): void {
  const store = new IdempotencyStore(deps.idempotency, deps.now, deriveKey(deps.config.secret, 'idempotent-answers-at-rest'))
  app.decorateRequest('idempotency', null)

  // Callback-style hooks on the state-changing routes only: a read, or a write without a key,
  // passes through three plain function calls and no promise.
  const checkKeyHeader: preValidationHookHandler = (request, _reply, done) => {
    const header = request.headers['idempotency-key']
    if (header !== undefined && (Array.isArray(header) || !isIdempotencyKey(header))) return done(invalidKey())
    done()
  }

  const reserveKey: preHandlerHookHandler = (request, reply, done) => {
    const header = request.headers['idempotency-key'] as string | undefined
    const bodyKey = bodyKeyOf(request)
    if (bodyKey !== null) void reply.header('Deprecation', bodyKeyDeprecation)
    const key = header ?? bodyKey
    if (key === undefined || key === null) return done()
    const fingerprint = fingerprintOf(request.method, request.url.split('?')[0]!, request.body)
    store.reserve(IdempotencyStore.keyOf(request.principal.projectId, key), fingerprint).then((reservation) => {
      switch (reservation.outcome) {
        case 'reserved':
          request.idempotency = { reservation, fingerprint }
          return done()
        case 'replay':
          // Answered here: the handler does not run.
          return void sendStored(reply, reservation.response)
        case 'mismatch':
          return done(new ApiError(409, 'idempotency_key_reuse', 'this Idempotency-Key was used with a different request'))
        case 'in_flight':
          return done(new ApiError(409, 'idempotency_key_reuse', 'a request with this Idempotency-Key is still running; retry shortly'))
        case 'unreadable':
          // Running it again could do twice what the first did; repeating it needs the secret it
          // was sealed under. The key expires 24 hours after its first use.
          return done(new ApiError(409, 'idempotency_key_reuse', "this Idempotency-Key's stored answer cannot be read (the service's JOBSVC_SECRET changed); use a new key"))
      }
    }, done)
  }

  const storeAnswer: onSendHookHandler = (request, reply, payload, done) => {
    const held = request.idempotency
    if (held === null) return done(null, payload)
    request.idempotency = null
    if (reply.statusCode >= 200 && reply.statusCode < 300 && typeof payload === 'string') {
      const headers: Record<string, string> = {}
      for (const name of repeatedHeaders) {
        const value = reply.getHeader(name)
        if (value !== undefined) headers[name] = String(value)
      }
      // The answer stands even if it could not be stored; a repeat would then run again.
      store.complete(held.reservation, held.fingerprint, { status: reply.statusCode, body: payload, headers }).then(
        () => done(null, payload),
        (err) => {
          deps.log.warn({ err, request_id: request.id }, 'idempotency: the answer could not be stored')
          done(null, payload)
        },
      )
    } else {
      store.release(held.reservation).then(
        () => done(null, payload),
        () => done(null, payload),
      )
    }
  }

  app.addHook('onRoute', (route) => {
    const methods = ([] as string[]).concat(route.method)
    if (!methods.some((m) => stateChanging.has(m))) return
    route.preValidation = [...([] as preValidationHookHandler[]).concat(route.preValidation ?? []), checkKeyHeader]
    route.preHandler = [reserveKey, ...([] as preHandlerHookHandler[]).concat(route.preHandler ?? [])]
    route.onSend = [...([] as onSendHookHandler[]).concat(route.onSend ?? []), storeAnswer]
  })
}
