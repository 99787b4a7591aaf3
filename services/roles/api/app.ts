import cors from '@fastify/cors'
import type { ApiContext } from './context.ts'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import { validatorCompiler } from 'fastify-type-provider-zod'
import { ClaimLine } from '../../use-cases/jobs/claim-line.ts'
import { claimForPolls } from '../../use-cases/jobs/claimer.ts'
import { JobService } from '../../use-cases/jobs/job-service.ts'
import { ReadyIndex } from '../../use-cases/jobs/ready-index/index.ts'
import { BillingService } from '../../use-cases/metering/billing-service.ts'
import { PromoCodes } from '../../use-cases/metering/promo-codes.ts'
import { StaffService } from '../../use-cases/metering/staff-service.ts'
import { RequestRateLimiter } from '../../use-cases/metering/request-rate.ts'
import { AccountLifecycle } from '../../use-cases/platform/account-lifecycle.ts'
import { AccountService } from '../../use-cases/platform/accounts.ts'
import { TeamService } from '../../use-cases/platform/team-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { ApiKeyDirectory, type Principal, type ProjectRole } from './api-key-directory.ts'
import { invalidRequest, rawClientErrorResponse, registerErrorHandling, sendError, uriTooLong } from './errors.ts'
import { LogHead } from './log-head.ts'
import { ProjectSlots } from './project-slots.ts'
import { openIdempotencyStore, registerIdempotency } from './idempotency-hooks.ts'
import { admitProjectRequest, registerRequestWeights } from './request-limit.ts'
import { compileResponses, registerApiDescription, serializeResponses } from './openapi.ts'
import { ProjectionWatcher } from './projection-watcher.ts'
import { traceRequests } from './request-spans.ts'
import { healthRoutes } from './routes/health.ts'
import { activityRoutes } from './routes/activity.ts'
import { metricsRoutes } from './routes/metrics.ts'
import { alertRoutes } from './routes/alerts.ts'
import { auditLogExportRoutes } from './routes/audit-log-export.ts'
import { webhookRoutes } from './routes/webhooks.ts'
import { jobRoutes } from './routes/jobs.ts'
import { recurringRoutes } from './routes/recurring.ts'
import { anonymousAuthRoutes, sessionAuthRoutes } from './routes/platform-auth.ts'
import { platformBillingRoutes, providerWebhookRoutes } from './routes/platform-billing.ts'
import { emailProviderWebhookRoutes, notificationRoutes } from './routes/platform-notifications.ts'
import { platformProjectRoutes } from './routes/platform-projects.ts'
import { apiKeyRetryPolicyRoutes, sessionRetryPolicyRoutes } from './routes/retry-policy.ts'
import { adminRoutes } from './routes/admin.ts'
import { workerRoutes } from './routes/workers.ts'
import { removedWrapperRoutes } from './routes/removed-wrappers.ts'
import { registerVersionSunset } from './version-sunset.ts'
import { authenticateProjectCaller, projectHeader, requireDeclaredRoles } from './project-caller.ts'
import { dashboardRoutes } from './dashboard-assets.ts'
import { httpDuration, httpRequests } from '../../infrastructure/metrics.ts'

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

/** Two polls of the largest capacity (50): a transaction's appends stay a modest burst. */
const maxJobsPerClaimTransaction = 100

/**
 * Job state the ready index keeps in memory, payloads included (as encoded in the log). Past it,
 * candidates are held without their state and a claim loads the job first (one direct get).
 */
const readyIndexStateBytes = 32 * 1024 * 1024

/**
 * Builds the HTTP app without listening (app/server split): tests inject requests or listen on
 * port 0 themselves.
 */
