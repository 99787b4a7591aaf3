import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { isEmailAddress, maxEmailLength } from '../../../../domain/email-address.ts'
import { maxProjectNameLength, plans, projectRoles, signupPlans } from '../../../../domain/project/index.ts'
import { boundedString } from '../text-fields.ts'
import type { ApiContext } from '../context.ts'
import { confirmRequired, invalidEmail, rateLimitExceeded } from '../errors.ts'
import { normalizeEmail } from '../../../use-cases/platform/accounts.ts'
import { expiredSessionCookie } from '../../../use-cases/platform/sessions.ts'
import { projectView } from '../../../use-cases/platform/team-service.ts'
import { bodyCodes, instant, noContent, sessionErrorResponses } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { profileSchema } from './platform-auth.ts'
import { isStorableText, unstorableTextMessage } from '../storable.ts'

const projectName = boundedString(maxProjectNameLength).trim().min(1).refine(isStorableText, unstorableTextMessage)
const projectParams = z.object({ projectId: boundedString(100, 1) })
const memberParams = z.object({ projectId: boundedString(100, 1), userId: boundedString(100, 1) })

export const projectSchema = z
  .strictObject({
    id: z.string().describe('`prj_…`'),
    name: z.string(),
    plan: z.enum(plans),
    role: z.enum(projectRoles).describe("the caller's role in the project"),
    api_key_prefix: z.string().nullable().describe('the first 24 characters of the current key; null once the keys are revoked'),
    keys_revoked_at: instant.nullable(),
    created_at: instant,
    updated_at: instant,
  })
  .meta({ id: 'Project' })

const memberSchema = z.strictObject({ user_id: z.string(), email: z.string(), role: z.enum(projectRoles), joined_at: instant }).meta({ id: 'Member' })

const inviteSchema = z
  .strictObject({
    invite_id: z.string(),
    email: z.string(),
    role: z.enum(projectRoles),
    invited_by: z.string(),
    invited_at: instant,
    expires_at: instant,
  })
  .meta({ id: 'Invite' })

const team = z.strictObject({ members: z.array(memberSchema), invites: z.array(inviteSchema).describe('only for admin and owner; empty otherwise') })

const accountExport = z.strictObject({
  exported_at: instant,
  profile: profileSchema,
  terms_accepted_at: instant,
  email_verified_at: instant.nullable(),
  password_changed_at: instant,
  two_factor: z.strictObject({ enabled_at: instant.nullable(), recovery_codes_left: z.number().int() }),
  projects: z.array(projectSchema),
  teams: z.array(team.extend({ project_id: z.string() })),
  activity: z.array(
    z.strictObject({
      id: z.string(),
      project_id: z.string().nullable(),
      kind: z.string(),
      target_type: z.string(),
      target_id: z.string().nullable(),
      summary: z.string(),
      metadata: z.string().nullable(),
      created_at: instant,
    }),
  ),
})

const tags = ['Projects']
/** A project the caller is not a member of reads as not found; a role too low is forbidden. */
const projectErrors = (...codes: string[]) => sessionErrorResponses('project_not_found', ...codes)

const listSchema = {
  summary: 'Your projects',
  description: 'Every project you are a member of, oldest first.',
  tags,
  response: { 200: z.strictObject({ data: z.array(projectSchema) }), ...sessionErrorResponses() },
}

const createSchema = {
  summary: 'Create a project',
  description: 'You become its owner. The answer shows its API key, once.',
  tags,
  body: z.object({ name: projectName, plan: z.enum(signupPlans).optional().describe('default: your sign-up plan') }),
  response: { 201: projectSchema.extend({ api_key: z.string() }), ...sessionErrorResponses(...bodyCodes) },
}

const readSchema = { summary: 'Read a project', tags, params: projectParams, response: { 200: projectSchema, ...projectErrors() } }

const renameSchema = {
  summary: 'Rename a project',
  description: 'Needs the role admin or owner.',
  tags,
  params: projectParams,
  body: z.object({ name: projectName }),
  response: { 200: projectSchema, ...projectErrors(...bodyCodes, 'forbidden') },
}

const deleteSchema = {
  summary: 'Delete a project',
  description: 'Needs the owner. Its keys stop working at once.',
  tags,
  params: projectParams,
  response: { 200: z.strictObject({ deleted_at: instant }), ...projectErrors('forbidden', 'last_project') },
}

