import type { FastifyReply } from 'fastify'
import { requestsPerHourOf, type Project } from '../../../domain/project.ts'
import type { ApiContext } from './context.ts'
import { rateLimitExceeded } from './errors.ts'

/**
 * Counts a `/jobsvc/v1` request against its project's hourly limit (spec, Limits; a staff
 * override above the plan while it lasts), sets the `X-RateLimit-*` headers and refuses it with
 * 429 past the limit. Every `/jobsvc/v1` route runs it, whether it authenticated by API key or,
 * like the audit-log export, by session.
 */
export async function admitProjectRequest(ctx: Pick<ApiContext, 'deps' | 'requestRate'>, project: Project, reply: FastifyReply): Promise<void> {
  const { deps } = ctx
  if (!deps.config.tunables.metering_enabled) return
  const now = deps.now()
  const verdict = await ctx.requestRate.admit(project.id, requestsPerHourOf(project, deps.config.plans[project.plan].requests_per_hour, now), now)
  void reply.headers({
    'X-RateLimit-Limit': String(verdict.limit),
    'X-RateLimit-Remaining': String(verdict.remaining),
    'X-RateLimit-Reset': String(verdict.resetAt),
  })
  if (!verdict.admitted) {
    const retryAfterMs = verdict.resetAt * 1000 - deps.now().getTime()
    throw rateLimitExceeded(retryAfterMs, `the project allows ${verdict.limit} requests per hour`)
  }
}