export async function buildApp(deps: Deps, stopping: AbortSignal): Promise<{ app: FastifyInstance; context: ApiContext; routes: RegisteredRoute[] }> {
  const app = Fastify({
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
  // Every route with the schemas it validates with, as registered (a test walks them: every string
  // a request can carry is bounded before any pattern runs).
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
  app.setValidatorCompiler(validatorCompiler)
  app.setSerializerCompiler(deps.config.tunables.validate_responses ? serializeResponses : compileResponses)

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

  app.decorateRequest('principal', null as unknown as Principal)
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
  await registerApiDescription(app, deps.config.publicUrl)

  const accounts = new AccountService(deps)
  const team = new TeamService(deps, accounts)
  const jobs = new JobService(deps)
  const billing = new BillingService(deps)
  const t = deps.config.tunables
  const watcher = new ProjectionWatcher(deps)
  const ready = new ReadyIndex(deps, watcher, {
    jobsPerProject: t.ready_index_jobs_per_project,
    jobs: t.ready_index_jobs,
    stateBytes: readyIndexStateBytes,
  })
  jobs.observer = ready.observer
  const context: ApiContext = {
    deps,
    jobs,
    keys: new ApiKeyDirectory(deps),
    ready,
    watcher,
    accounts,
    team,
    accountExports: new AccountLifecycle(deps, accounts, team),
    requestRate: new RequestRateLimiter(deps.meteringSql),
    billing,
    promoCodes: new PromoCodes(deps),
    staff: new StaffService(deps, { accounts, billing }),
    idempotency: openIdempotencyStore(deps),
    polls: new ProjectSlots(t.max_polls_per_project),
    streams: new ProjectSlots(t.max_event_streams_per_project),
    claims: new ClaimLine((target, polls) => claimForPolls(deps, jobs, target, polls, (jobId, seq) => ready.isStale(jobId, seq)), {
      perProject: t.claim_transactions_per_project,
      total: t.claim_transactions,
      jobsPerTransaction: maxJobsPerClaimTransaction,
    }),
    logHead: new LogHead(() => deps.store.lastSequence()),
    stopping,
  }
  context.keys.start()
  context.watcher.start()
  await context.ready.start()
  if (deps.tracer !== null) traceRequests(app, deps.tracer)
  // Only where /metrics is served (METRICS_PORT): otherwise the hook would cost every request for nothing.
  if (deps.config.metricsPort !== null) {
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? 'unmatched'
      httpRequests.inc({ method: request.method, route, status: reply.statusCode })
      httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000)
    })
  }
  app.addHook('onClose', async () => {
    context.keys.stop()
    await context.ready.stop()
    context.watcher.stop()
    await context.requestRate.stop()
    await context.billing.allowance.stop()
  })

  await app.register(healthRoutes(context), { prefix: '/jobsvc/health' })
  await app.register(
    async (v1) => {
      requireDeclaredRoles(v1)
      v1.addHook('onRequest', async (request, reply) => {
        // Every route here declares its role (requireDeclaredRoles); `owner` would only fail closed.
        request.principal = await authenticateProjectCaller(context, request.headers, request.routeOptions.config.role ?? 'owner')
        await admitProjectRequest(context, request.principal.project, reply)
      })
      registerIdempotency(v1, deps, context.idempotency)
      registerRequestWeights(v1, context)
      await v1.register(jobRoutes(context), { prefix: '/jobs' })
      await v1.register(workerRoutes(context), { prefix: '/workers' })
      await v1.register(recurringRoutes(context), { prefix: '/recurring' })
      await v1.register(alertRoutes(context), { prefix: '/alerts' })
      await v1.register(activityRoutes(context), { prefix: '/activity' })
      await v1.register(metricsRoutes(context), { prefix: '/metrics' })
      await v1.register(webhookRoutes(context), { prefix: '/webhooks' })
      await v1.register(apiKeyRetryPolicyRoutes(context))
    },
    { prefix: '/jobsvc/v1' },
  )
  // Under /jobsvc/v1 but outside the key hook above: it authenticates by dashboard session.
  await app.register(auditLogExportRoutes(context), { prefix: '/jobsvc/v1/projects' })
  await app.register(anonymousAuthRoutes(context), { prefix: '/platform/v1/auth' })
  await app.register(sessionAuthRoutes(context), { prefix: '/platform/v1/auth' })
  await app.register(platformProjectRoutes(context), { prefix: '/platform/v1' })
  await app.register(platformBillingRoutes(context), { prefix: '/platform/v1' })
  await app.register(sessionRetryPolicyRoutes(context), { prefix: '/platform/v1' })
  await app.register(providerWebhookRoutes(context), { prefix: '/platform/v1' })
  await app.register(adminRoutes(context), { prefix: '/platform/v1/admin' })
  await app.register(dashboardRoutes())
  await app.register(notificationRoutes(context), { prefix: '/platform/v1' })
  await app.register(emailProviderWebhookRoutes(context), { prefix: '/platform/v1' })
  // Last: it mirrors the platform auth and billing routes registered above.
  await app.register(removedWrapperRoutes(routes))
  return { app, context, routes }
}
