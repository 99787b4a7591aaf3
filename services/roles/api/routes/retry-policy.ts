import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import type { Actor } from '../../../../domain/decider.ts'
import type { Project } from '../../../../domain/project/index.ts'
import { projectHandler } from '../../../../streams/aggregates.ts'
import {
  defaultRetryPolicy,
  maxQueueRetryPolicies,
  retryPolicyBounds,
  retryPolicyFor,
  toRetryPolicy,
  type RetryPolicy,
} from '../../../../domain/retry-policy.ts'
import { commandProject } from '../../../use-cases/projects/project-service.ts'
import type { ApiContext } from '../context.ts'
import { maxAttemptsNumber, queueNameText } from '../job-fields.ts'
import { errorResponses, instant, noContent, sessionErrorResponses, writeCodes, bodyCodes } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { boundedString } from '../text-fields.ts'

const bounds = retryPolicyBounds
const boundedInt = (b: { min: number; max: number }) => z.number().int().min(b.min).max(b.max)

/** Every field is required: a PUT replaces the whole policy, as GET shows it. */
const retryPolicyBody = z
  .object({
    base_delay_seconds: boundedInt(bounds.base_delay_seconds).describe(
      `the first retry's wait, ${bounds.base_delay_seconds.min}–${bounds.base_delay_seconds.max}`,
    ),
    factor: z
      .number()
      .min(bounds.factor.min)
      .max(bounds.factor.max)
      .describe(`each later wait is this many times the one before, ${bounds.factor.min}–${bounds.factor.max} (1: a constant wait)`),
    max_delay_seconds: boundedInt(bounds.max_delay_seconds).describe(
      `no wait grows past this (the jitter comes on top), ${bounds.max_delay_seconds.min}–${bounds.max_delay_seconds.max}, at least base_delay_seconds`,
    ),
    jitter_seconds: boundedInt(bounds.jitter_seconds).describe(
      `0 to this many seconds added at random to each wait, ${bounds.jitter_seconds.min}–${bounds.jitter_seconds.max}`,
    ),
    max_attempts: maxAttemptsNumber.describe('what a job created without `max_attempts` gets, 1–100'),
  })
  .refine((p) => p.max_delay_seconds >= p.base_delay_seconds, {
    message: 'max_delay_seconds must be at least base_delay_seconds',
    path: ['max_delay_seconds'],
  })

const policyFields = {
  base_delay_seconds: z.number().int(),
  factor: z.number(),
  max_delay_seconds: z.number().int(),
  jitter_seconds: z.number().int(),
  max_attempts: z.number().int(),
}

const queuePolicySchema = z
  .strictObject({
    queue: z.string(),
    ...policyFields,
    source: z.enum(['service', 'project', 'queue']).describe("where it comes from: the queue's own, the project's default, or the service's"),
  })
  .meta({ id: 'QueueRetryPolicy' })

const projectPolicySchema = z
  .strictObject({
    ...policyFields,
    source: z.enum(['service', 'project']).describe("the project's own default, or the service's"),
    queues: z.array(queuePolicySchema.omit({ source: true })).describe('the queues with a policy of their own, by name'),
    updated_at: instant.describe("the project's last change of any kind"),
  })
  .meta({ id: 'RetryPolicy' })

type PolicySource = 'service' | 'project' | 'queue'

function projectPolicyView(project: Project) {
  const own = project.retry_policies.project
  const queues = [...project.retry_policies.queues].sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0))
  return {
    ...toRetryPolicy(own ?? defaultRetryPolicy),
    source: own === null ? ('service' as const) : ('project' as const),
    queues: queues.map((p) => ({ queue: p.queue, ...toRetryPolicy(p) })),
    updated_at: project.updated_at,
  }
}

function queuePolicyView(project: Project, queue: string) {
  const policies = project.retry_policies
  const source: PolicySource = policies.queues.some((p) => p.queue === queue) ? 'queue' : policies.project ? 'project' : 'service'
  return { queue, ...toRetryPolicy(retryPolicyFor(policies, queue)), source }
}

/**
 * Where the routes are mounted: under `/jobsvc/v1` for an API key, which acts as the project's
 * owner (as on every route there), and under `/platform/v1/projects/{projectId}` for a dashboard
 * session, where any member reads and an admin or owner changes (the project aggregate decides).
 */
interface Mount {
  path: string
  params: z.ZodObject
  errors: (...codes: string[]) => ReturnType<typeof errorResponses>
  writeCodes: readonly string[]
  /** The project as of its last event, and who acts: a dashboard member, or null for an API key. */
  resolve(request: FastifyRequest): Promise<{ project: Project; actor: Actor | null }>
}

const tags = ['Retry policy']
const forbiddenNote = 'Needs the role admin or owner (an API key acts as the owner); a member or viewer gets 403 `forbidden`.'

