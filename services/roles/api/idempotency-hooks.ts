import type { FastifyInstance, FastifyReply, FastifyRequest, onSendHookHandler, preHandlerHookHandler, preValidationHookHandler } from 'fastify'
import { fingerprintOf, IdempotencyStore, isIdempotencyKey, type Reservation } from './idempotency-store.ts'
import { deriveKey } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { idempotencyKeyReuse, invalidIdempotencyKey, type ApiError } from './errors.ts'

declare module 'fastify' {
  interface FastifyRequest {
    idempotency: { reservation: Extract<Reservation, { outcome: 'reserved' }>; fingerprint: string } | null
  }
  interface FastifyContextConfig {
    /**
     * The route holds its request open up to its own deadline (a long poll): a duplicate of one
     * still in flight is refused at once (409 `idempotency_key_reuse`) rather than held as long.
     */
    longPoll?: boolean
  }
}

const stateChanging = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])
/** The headers a replay repeats besides the body (the quota and rate headers are current, not stored). */
const repeatedHeaders = ['location', 'x-event-seq', 'deprecation']
/** RFC 9745: the body-field `idempotency_key` is deprecated since the platform's beta (2026-04-14). */
export const bodyKeyDeprecation = '@1776124800'

function bodyKeyOf(request: FastifyRequest): string | null {
  const body = request.body as { idempotency_key?: unknown } | undefined
  return request.method === 'POST' && typeof body?.idempotency_key === 'string' ? body.idempotency_key : null
}

function sendStored(reply: FastifyReply, stored: { status: number; body: string; headers: Record<string, string> }): FastifyReply {
  return reply
    .code(stored.status)
    .headers(stored.headers)
    .header('Idempotent-Replay', 'true')
    .type('application/json; charset=utf-8')
    .send(stored.body)
}

/** The store of every key's reservation and answer, sealed under a key derived from JOBSVC_SECRET. */
export function openIdempotencyStore(deps: Deps): IdempotencyStore {
  return new IdempotencyStore(deps.idempotency, deps.now, deriveKey(deps.config.secret, 'idempotent-answers-at-rest'))
}

/**
 * Why a key's request may not run: reused for another request, still running elsewhere, or run
 * already with an answer that cannot be repeated (unreadable, or too large to have been kept).
 */
export function keyRefusal(outcome: 'mismatch' | 'in_flight' | 'unreadable' | 'unstored'): ApiError {
  switch (outcome) {
    case 'mismatch':
      return idempotencyKeyReuse('this Idempotency-Key was used with a different request')
    case 'in_flight':
      return idempotencyKeyReuse('a request with this Idempotency-Key is still running; retry shortly')
    case 'unreadable':
      // Running it again could do twice what the first did; repeating it needs the secret it
      // was sealed under. The key expires 24 hours after its first use.
      return idempotencyKeyReuse("this Idempotency-Key's stored answer cannot be read (the service's JOBSVC_SECRET changed); use a new key")
    case 'unstored':
      return idempotencyKeyReuse("this Idempotency-Key's request ran, but its answer was too large to keep for replays; use a new key")
  }
}

const pollInFlight = () => idempotencyKeyReuse('a poll with this Idempotency-Key is still waiting for jobs; send it again once it has answered')

/** The path a single create is fingerprinted under: a batch item keyed in its body is that same request. */
const singleCreatePath = '/jobsvc/v1/jobs'

export type ItemKey =
  /** The item runs; its answer is then stored (`completeItemKey`) or the key freed (`releaseItemKey`). */
  | { outcome: 'reserved'; reservation: Extract<Reservation, { outcome: 'reserved' }>; fingerprint: string }
  | { outcome: 'replay'; status: number; body: unknown }
  | { outcome: 'refused'; error: ApiError }

/** A batch item's identity for its body-field key: that of a single create with the same (validated) body. */
export function singleCreateFingerprint(body: unknown): string {
  return fingerprintOf('POST', singleCreatePath, body)
}

/**
 * The deprecated body-field `idempotency_key` of one batch item: reserved exactly as a single
 * create of the same body reserves it (same key space, same fingerprint), so a batch item and a
 * single create replay each other's answers.
 */
export async function reserveItemKey(store: IdempotencyStore, projectId: string, key: string, fingerprint: string): Promise<ItemKey> {
  const reservation = await store.reserve(IdempotencyStore.keyOf(projectId, key), fingerprint)
  switch (reservation.outcome) {
    case 'reserved':
      return { outcome: 'reserved', reservation, fingerprint }
    case 'replay':
      return { outcome: 'replay', status: reservation.response.status, body: JSON.parse(reservation.response.body) as unknown }
    default:
      return { outcome: 'refused', error: keyRefusal(reservation.outcome) }
  }
}

/** Stores a batch item's answer as the single create's (status, body, Location, X-Event-Seq, Deprecation). */
export async function completeItemKey(
  store: IdempotencyStore,
  held: Extract<ItemKey, { outcome: 'reserved' }>,
  body: { id: string },
  seq: number,
): Promise<void> {
  const headers = { location: `${singleCreatePath}/${body.id}`, 'x-event-seq': String(seq), deprecation: bodyKeyDeprecation }
  await store.complete(held.reservation, held.fingerprint, { status: 201, body: JSON.stringify(body), headers })
}

export async function releaseItemKey(store: IdempotencyStore, held: Extract<ItemKey, { outcome: 'reserved' }>): Promise<void> {
  await store.release(held.reservation)
}

/**
 * The spec's replay rules for every state-changing `/jobsvc/v1` route: the `Idempotency-Key`
 * header (and on job creation the deprecated body field) reserves the key before the handler
 * runs; a 2xx answer is stored, anything else frees the key. A duplicate of a request still
 * running waits for its answer and replays it, except on a long poll (`config.longPoll`), where
 * it is refused at once.
 */
export function registerIdempotency(app: FastifyInstance, deps: Deps, store: IdempotencyStore): void {
  app.decorateRequest('idempotency', null)

  // Callback-style hooks on the state-changing routes only: a read, or a write without a key,
  // passes through three plain function calls and no promise.
  const checkKeyHeader: preValidationHookHandler = (request, _reply, done) => {
    const header = request.headers['idempotency-key']
    if (header !== undefined && (Array.isArray(header) || !isIdempotencyKey(header))) return done(invalidIdempotencyKey())
    done()
  }

  const reserveKey: preHandlerHookHandler = (request, reply, done) => {
    const header = request.headers['idempotency-key'] as string | undefined
    const bodyKey = bodyKeyOf(request)
    if (bodyKey !== null) void reply.header('Deprecation', bodyKeyDeprecation)
    const key = header ?? bodyKey
    if (key === undefined || key === null) return done()
    const fingerprint = fingerprintOf(request.method, request.url.split('?')[0]!, request.body)
    const longPoll = request.routeOptions.config.longPoll === true
    store.reserve(IdempotencyStore.keyOf(request.principal.projectId, key), fingerprint, { wait: !longPoll }).then((reservation) => {
      switch (reservation.outcome) {
        case 'reserved':
          request.idempotency = { reservation, fingerprint }
          return done()
        case 'replay':
          // Answered here: the handler does not run.
          return void sendStored(reply, reservation.response)
        case 'in_flight':
          return done(longPoll ? pollInFlight() : keyRefusal(reservation.outcome))
        default:
          return done(keyRefusal(reservation.outcome))
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
