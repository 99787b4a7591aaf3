import type { FastifyInstance, FastifyReply, FastifyRequest, preHandlerAsyncHookHandler, preHandlerHookHandler } from 'fastify'
import { requestsPerHourOf, type Project } from '../../../domain/project/index.ts'
import type { RateVerdict } from '../../use-cases/metering/request-rate.ts'
import type { ApiContext } from './context.ts'
import { rateLimitExceeded } from './errors.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * How many requests this one counts against the hourly limit once its body is validated (a
     * batch: its items; docs/api-notes.md, "Batches"). Without it a request counts one.
     */
    requestWeight?: (body: unknown) => number
  }
  interface FastifyRequest {
    /** The request's own unit of its project's hour, once counted: what a refund gives back. */
    countedUnit?: { projectId: string; minute: number; remaining: number }
  }
}

/** Takes `units` of the project's hour and sets the `X-RateLimit-*` headers to what is left. */
async function takeUnits(ctx: Pick<ApiContext, 'deps' | 'requestRate'>, project: Project, reply: FastifyReply, units: number): Promise<RateVerdict> {
  const { deps } = ctx
  const now = deps.now()
  const verdict = await ctx.requestRate.admit(
    project.id,
    requestsPerHourOf(project, deps.config.plans[project.plan].requests_per_hour, now),
    now,
    units,
  )
  void reply.headers({
    'X-RateLimit-Limit': String(verdict.limit),
    'X-RateLimit-Remaining': String(verdict.remaining),
    'X-RateLimit-Reset': String(verdict.resetAt),
  })
  return verdict
}

const retryAfterMsOf = (ctx: Pick<ApiContext, 'deps'>, verdict: RateVerdict) => verdict.resetAt * 1000 - ctx.deps.now().getTime()

/**
 * Counts a `/jobsvc/v1` request against its project's hourly limit (spec, Limits; a staff
 * override above the plan while it lasts), sets the `X-RateLimit-*` headers and refuses it with
 * 429 past the limit. Every `/jobsvc/v1` route runs it, whether it authenticated by API key or,
 * like the audit-log export, by session.
 */
export async function admitProjectRequest(ctx: Pick<ApiContext, 'deps' | 'requestRate'>, project: Project, reply: FastifyReply): Promise<void> {
  if (!ctx.deps.config.tunables.metering_enabled) return
  const verdict = await takeUnits(ctx, project, reply, 1)
  if (!verdict.admitted) throw rateLimitExceeded(retryAfterMsOf(ctx, verdict), `the project allows ${verdict.limit} requests per hour`)
  reply.request.countedUnit = { projectId: project.id, minute: verdict.minute, remaining: verdict.remaining }
}

/**
 * Waiting is free: a long poll that waited its full time and claimed nothing gives back the
 * request it counted (README, "Security and limits"), and says so in `X-RateLimit-Remaining`.
 * Polls in flight stay capped per project (`max_polls_per_project`), so free waiting cannot hold
 * more of the service than before.
 */
export function refundProjectRequest(ctx: Pick<ApiContext, 'requestRate'>, request: FastifyRequest, reply: FastifyReply): void {
  const unit = request.countedUnit
  if (unit === undefined) return
  request.countedUnit = undefined
  ctx.requestRate.refund(unit.projectId, unit.minute)
  void reply.header('X-RateLimit-Remaining', String(unit.remaining + 1))
}

/**
 * Work is counted where it is done: a route that declares `requestWeight` (the batches) counts, once
 * its body is valid, the rest of its weight on top of the one request counted when it arrived. All
 * or nothing: when the hour has no room for them all, the request is refused whole (429
 * `rate_limit_exceeded`, `Retry-After`) before it does anything, and only its first unit stays
 * counted. It runs after the Idempotency-Key's reservation, so a replay, which does no work again,
 * counts one.
 */
export function registerRequestWeights(app: FastifyInstance, ctx: Pick<ApiContext, 'deps' | 'requestRate'>): void {
  const weigh: preHandlerAsyncHookHandler = async (request, reply) => {
    const weight = request.routeOptions.config.requestWeight?.(request.body) ?? 1
    if (weight <= 1 || !ctx.deps.config.tunables.metering_enabled) return
    const verdict = await takeUnits(ctx, request.principal.project, reply, weight - 1)
    if (verdict.admitted) return
    throw rateLimitExceeded(
      retryAfterMsOf(ctx, verdict),
      `this request carries ${weight} items, which count as ${weight} requests; ${verdict.remaining} of the project's ${verdict.limit} per hour are left`,
    )
  }
  app.addHook('onRoute', (route) => {
    if (route.config?.requestWeight === undefined) return
    route.preHandler = [...([] as preHandlerHookHandler[]).concat(route.preHandler ?? []), weigh as preHandlerHookHandler]
  })
}