const rotateSchema = {
  summary: "Rotate the project's API key",
  description:
    'Needs the role admin or owner. The new key works at once; the previous one stays valid for 24 hours. The answer shows the new key, once.',
  tags,
  params: projectParams,
  response: { 200: z.strictObject({ api_key: z.string(), rotated_at: instant }), ...projectErrors(...bodyCodes, 'forbidden', 'key_revoked') },
}

const revokeSchema = {
  summary: "Revoke the project's API keys",
  description: 'Needs the role admin or owner. Permanent: every key, grace keys included, stops working.',
  tags,
  params: projectParams,
  response: { 200: z.strictObject({ revoked_at: instant }), ...projectErrors('forbidden', 'already_revoked') },
}

const teamSchema = { summary: "The project's members and open invitations", tags, params: projectParams, response: { 200: team, ...projectErrors() } }

const inviteRouteSchema = {
  summary: 'Invite someone to the project',
  description:
    'E-mails a link valid 7 days; a new invitation to the same address replaces the old one. Below the owner, nobody grants a role at or above their own. The mail names the project in its body, quoted, never in the subject. A project has at most 100 invitations pending (409 `invite_limit_reached`) and sends at most 30 per hour (429 `rate_limit_exceeded` with `Retry-After`).',
  tags,
  params: projectParams,
  body: z.object({ email: boundedString(maxEmailLength).trim().min(1), role: boundedString(50).describe('`admin`, `member` or `viewer`') }),
  response: {
    201: inviteSchema,
    ...projectErrors(
      ...bodyCodes,
      'forbidden',
      'invalid_email',
      'invalid_role',
      'role_exceeds_caller',
      'member_exists',
      'invite_limit_reached',
      'rate_limit_exceeded',
    ),
  },
}

const changeRoleSchema = {
  summary: "Change a member's role",
  tags,
  params: memberParams,
  body: z.object({ role: boundedString(50) }),
  response: {
    200: memberSchema,
    ...projectErrors(...bodyCodes, 'forbidden', 'member_not_found', 'invalid_role', 'cannot_modify_owner', 'role_exceeds_caller'),
  },
}

const removeMemberSchema = {
  summary: 'Remove a member (or leave)',
  description: 'Needs the role admin or owner, except to remove yourself.',
  tags,
  params: memberParams,
  response: { 204: noContent('Removed'), ...projectErrors('forbidden', 'member_not_found', 'cannot_remove_owner', 'role_exceeds_caller') },
}

const transferSchema = {
  summary: 'Transfer ownership to another member',
  description: 'Needs the owner, who becomes an admin.',
  tags,
  params: projectParams,
  body: z.object({ user_id: boundedString(100, 1) }),
  response: { 200: z.strictObject({ members: z.array(memberSchema) }), ...projectErrors(...bodyCodes, 'forbidden', 'member_not_found') },
}

const acceptSchema = {
  summary: 'Accept an invitation',
  description: "The session's address must be the invited one.",
  tags,
  body: z.object({ token: boundedString(1000, 1) }),
  response: { 200: projectSchema, ...sessionErrorResponses(...bodyCodes, 'invalid_token', 'member_exists') },
}

const exportSchema = {
  summary: 'Export everything the service holds about you',
  description:
    "A JSON attachment: profile, projects, teams and activity, limited to what the caller may see elsewhere: their own account activity and the rows about their membership always, a project's whole audit trail only where they are admin or owner, pending invites only there too. One per 60 s (429 with `Retry-After`).",
  tags,
  response: { 200: accountExport, ...sessionErrorResponses('rate_limit_exceeded') },
}

const deleteAccountSchema = {
  summary: 'Delete your account',
  description: 'Deletes the projects you own (their keys stop at once), leaves the others, frees the address and expires the cookie.',
  tags,
  querystring: z.object({ confirm: boundedString(maxEmailLength).optional().describe("the account's e-mail address (required)") }),
  response: { 200: z.strictObject({ deleted_at: instant }), ...sessionErrorResponses('confirm_required') },
}

/** The account data export: 1 per 60 s per user (spec, Limits). */
export const accountExportCooldownMs = 60_000

