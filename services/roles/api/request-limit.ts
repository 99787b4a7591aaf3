import type { FastifyReply } from 'fastify'
import type { Project } from '../../../domain/project.ts'
import type { ApiContext } from './context.ts'
import { rateLimitExceeded } from './errors.ts'

/**
 * Counts a `/jobsvc/v1` request against its project's hourly limit (spec, Limits), sets the
 * `X-RateLimit-*` headers and refuses it with 429 past the limit. Every `/jobsvc/v1` route runs
 * it, whether it authenticated by API key or, like the audit-log export, by session.
 */
export async function admitProjectRequest(
  ctx: Pick<ApiContext, 'deps' | 'requestRate'>,
  project: Pick<Project, 'id' | 'plan'>,
  reply: FastifyReply,
): Promise<void> {
  const { deps } = ctx
  if (!deps.config.tunables.metering_enabled) return
  const verdict = await ctx.requestRate.admit(project.id, deps.config.plans[project.plan].requests_per_hour, deps.now())
  void reply.headers({
    'X-RateLimit-Limit': String(verdict.limit),
    'X-RateLimit-Remaining': String(verdict.remaining),
    'X-RateLimit-Reset': String(verdict.resetAt),
  })
  if (!verdict.admitted) {
    const retryAfterMs = verdict.resetAt * 1000 - deps.now().getTime()
    throw rateLimitExceeded(retryAfterMs, `the project's plan allows ${verdict.limit} requests per hour`)
  }
}
