import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import type { ApiContext } from './context.ts'
import type { Principal, ProjectRole } from './api-key-directory.ts'
import { dashboardRoutes } from './dashboard-assets.ts'
import { registerIdempotency } from './idempotency-hooks.ts'
import { authenticateProjectCaller, requireDeclaredRoles } from './project-caller.ts'
import { admitProjectRequest, registerRequestWeights } from './request-limit.ts'
import { activityRoutes } from './routes/activity.ts'
import { adminRoutes } from './routes/admin.ts'
import { alertRoutes } from './routes/alerts.ts'
import { eventRoutes } from './routes/events.ts'
import { auditKeyRoutes, auditRoutes } from './routes/audit.ts'
import { eventConsumerRoutes } from './routes/event-consumers.ts'
import { auditLogExportRoutes } from './routes/audit-log-export.ts'
import { healthRoutes } from './routes/health.ts'
import { jobRoutes } from './routes/jobs.ts'
import { jobBulkRoutes } from './routes/jobs-bulk.ts'
import { metricsRoutes } from './routes/metrics.ts'
import { operationRoutes } from './routes/operations.ts'
import { anonymousAuthRoutes, sessionAuthRoutes } from './routes/platform-auth.ts'
import { platformBillingRoutes, providerWebhookRoutes } from './routes/platform-billing.ts'
import { emailProviderWebhookRoutes, notificationRoutes } from './routes/platform-notifications.ts'
import { platformProjectRoutes } from './routes/platform-projects.ts'
import { recurringRoutes } from './routes/recurring.ts'
import { removedWrapperRoutes } from './routes/removed-wrappers.ts'
import { queueRoutes } from './routes/queues.ts'
import { apiKeyRetryPolicyRoutes, sessionRetryPolicyRoutes } from './routes/retry-policy.ts'
import { webhookRoutes } from './routes/webhooks.ts'
import { workerRoutes } from './routes/workers.ts'

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal
  }
}

export interface RegisteredRoute {
  method: string | string[]
  url: string
  schema: { body?: unknown; querystring?: unknown; params?: unknown; headers?: unknown } | undefined
  /** A body the route reads and validates itself (openapi.ts). */
  documentedBody: unknown
  /** The least project role a dashboard session needs (project-caller.ts); none outside the project routes. */
  role: ProjectRole | undefined
}

/**
 * Every route with the schemas it validates with, as registered from now on (a test walks them:
 * every string a request can carry is bounded before any pattern runs). Call it before anything
 * registers a route.
 */
export function recordRoutes(app: FastifyInstance): RegisteredRoute[] {
  const routes: RegisteredRoute[] = []
  app.addHook('onRoute', (route) => {
    routes.push({
      method: route.method,
      url: route.url,
      schema: route.schema as RegisteredRoute['schema'],
      documentedBody: route.config?.documentedBody,
      role: route.config?.role,
    })
  })
  return routes
}

/** A route plugin, built from the part of the context it uses, and where it is mounted. */
interface RouteEntry {
  routes: (context: ApiContext) => FastifyPluginAsync
  prefix?: string
}

/**
 * Under `/jobsvc/v1`, behind the project caller's hook (an API key, or a member's session with the
 * route's declared role): each plugin by its prefix there, registered in this order.
 */
const projectRoutes: Record<string, RouteEntry['routes']> = {
  '/jobs': jobRoutes,
  '/jobs/bulk': jobBulkRoutes,
  '/workers': workerRoutes,
  '/recurring': recurringRoutes,
  '/alerts': alertRoutes,
  '/activity': activityRoutes,
  '/metrics': metricsRoutes,
  '/webhooks': webhookRoutes,
  '/operations': operationRoutes,
  '/events': eventRoutes,
  '/event-consumers': eventConsumerRoutes,
  '/audit': auditRoutes,
  '/queues': queueRoutes,
  // `/retry-policy` and `/queues/:queue/retry-policy`, at the version's root.
  '': apiKeyRetryPolicyRoutes,
}

/** The project routes with the hooks that apply to them alone: the caller, the hourly limit, idempotency keys. */
function projectRouteGroup(context: ApiContext): FastifyPluginAsync {
  return async (v1) => {
    requireDeclaredRoles(v1)
    v1.addHook('onRequest', async (request, reply) => {
      // Every route here declares its role (requireDeclaredRoles); `owner` would only fail closed.
      request.principal = await authenticateProjectCaller(context, request.headers, request.routeOptions.config.role ?? 'owner')
      await admitProjectRequest(context, request.principal.project, reply)
    })
    registerIdempotency(v1, context.deps, context.idempotency)
    registerRequestWeights(v1, context)
    for (const [prefix, routes] of Object.entries(projectRoutes)) await register(v1, { routes, prefix }, context)
  }
}

/** Every route of the API, in the order they are registered. */
const routeTable: readonly RouteEntry[] = [
  { routes: healthRoutes, prefix: '/jobsvc/health' },
  { routes: projectRouteGroup, prefix: '/jobsvc/v1' },
  // Under /jobsvc/v1 but outside the key hook above: it authenticates by dashboard session.
  { routes: auditLogExportRoutes, prefix: '/jobsvc/v1/projects' },
  // Public: a verifier needs the signing keys and nothing else (docs/audit.md).
  { routes: auditKeyRoutes, prefix: '/jobsvc/v1/audit/keys' },
  { routes: anonymousAuthRoutes, prefix: '/platform/v1/auth' },
  { routes: sessionAuthRoutes, prefix: '/platform/v1/auth' },
  { routes: platformProjectRoutes, prefix: '/platform/v1' },
  { routes: platformBillingRoutes, prefix: '/platform/v1' },
  { routes: sessionRetryPolicyRoutes, prefix: '/platform/v1' },
  { routes: providerWebhookRoutes, prefix: '/platform/v1' },
  { routes: adminRoutes, prefix: '/platform/v1/admin' },
  { routes: dashboardRoutes },
  { routes: notificationRoutes, prefix: '/platform/v1' },
  { routes: emailProviderWebhookRoutes, prefix: '/platform/v1' },
]

async function register(app: FastifyInstance, entry: RouteEntry, context: ApiContext): Promise<void> {
  await app.register(entry.routes(context), entry.prefix === undefined ? {} : { prefix: entry.prefix })
}

/** Registers the route table, then the removed wrappers, which mirror the routes `recordRoutes` saw. */
export async function registerRoutes(app: FastifyInstance, context: ApiContext, routes: readonly RegisteredRoute[]): Promise<void> {
  app.decorateRequest('principal', null as unknown as Principal)
  for (const entry of routeTable) await register(app, entry, context)
  // Last: it mirrors the platform auth and billing routes registered above.
  await app.register(removedWrapperRoutes(routes))
}