/**
 * Dashboard routes around projects, their keys and teams, and the account (shapes the spec
 * leaves open; docs/api-notes.md, "Dashboard and authentication"). All need a session; roles are checked by the
 * project aggregate.
 *
 * @noProjectRole under `/platform/v1`: the project aggregate checks the member's role
 */
export function platformProjectRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts' | 'team' | 'accountExports'>): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>()
    const userOf = (request: { headers: { authorization?: string | undefined; cookie?: string | undefined } }) =>
      authenticateSession(ctx.accounts, request.headers, ctx.deps.now())

    r.get('/projects', { schema: listSchema }, async (request) => ({ data: await ctx.team.list(await userOf(request)) }))

    r.post('/projects', { schema: createSchema }, async (request, reply) => {
      const { view, apiKey } = await ctx.team.create(await userOf(request), request.body)
      return reply.code(201).send({ ...view, api_key: apiKey })
    })

    r.get('/projects/:projectId', { schema: readSchema }, async (request) => {
      const { project, role } = await ctx.team.load(await userOf(request), request.params.projectId)
      return projectView(project, role)
    })

    r.patch('/projects/:projectId', { schema: renameSchema }, async (request) =>
      ctx.team.rename(await userOf(request), request.params.projectId, request.body.name),
    )

    r.delete('/projects/:projectId', { schema: deleteSchema }, async (request) => ({
      deleted_at: await ctx.team.delete(await userOf(request), request.params.projectId),
    }))

    r.post('/projects/:projectId/keys/rotate', { schema: rotateSchema }, async (request) => {
      const { apiKey, rotatedAt } = await ctx.team.rotateKey(await userOf(request), request.params.projectId)
      return { api_key: apiKey, rotated_at: rotatedAt }
    })

    r.delete('/projects/:projectId/keys/revoke', { schema: revokeSchema }, async (request) => ({
      revoked_at: await ctx.team.revokeKeys(await userOf(request), request.params.projectId),
    }))

    r.get('/projects/:projectId/members', { schema: teamSchema }, async (request) => ctx.team.team(await userOf(request), request.params.projectId))

    r.post('/projects/:projectId/members', { schema: inviteRouteSchema }, async (request, reply) => {
      const user = await userOf(request)
      const email = normalizeEmail(request.body.email)
      if (!isEmailAddress(email)) throw invalidEmail()
      const invite = await ctx.team.invite(user, request.params.projectId, { email, role: request.body.role })
      return reply.code(201).send(invite)
    })

    r.patch('/projects/:projectId/members/:userId', { schema: changeRoleSchema }, async (request) =>
      ctx.team.changeRole(await userOf(request), request.params.projectId, request.params.userId, request.body.role),
    )

    r.delete('/projects/:projectId/members/:userId', { schema: removeMemberSchema }, async (request, reply) => {
      await ctx.team.removeMember(await userOf(request), request.params.projectId, request.params.userId)
      return reply.code(204).send()
    })

    r.post('/projects/:projectId/transfer-ownership', { schema: transferSchema }, async (request) => ({
      members: await ctx.team.transferOwnership(await userOf(request), request.params.projectId, request.body.user_id),
    }))

    r.post('/invites/accept', { schema: acceptSchema }, async (request) => ctx.team.acceptInvite(await userOf(request), request.body.token))

    r.get('/account/export', { schema: exportSchema }, async (request, reply) => {
      const user = await userOf(request)
      const verdict = await ctx.accounts.limits.takeCooldown('account-export', user.id, accountExportCooldownMs, ctx.deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'one account export per 60 seconds')
      // exportFor answers an untyped record: the response schema is what checks its shape.
      const body = (await ctx.accountExports.exportFor(user)) as z.output<typeof accountExport>
      return reply.header('Content-Disposition', `attachment; filename="jobsvc-account-${user.id}.json"`).send(body)
    })

    r.delete('/account', { schema: deleteAccountSchema }, async (request, reply) => {
      const user = await userOf(request)
      const confirm = request.query.confirm
      if (confirm === undefined || normalizeEmail(confirm) !== user.email) throw confirmRequired()
      const deletedAt = await ctx.accountExports.deleteAccount(user)
      return reply.header('Set-Cookie', expiredSessionCookie).send({ deleted_at: deletedAt })
    })
  }
}
