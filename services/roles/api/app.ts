import type { FastifyInstance } from 'fastify'
import { validatorCompiler } from 'fastify-type-provider-zod'
import type { Deps } from '../../infrastructure/runtime.ts'
import { httpDuration, httpRequests } from '../../infrastructure/metrics.ts'
import { composeContext, stopContext } from './composition.ts'
import type { ApiContext } from './context.ts'
import { createServer, hardenHttp } from './http-hardening.ts'
import { compileResponses, registerApiDescription, serializeResponses } from './openapi.ts'
import { traceRequests } from './request-spans.ts'
import { recordRoutes, registerRoutes, type RegisteredRoute } from './route-table.ts'

/**
 * Builds the HTTP app without listening (app/server split): tests inject requests or listen on
 * port 0 themselves. The server's hardening (http-hardening.ts), then the context the routes are
 * built from (composition.ts), then the routes (route-table.ts).
 */
export async function buildApp(deps: Deps, stopping: AbortSignal): Promise<{ app: FastifyInstance; context: ApiContext; routes: RegisteredRoute[] }> {
  const app = createServer(deps)
  const routes = recordRoutes(app)
  app.setValidatorCompiler(validatorCompiler)
  app.setSerializerCompiler(deps.config.tunables.validate_responses ? serializeResponses : compileResponses)
  await hardenHttp(app, deps)
  await registerApiDescription(app, deps.config.publicUrl)

  const context = await composeContext(deps, stopping)
  if (deps.tracer !== null) traceRequests(app, deps.tracer)
  // Only where /metrics is served (METRICS_PORT): otherwise the hook would cost every request for nothing.
  if (deps.config.metricsPort !== null) {
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? 'unmatched'
      httpRequests.inc({ method: request.method, route, status: reply.statusCode })
      httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000)
    })
  }
  app.addHook('onClose', () => stopContext(context))

  await registerRoutes(app, context, routes)
  return { app, context, routes }
}
