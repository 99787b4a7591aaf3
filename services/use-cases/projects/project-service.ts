import type { Plan, Project, ProjectCommand, ProjectEvent } from '../../../domain/project/index.ts'
import { writeProjectRowsNow } from '../../../projections/project-directory.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { projectHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { apiKeyPrefix, generateApiKey, hashApiKey, type KeyEnvironment } from './api-keys.ts'

export interface CreatedProject {
  project: Project
  apiKey: string
}

/**
 * Creates a project and its first API key. The key's plaintext exists only in the answer. The
 * directory rows are written here as well as by the projector, so the key authenticates at once.
 */
export async function createProject(
  deps: Deps,
  input: { name: string; plan: Plan; ownerEmail: string | null; ownerUserId?: string | null; keyEnvironment: KeyEnvironment },
): Promise<CreatedProject> {
  const projectId = `prj_${deps.newUlid().toLowerCase()}`
  const apiKey = generateApiKey(input.keyEnvironment)
  const result = await projectHandler.decide(deps, projectHandler.ref(projectId), {
    type: 'create_project',
    data: {
      project_id: projectId,
      name: input.name,
      plan: input.plan,
      owner_email: input.ownerEmail,
      owner_user_id: input.ownerUserId ?? null,
      key: { prefix: apiKeyPrefix(apiKey), key_hash: hashApiKey(apiKey) },
    },
    meta: { now: deps.now().toISOString() },
  })
  await writeProjectRowsNow(deps.sql, [result.record])
  return { project: result.state!, apiKey }
}

/**
 * A command on a project from a request (not the projector): the project's directory rows are
 * written at once, so what it changed about keys applies before any projector runs.
 */
export async function commandProject(deps: Deps, projectId: string, command: ProjectCommand): Promise<CommandResult<ProjectEvent, Project>> {
  const result = await projectHandler.decide(deps, projectHandler.ref(projectId), command)
  if (result.appended) await writeProjectRowsNow(deps.sql, [result.record])
  return result
}

/** Deletes a project with the operator's authority (an account opening that lost a race). */
export async function deleteProjectAsOperator(deps: Deps, projectId: string): Promise<void> {
  await commandProject(deps, projectId, {
    type: 'delete_project',
    data: { actor_user_id: null, other_projects_of_actor: 0 },
    meta: { now: deps.now().toISOString() },
  })
}
