import type { FastifyInstance } from 'fastify'
import { Forbidden } from '../../../domain/errors.ts'
import { hasRoleAtLeast, type ProjectRole } from '../../../domain/project/index.ts'
import type { ApiKeyDirectory, Principal } from './api-key-directory.ts'
import type { ApiContext } from './context.ts'
import { authenticateSession } from './session-auth.ts'

/**
 * Names the project a dashboard session acts on under `/jobsvc/v1`. Being a custom header, it also
 * makes every such cross-origin request preflighted, so a page on another site cannot ride the
 * session cookie into a state change.
 */
export const projectHeader = 'x-jobsvc-project'

interface CallerHeaders {
  authorization?: string | undefined
  cookie?: string | undefined
  [projectHeader]?: string | string[] | undefined
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The least project role a dashboard session needs to call the route (README, "Roles per
     * route"). Every `/jobsvc/v1` route that takes the project header declares one
     * (`requireDeclaredRoles`); API keys act as `owner` and pass every check.
     */
    role?: ProjectRole
  }
}

/**
 * Refuses to register a route of `app` that does not declare its role, so that a new route cannot
 * fall back on a guess from its method: the app does not start.
 */
export function requireDeclaredRoles(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    if (route.config?.role === undefined) throw new Error(`${String(route.method)} ${route.url} declares no project role (config.role)`)
  })
}

/**
 * Who calls a `/jobsvc/v1` route: the project's API key, or, when the request names a project in
 * `X-Jobsvc-Project`, a dashboard session (Bearer JWT or the `sv_jwt` cookie) of one of its
 * members, acting with the member's role. A project the user is not a member of answers 404
 * `project_not_found`, as on the dashboard routes; a role below the route's `needed` 403 `forbidden`.
 */
export async function authenticateProjectCaller(
  context: Pick<ApiContext, 'accounts' | 'team' | 'deps'> & { keys: ApiKeyDirectory },
  headers: CallerHeaders,
  needed: ProjectRole,
): Promise<Principal> {
  const named = headers[projectHeader]
  if (named === undefined) return context.keys.authenticate(headers.authorization)
  const projectId = Array.isArray(named) ? (named[0] ?? '') : named
  const user = await authenticateSession(context.accounts, headers, context.deps.now())
  const { project, role } = await context.team.load(user, projectId)
  if (!hasRoleAtLeast(role, needed)) throw new Forbidden(`this needs the project role ${needed} or above; yours is ${role}`)
  return { projectId: project.id, role, project, actor: { user_id: user.id, email: user.email } }
}
