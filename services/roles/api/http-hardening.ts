import cors from '@fastify/cors'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import type { Deps } from '../../infrastructure/runtime.ts'
import { invalidRequest, rawClientErrorResponse, registerErrorHandling, sendError, uriTooLong } from './errors.ts'
import { projectHeader } from './project-caller.ts'
import { registerVersionSunset } from './version-sunset.ts'

/**
 * Deeper JSON bodies are refused before any route sees them: validation, the idempotency
 * fingerprint and the codecs all recurse, and a 1 MiB body of `[` overflows the stack (a 500).
 * Payloads have their own, smaller depth limit (payload-field.ts) inside this one.
 */
export const maxBodyDepth = 100

/**
 * Where `value` nests deeper than `limit`, found without recursion (the input is untrusted): the
 * top-level field it happens under (`body.payload`), `body` itself, or null when it does not.
 */
function tooDeepUnder(value: unknown, limit: number): string | null {
  const stack: Array<[unknown, number, string]> = [[value, 1, 'body']]
  while (stack.length > 0) {
    const [v, depth, field] = stack.pop()!
    if (v === null || typeof v !== 'object') continue
    if (depth > limit) return field
    for (const [key, child] of Object.entries(v)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1, depth === 1 && !Array.isArray(v) ? `body.${key}` : field])
    }
  }
  return null
}

/** proxy-addr's test of the `hop`-th address back from the socket (0 is the socket's own peer). */
const trustHops = (hops: number) => (_address: string, hop: number) => hop < hops

/** Bodies above this are refused with 413 before parsing; payloads have their own, smaller limit. */
const bodyLimitBytes = 1024 * 1024
/** Longer request URIs are refused with 414 (Node's own limit is 16 KiB for the request line and headers together: 431). */
export const maxUriLength = 8192
/** A request (line, headers and body) must arrive within this, or the connection gets 408: a client trickling bytes holds no socket forever. */
const requestTimeoutMs = 30_000

/**
 * The Fastify instance with the server's own bounds: body size, URL and parameter length, request
 * timeout, which proxies to trust, and requests refused below the routes answered in the envelope.
 */
export function createServer(deps: Deps): FastifyInstance {
  return Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    // One log line per request would dominate the log at thousands of requests per second.
    logController: new LogController({ disableRequestLogging: true }),
    // No child logger per request (pino's child() on every request was measurable); the few
    // request-scoped log lines name the request id themselves.
    childLoggerFactory: (logger) => logger,
    genReqId: () => deps.newUlid(),
    requestIdHeader: false,
    bodyLimit: bodyLimitBytes,
    // Fastify's default (100) answers a longer path parameter with its own 414 body; ids this
    // long are simply unknown (404 in the envelope), so the routes get to say so.
    routerOptions: { maxParamLength: 2048 },
    // A hop count trusts that many proxies in front of the service, as in Express: the client is
    // the entry the outermost trusted proxy appended. Fastify 5 given a bare number trusts none.
    trustProxy: typeof deps.config.trustProxy === 'number' ? trustHops(deps.config.trustProxy) : deps.config.trustProxy,
    return503OnClosing: false,
    requestTimeout: requestTimeoutMs,
    // Requests refused by Node's parser, and URLs refused by Fastify's router, answer in the
    // envelope with a request id like every other answer (errors.ts).
    clientErrorHandler(err, socket) {
      if ((err as NodeJS.ErrnoException).code === 'ECONNRESET' || socket.destroyed) return
      if (socket.writable) socket.write(rawClientErrorResponse(err as NodeJS.ErrnoException, deps.newUlid()))
      socket.destroy(err)
    },
    frameworkErrors: (err, request, reply) => sendError(request, reply, err),
  })
}

/**
 * What every request passes before a route: JSON bodies only, bounded in depth; the version's
 * sunset; the request id on every answer and the URI length; the one error handler; CORS for the
 * dashboard's origin. Register it before any route (the CORS preflight is a route itself).
 */
export async function hardenHttp(app: FastifyInstance, deps: Deps): Promise<void> {
  // Every body here is JSON: without this, Fastify's default text/plain parser hands the routes a
  // string, answered 400 instead of 415 like any other media type.
  app.removeContentTypeParser('text/plain')
  // An empty body is "no body" (cancel and retry take none, yet many clients send the header).
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body)
    if (text.trim() === '') return done(null, undefined)
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      return done(invalidRequest('the body is not valid JSON'), undefined)
    }
    const tooDeep = tooDeepUnder(parsed, maxBodyDepth)
    if (tooDeep !== null) return done(invalidRequest(`${tooDeep}: nests deeper than the body's limit of ${maxBodyDepth} levels`), undefined)
    done(null, parsed)
  })

  // First, so that every v1 answer carries the sunset headers, refusals below included.
  registerVersionSunset(app, deps.config.v1Sunset, deps)
  app.addHook('onRequest', async (request, reply) => {
    void reply.header('X-Request-Id', request.id)
    if (request.url.length > maxUriLength) throw uriTooLong(maxUriLength)
  })
  registerErrorHandling(app)

  // The dashboard may be served from another origin than the API (spec: "cross-origin browser
  // clients send credentials"): the PUBLIC_URL origin may call the platform routes with cookies.
  const dashboardOrigin = deps.config.publicUrl === null ? null : new URL(deps.config.publicUrl).origin
  await app.register(cors, {
    origin: (origin, callback) => callback(null, origin !== undefined && origin === dashboardOrigin),
    credentials: true,
    methods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
    allowedHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key', projectHeader],
    exposedHeaders: [
      'X-Request-Id',
      'X-Event-Seq',
      'Location',
      'Retry-After',
      'Idempotent-Replay',
      'Content-Disposition',
      'Deprecation',
      'Sunset',
      'Link',
    ],
    maxAge: 600,
  })
}
