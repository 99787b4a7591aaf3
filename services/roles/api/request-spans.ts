import { SpanKind, SpanStatusCode, type Span, type Tracer } from '@opentelemetry/api'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { remoteParent } from '../../infrastructure/tracing.ts'

/**
 * One server span per request, named by method and route pattern (bounded, like the metrics'
 * labels), continuing the caller's trace when the request carries a valid `traceparent`.
 * Registered only when tracing is on, so requests pay nothing for it otherwise.
 */
export function traceRequests(app: FastifyInstance, tracer: Tracer): void {
  const spans = new WeakMap<FastifyRequest, Span>()
  app.addHook('onRequest', async (request) => {
    const route = request.routeOptions.url ?? 'unmatched'
    const span = tracer.startSpan(
      `${request.method} ${route}`,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': request.method, 'http.route': route } },
      remoteParent(request.headers.traceparent),
    )
    spans.set(request, span)
  })
  app.addHook('onResponse', async (request, reply) => {
    const span = spans.get(request)
    if (span === undefined) return
    span.setAttribute('http.response.status_code', reply.statusCode)
    if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
    span.end()
  })
}
