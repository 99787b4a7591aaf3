import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import type { ApiContext } from '../app.ts'
import { confirmRequired, invalidEmail, rateLimitExceeded } from '../errors.ts'
import { normalizeEmail } from '../../platform/accounts.ts'
import { expiredSessionCookie } from '../../platform/sessions.ts'
import { projectView } from '../../projects/team-service.ts'
import { authenticateSession } from '../session-auth.ts'
import { isStorableText, unstorableTextMessage } from '../storable.ts'

const projectName = z.string().trim().min(1).max(100).refine(isStorableText, unstorableTextMessage)
const projectParams = z.object({ projectId: z.string().min(1).max(100) })
const memberParams = z.object({ projectId: z.string().min(1).max(100), userId: z.string().min(1).max(100) })
const emailPattern = /^[^\s@<>()[\]\\,;:"]+@[^\s@<>()[\]\\,;:"]+\.[^\s@<>()[\]\\,;:"]+$/

/** The account data export: 1 per 60 s per user (spec, Limits). */
export const accountExportCooldownMs = 60_000

/**
 * Dashboard routes around projects, their keys and teams, and the account (shapes the spec
 * leaves open; README, "Dashboard routes"). All need a session; roles are checked by the
 * project aggregate.
 */
export function platformProjectRoutes(ctx: ApiContext): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>()
    const userOf = (request: { headers: { authorization?: string | undefined; cookie?: string | undefined } }) =>
      authenticateSession(ctx.accounts, request.headers, ctx.deps.now())

    r.get('/projects', async (request) => ({ data: await ctx.team.list(await userOf(request)) }))

    r.post(
      '/projects',
      { schema: { body: z.object({ name: projectName, plan: z.enum(['free', 'starter', 'pro', 'business']).optional() }) } },
      async (request, reply) => {
        const { view, apiKey } = await ctx.team.create(await userOf(request), request.body)
        return reply.code(201).send({ ...view, api_key: apiKey })
      },
    )

    r.get('/projects/:projectId', { schema: { params: projectParams } }, async (request) => {
      const { project, role } = await ctx.team.load(await userOf(request), request.params.projectId)
      return projectView(project, role)
    })

    r.patch('/projects/:projectId', { schema: { params: projectParams, body: z.object({ name: projectName }) } }, async (request) =>
      ctx.team.rename(await userOf(request), request.params.projectId, request.body.name),
    )

    r.delete('/projects/:projectId', { schema: { params: projectParams } }, async (request) => ({
      deleted_at: await ctx.team.delete(await userOf(request), request.params.projectId),
    }))

    r.post('/projects/:projectId/keys/rotate', { schema: { params: projectParams } }, async (request) => {
      const { apiKey, rotatedAt } = await ctx.team.rotateKey(await userOf(request), request.params.projectId)
      return { api_key: apiKey, rotated_at: rotatedAt }
    })

    r.delete('/projects/:projectId/keys/revoke', { schema: { params: projectParams } }, async (request) => ({
      revoked_at: await ctx.team.revokeKeys(await userOf(request), request.params.projectId),
    }))

    r.get('/projects/:projectId/members', { schema: { params: projectParams } }, async (request) =>
      ctx.team.team(await userOf(request), request.params.projectId),
    )

    r.post(
      '/projects/:projectId/members',
      { schema: { params: projectParams, body: z.object({ email: z.string().trim().min(1).max(320), role: z.string().max(50) }) } },
      async (request, reply) => {
        const user = await userOf(request)
        const email = normalizeEmail(request.body.email)
        if (!emailPattern.test(email)) throw invalidEmail()
        const invite = await ctx.team.invite(user, request.params.projectId, { email, role: request.body.role })
        return reply.code(201).send(invite)
      },
    )

    r.patch('/projects/:projectId/members/:userId', { schema: { params: memberParams, body: z.object({ role: z.string().max(50) }) } }, async (request) =>
      ctx.team.changeRole(await userOf(request), request.params.projectId, request.params.userId, request.body.role),
    )

    r.delete('/projects/:projectId/members/:userId', { schema: { params: memberParams } }, async (request, reply) => {
      await ctx.team.removeMember(await userOf(request), request.params.projectId, request.params.userId)
      return reply.code(204).send()
    })

    r.post(
      '/projects/:projectId/transfer-ownership',
      { schema: { params: projectParams, body: z.object({ user_id: z.string().min(1).max(100) }) } },
      async (request) => ({ members: await ctx.team.transferOwnership(await userOf(request), request.params.projectId, request.body.user_id) }),
    )

    r.post('/invites/accept', { schema: { body: z.object({ token: z.string().min(1).max(1000) }) } }, async (request) =>
      ctx.team.acceptInvite(await userOf(request), request.body.token),
    )

    r.get('/account/export', async (request, reply) => {
      const user = await userOf(request)
      const verdict = await ctx.accounts.limits.takeCooldown('account-export', user.id, accountExportCooldownMs, ctx.deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'one account export per 60 seconds')
      const body = await ctx.accountExports.exportFor(user)
      return reply.header('Content-Disposition', `attachment; filename="jobsvc-account-${user.id}.json"`).send(body)
    })

    r.delete('/account', { schema: { querystring: z.object({ confirm: z.string().max(320).optional() }) } }, async (request, reply) => {
      const user = await userOf(request)
      const confirm = request.query.confirm
      if (confirm === undefined || normalizeEmail(confirm) !== user.email) throw confirmRequired()
      const deletedAt = await ctx.accountExports.deleteAccount(user)
      return reply.header('Set-Cookie', expiredSessionCookie).send({ deleted_at: deletedAt })
    })
  }
}