function schemasFor(mount: Mount) {
  const queueParams = mount.params.extend({ queue: queueNameText })
  return {
    readProject: {
      summary: "Read the project's retry policy",
      description:
        "The default every queue follows unless it has its own: the project's, or the service's (15 × 2^(attempt−1) s, capped at a day, plus 0–3 s of jitter; 3 attempts). Lists the queues with their own policy.",
      tags,
      params: mount.params,
      response: { 200: projectPolicySchema, ...mount.errors() },
    },
    setProject: {
      summary: "Set the project's retry policy",
      description: `Replaces the project's default. A failed or timed-out attempt then waits \`min(base_delay_seconds × factor^(attempt−1), max_delay_seconds)\` s plus 0–\`jitter_seconds\` s; a job created without \`max_attempts\` gets this one's. Jobs already created keep their \`max_attempts\`. ${forbiddenNote}`,
      tags,
      params: mount.params,
      body: retryPolicyBody,
      response: { 200: projectPolicySchema, ...mount.errors(...mount.writeCodes, 'forbidden') },
    },
    resetProject: {
      summary: "Remove the project's retry policy",
      description: `The service's default applies again (queues with their own policy keep it). ${forbiddenNote}`,
      tags,
      params: mount.params,
      response: { 204: noContent('Removed, or there was none'), ...mount.errors(...mount.writeCodes, 'forbidden') },
    },
    readQueue: {
      summary: "Read the retry policy a queue's jobs follow",
      description: "The queue's own policy, else the project's, else the service's; `source` says which.",
      tags,
      params: queueParams,
      response: { 200: queuePolicySchema, ...mount.errors() },
    },
    setQueue: {
      summary: "Set a queue's own retry policy",
      description: `Overrides the project's default for this queue's jobs. A project has at most ${maxQueueRetryPolicies} queues with their own policy; one more is 409 \`retry_policy_limit_reached\`. ${forbiddenNote}`,
      tags,
      params: queueParams,
      body: retryPolicyBody,
      response: { 200: queuePolicySchema, ...mount.errors(...mount.writeCodes, 'forbidden', 'retry_policy_limit_reached') },
    },
    resetQueue: {
      summary: "Remove a queue's own retry policy",
      description: `The queue follows the project's default again. ${forbiddenNote}`,
      tags,
      params: queueParams,
      response: { 204: noContent('Removed, or there was none'), ...mount.errors(...mount.writeCodes, 'forbidden') },
    },
  }
}

/**
 * The retry policy of a project and of its queues: state on the project aggregate
 * (`retry_policy_updated`), so the acks, which hold the project already, read it for free.
 */
function retryPolicyRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'keys'>, mount: Mount): FastifyPluginAsync {
  const { deps } = ctx
  const schemas = schemasFor(mount)
  const queueOf = (request: FastifyRequest) => (request.params as { queue: string }).queue

  /** Appends the change; this process's acks see it at once, the activity feed waits for it. */
  async function setPolicy(request: FastifyRequest, reply: FastifyReply, queue: string | null, policy: RetryPolicy | null): Promise<Project> {
    const { project, actor } = await mount.resolve(request)
    const result = await commandProject(deps, project.id, {
      type: 'set_retry_policy',
      data: { actor_user_id: actor?.user_id ?? null, queue, policy },
      meta: { now: deps.now().toISOString(), actor: actor ?? undefined },
    })
    if (result.appended) {
      ctx.keys.note(result.state!)
      ctx.jobs.noteWritten(project.id, result.seq)
    }
    void reply.header('X-Event-Seq', String(result.seq))
    return result.state!
  }

  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    const policyPath = `${mount.path}/retry-policy`
    const queuePath = `${mount.path}/queues/:queue/retry-policy`

    app.get(policyPath, { schema: schemas.readProject, config: { role: 'viewer' } }, async (request) =>
      projectPolicyView((await mount.resolve(request)).project),
    )

    app.put(policyPath, { schema: schemas.setProject, config: { role: 'admin' } }, async (request, reply) =>
      projectPolicyView(await setPolicy(request, reply, null, request.body)),
    )

    app.delete(policyPath, { schema: schemas.resetProject, config: { role: 'admin' } }, async (request, reply) => {
      await setPolicy(request, reply, null, null)
      return reply.code(204).send()
    })

    app.get(queuePath, { schema: schemas.readQueue, config: { role: 'viewer' } }, async (request) =>
      queuePolicyView((await mount.resolve(request)).project, queueOf(request)),
    )

    app.put(queuePath, { schema: schemas.setQueue, config: { role: 'admin' } }, async (request, reply) =>
      queuePolicyView(await setPolicy(request, reply, queueOf(request), request.body), queueOf(request)),
    )

    app.delete(queuePath, { schema: schemas.resetQueue, config: { role: 'admin' } }, async (request, reply) => {
      await setPolicy(request, reply, queueOf(request), null)
      return reply.code(204).send()
    })
  }
}

/** `/jobsvc/v1/retry-policy` and `/jobsvc/v1/queues/{queue}/retry-policy`, inside the API-key hook. */
export function apiKeyRetryPolicyRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'keys'>): FastifyPluginAsync {
  return retryPolicyRoutes(ctx, {
    path: '',
    params: z.object({}),
    errors: errorResponses,
    writeCodes,
    // Read from the log rather than the key's cached project, so a read follows a change made
    // through another API process at once.
    resolve: async (request) => {
      const loaded = await projectHandler.load(ctx.deps.store, projectHandler.ref(request.principal.projectId))
      // A dashboard session under /jobsvc/v1 changes the policy as its member; a key as the project.
      return { project: loaded.state ?? request.principal.project, actor: request.principal.actor ?? null }
    },
  })
}

/** The same under `/platform/v1/projects/{projectId}`, for a dashboard session. */
export function sessionRetryPolicyRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'keys' | 'accounts' | 'team'>): FastifyPluginAsync {
  return retryPolicyRoutes(ctx, {
    path: '/projects/:projectId',
    params: z.object({ projectId: boundedString(100, 1) }),
    // A project the caller is not a member of reads as not found.
    errors: (...codes) => sessionErrorResponses('project_not_found', ...codes),
    writeCodes: bodyCodes,
    resolve: async (request) => {
      const user = await authenticateSession(ctx.accounts, request.headers, ctx.deps.now())
      const { project } = await ctx.team.load(user, (request.params as { projectId: string }).projectId)
      return { project, actor: { user_id: user.id, email: user.email } }
    },
  })
}
