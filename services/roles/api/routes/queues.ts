import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { jobStates } from '../../../../domain/job.ts'
import type { Actor } from '../../../../domain/decider.ts'
import { flowGates } from '../../../../projections/flow-gates.ts'
import {
  concurrencyStrategies,
  keyConcurrencyRange,
  maxQueueLimits,
  queueConcurrencyRange,
  queueLimitsOf,
  rateLimitRange,
  ratePeriodSecondsRange,
  type FlowLimits,
  type KeyDimension,
  type QueueLimits,
  defaultTtlOf,
  maxPausedQueues,
  maxQueueSettings,
  pauseOf,
  type Project,
  type ProjectCommand,
  type QueuePause,
} from '../../../../domain/project/index.ts'
import { projectHandler } from '../../../../streams/aggregates.ts'
import { summary } from '../../../use-cases/jobs/metrics-service.ts'
import { commandProject } from '../../../use-cases/projects/project-service.ts'
import type { ApiContext } from '../context.ts'
import { queueNameText, ttlSecondsNumber } from '../job-fields.ts'
import { errorResponses, instant, noContent, writeCodes } from '../openapi.ts'
import { minSeq } from '../query-fields.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'
import { isStorableInstant, unstorableInstantMessage } from '../storable.ts'
import { boundedString, storableText } from '../text-fields.ts'

/** Keys the limits state lists at most. */
const maxKeysInState = 50

/** Queues one list answers at most: the paused ones first, then those with jobs, by name. */
const maxQueuesListed = 1000

const pauseBody = z
  .object({
    reason: storableText(0, 500).nullish().describe('why, shown with the queue (at most 500 characters)'),
    until: boundedString(64)
      .pipe(z.iso.datetime({ offset: true }))
      .refine((s) => isStorableInstant(Date.parse(s)), unstorableInstantMessage)
      .transform((s) => new Date(s).toISOString())
      .nullish()
      .describe('when the queue resumes by itself (ISO 8601, in the future); absent or null: until resumed'),
  })
  .default({})

const queueState = z
  .strictObject({
    queue: z.string(),
    paused: z.boolean(),
    reason: z.string().nullable().describe('the pause’s reason; null when not paused or none was given'),
    until: instant.nullable().describe('when the pause ends by itself; null when not paused or until resumed'),
    paused_at: instant.nullable(),
    paused_by: z.string().nullable().describe('the dashboard user who paused it; null for an API key, or when not paused'),
  })
  .meta({ id: 'QueueState' })

const counts = z.strictObject(Object.fromEntries(jobStates.map((s) => [s, z.number().int()])) as Record<(typeof jobStates)[number], z.ZodNumber>)

const queueListItem = queueState
  .extend({
    default_ttl_seconds: z.number().int().nullable().describe('extension: the ttl of jobs created in the queue without one; null: none'),
    counts: counts.describe('jobs per state, from the same rollups as `GET /metrics/summary`'),
    total: z.number().int(),
  })
  .meta({ id: 'QueueListItem' })

const tags = ['Queues']

const keyDimension = boundedString(200)
  .refine((by) => by === 'concurrency_key' || by === 'job_type' || (by.startsWith('tag:') && by.length > 'tag:'.length), {
    message: 'must be "concurrency_key", "job_type" or "tag:<name>"',
  })
  .transform((by) => by as KeyDimension)

const limitsBody = z
  .strictObject({
    concurrency: z
      .strictObject({
        limit: z.number().int().min(queueConcurrencyRange.min).max(queueConcurrencyRange.max).nullish().describe("the queue's running jobs at most"),
        per_key: z
          .strictObject({
            limit: z.number().int().min(keyConcurrencyRange.min).max(keyConcurrencyRange.max),
            by: keyDimension.describe('"concurrency_key", "job_type" or "tag:<name>"'),
          })
          .nullish()
          .describe("each key's running jobs at most"),
        strategy: z.enum(concurrencyStrategies).default('queue').describe('what a job finds when its key (or queue) is full'),
      })
      .refine((c) => c.limit != null || c.per_key != null, { message: 'needs limit or per_key' })
      .nullish(),
    rate: z
      .strictObject({
        limit: z.number().int().min(rateLimitRange.min).max(rateLimitRange.max).describe('starts per period'),
        period_seconds: z.number().int().min(ratePeriodSecondsRange.min).max(ratePeriodSecondsRange.max),
        burst: z.number().int().min(rateLimitRange.min).max(rateLimitRange.max).nullish().describe('starts at once at most; default: limit'),
        by: keyDimension.nullish().describe("absent or null: the queue's starts; else each key's"),
      })
      .nullish(),
  })
  .refine((b) => b.concurrency != null || b.rate != null, { message: 'needs concurrency or rate' })

function flowLimitsOf(body: z.output<typeof limitsBody>): FlowLimits {
  const c = body.concurrency ?? null
  const r = body.rate ?? null
  return {
    concurrency: c === null ? null : { limit: c.limit ?? null, per_key: c.per_key ?? null, strategy: c.strategy },
    rate: r === null ? null : { limit: r.limit, period_seconds: r.period_seconds, burst: r.burst ?? r.limit, by: r.by ?? null },
  }
}

const queueLimits = z
  .strictObject({
    queue: z.string(),
    concurrency: z
      .strictObject({
        limit: z.number().int().nullable(),
        per_key: z.strictObject({ limit: z.number().int(), by: z.string() }).nullable(),
        strategy: z.enum(concurrencyStrategies),
      })
      .nullable(),
    rate: z
      .strictObject({ limit: z.number().int(), period_seconds: z.number().int(), burst: z.number().int(), by: z.string().nullable() })
      .nullable(),
    updated_at: instant.nullable(),
  })
  .meta({ id: 'QueueLimits' })

function limitsView(queue: string, limits: QueueLimits | null) {
  return { queue, concurrency: limits?.concurrency ?? null, rate: limits?.rate ?? null, updated_at: limits?.updated_at ?? null }
}

const limitsDescription = `Extension (issue 29). \`concurrency.limit\` bounds the queue's running jobs, \`concurrency.per_key\` each key's (a job's key: its \`concurrency_key\`, its job type, or one of its tags); \`strategy\` \`queue\` keeps the excess pending, \`cancel_newest\` cancels a job that finds its key full (\`cancel_reason: "concurrency_limit"\`), \`cancel_in_progress\` asks the key's oldest running job to stop (as \`include_running\` cancels do) and the new one waits for its slot. \`rate\` is a token bucket of **starts** (claims), \`limit\` per \`period_seconds\`, \`burst\` at once, per key with \`by\`: the excess waits. Slots and tokens are held on the log (one gate aggregate per queue and key), so every API process counts the same; an ended attempt (ack, reap, cancel, release) frees its slots. Keys take turns, and a key at its limit never holds back another key's jobs. A project holds limits for at most ${maxQueueLimits} queues (409 \`queue_limits_limit_reached\`). Needs \`admin\`. The answer carries \`X-Event-Seq\`.`

const putLimitsSchema = {
  summary: "Set a queue's flow limits",
  description: limitsDescription,
  tags,
  params: z.object({ queue: queueNameText }),
  body: limitsBody,
  response: { 200: queueLimits, ...errorResponses(...writeCodes, 'queue_limits_limit_reached') },
}

const getLimitsSchema = {
  summary: "A queue's flow limits",
  description: 'Extension (issue 29). `concurrency` and `rate` null when the queue has none.',
  tags,
  params: z.object({ queue: queueNameText }),
  response: { 200: queueLimits, ...errorResponses() },
}

const deleteLimitsSchema = {
  summary: "Remove a queue's flow limits",
  description:
    'Extension (issue 29). Jobs running under them keep their slots until they end; new claims take none. 204 also when the queue had none. Needs `admin`.',
  tags,
  params: z.object({ queue: queueNameText }),
  response: { 204: noContent('Removed'), ...errorResponses(...writeCodes) },
}

const limitsStateSchema = {
  summary: "What a queue's flow limits hold back now",
  description: `Extension (issue 29). From the gates' read model and the job list: the jobs holding a slot, the pending jobs due now and since when the oldest waits, the queue's tokens and hold, and the top ${maxKeysInState} keys (most waiting first) with theirs.`,
  tags,
  params: z.object({ queue: queueNameText }),
  response: {
    200: z.strictObject({
      queue: z.string(),
      limits: queueLimits,
      running: z.number().int(),
      waiting: z.number().int(),
      oldest_waiting_since: instant.nullable(),
      tokens: z.number().nullable(),
      held_until: instant.nullable(),
      keys_at_limit: z.number().int(),
      keys: z.array(
        z.strictObject({
          key: z.string(),
          running: z.number().int(),
          waiting: z.number().int(),
          oldest_waiting_since: instant.nullable(),
          tokens: z.number().nullable(),
          held_until: instant.nullable(),
        }),
      ),
    }),
    ...errorResponses(),
  },
}

const settingsBody = z.object({
  default_ttl_seconds: ttlSecondsNumber
    .nullable()
    .describe('seconds a job created in the queue without `ttl_seconds` may wait to be claimed once due (1–2,592,000); null removes the default'),
})

const queueSettings = z.strictObject({ queue: z.string(), default_ttl_seconds: z.number().int().nullable() }).meta({ id: 'QueueSettings' })

const settingsSchema = {
  summary: "Set a queue's settings",
  description: `Extension (issue 28). \`default_ttl_seconds\`: the \`ttl_seconds\` of every job created in the queue (single, batch, recurring occurrence) without its own; a job's own value wins. Jobs already created keep theirs. A project holds settings for at most ${maxQueueSettings} queues; one more is 409 \`queue_settings_limit_reached\`. Needs \`admin\` (an API key acts as the owner). Recorded as a \`queue_settings_updated\` event and activity row. The answer carries \`X-Event-Seq\`.`,
  tags,
  params: z.object({ queue: queueNameText }),
  body: settingsBody,
  response: { 200: queueSettings, ...errorResponses(...writeCodes, 'queue_settings_limit_reached') },
}

const pauseSchema = {
  summary: 'Pause a queue',
  description: `Polls get no job of a paused queue, in every API process, until it is resumed or its \`until\` passes; a poll on several queues still gets the others'. Creating jobs in it still works, its running jobs still heartbeat and ack, and the reaper still retries their stale attempts. Pausing a paused queue replaces its reason and \`until\`. A project holds at most ${maxPausedQueues} paused queues; one more is 409 \`queue_pause_limit_reached\`. Needs \`admin\` (an API key acts as the owner). Recorded as a \`queue_paused\` event, an activity row and a \`queue.paused\` webhook (sent only to subscriptions that name it). Extension.`,
  tags,
  params: z.object({ queue: queueNameText }),
  body: pauseBody,
  response: { 200: queueState, ...errorResponses(...writeCodes, 'queue_pause_limit_reached') },
}

const resumeSchema = {
  summary: 'Resume a paused queue',
  description:
    'Waiting polls of the queue are woken at once, in every API process. Resuming a queue that is not paused changes nothing (200). Needs `admin`. Recorded as a `queue_resumed` event, an activity row and a `queue.resumed` webhook (sent only to subscriptions that name it). Extension.',
  tags,
  params: z.object({ queue: queueNameText }),
  response: { 200: queueState, ...errorResponses(...writeCodes) },
}

const listSchema = {
  summary: "The project's queues and whether each is paused",
  description: `Every queue that holds jobs, and every paused queue, paused first then by name, at most ${maxQueuesListed}, each with its jobs per state. \`min_seq\` (an \`X-Event-Seq\` value) makes the counts wait until they include that write. Extension.`,
  tags,
  querystring: z.object({ min_seq: minSeq }),
  response: {
    200: z.strictObject({ data: z.array(queueListItem), has_more: z.boolean().describe('more queues than listed') }),
    ...errorResponses(),
  },
}

function stateOf(queue: string, pause: QueuePause | null) {
  return {
    queue,
    paused: pause !== null,
    reason: pause?.reason ?? null,
    until: pause?.until ?? null,
    paused_at: pause?.paused_at ?? null,
    paused_by: pause?.paused_by ?? null,
  }
}

/**
 * Pausing and resuming queues (state on the project aggregate, domain/project/queue-pauses.ts),
 * their settings (domain/project/queue-settings.ts), and the list of the project's queues with their pauses and counts.
 */
export function queueRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'keys' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps } = ctx

  /** The project from the log, so a read follows a change made through another API process at once. */
  async function projectOf(request: FastifyRequest): Promise<Project> {
    const loaded = await projectHandler.load(deps.store, projectHandler.ref(request.principal.projectId))
    return loaded.state ?? request.principal.project
  }

  /** Appends the pause or resume; this process's polls see it at once, the others when its event reaches them. */
  async function change(request: FastifyRequest, reply: FastifyReply, pause: { reason: string | null; until: string | null } | null) {
    const queue = (request.params as { queue: string }).queue
    const project = await changeQueue(request, reply, queue, (acting, meta) =>
      pause === null ? { type: 'resume_queue', data: acting, meta } : { type: 'pause_queue', data: { ...acting, ...pause }, meta },
    )
    return stateOf(queue, pauseOf(project, queue, deps.now()))
  }

  /**
   * Appends a change of the queue to the project, as the caller (a dashboard member, or an API key
   * acting as the owner); this process's polls and creates follow it at once, the other processes
   * when its event reaches them. The answer carries `X-Event-Seq`. Resolves to the project after it.
   */
  async function changeQueue(
    request: FastifyRequest,
    reply: FastifyReply,
    queue: string,
    commandOf: (acting: { actor_user_id: string | null; queue: string }, meta: { now: string; actor?: Actor }) => ProjectCommand,
  ): Promise<Project> {
    const actor = request.principal.actor ?? null
    const command = commandOf({ actor_user_id: actor?.user_id ?? null, queue }, { now: deps.now().toISOString(), actor: actor ?? undefined })
    const result = await commandProject(deps, request.principal.projectId, command)
    if (result.appended) {
      ctx.keys.note(result.state!)
      ctx.jobs.noteWritten(request.principal.projectId, result.seq)
    }
    void reply.header('X-Event-Seq', String(result.seq))
    return result.state!
  }

  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get('/', { schema: listSchema, config: { role: 'viewer' } }, async (request) => {
      const projectId = request.principal.projectId
      await awaitOwnWrites(ctx, projectId, request.query.min_seq)
      const [project, counted] = await Promise.all([projectOf(request), summary(deps, projectId, { queue: null, byQueue: true })])
      const now = deps.now()
      const byQueue = new Map((counted.queues ?? []).map((q) => [q.queue, q]))
      const names = new Set([...project.queue_pauses.map((p) => p.queue), ...project.queue_settings.map((s) => s.queue), ...byQueue.keys()])
      const zero = Object.fromEntries(jobStates.map((s) => [s, 0])) as Record<(typeof jobStates)[number], number>
      const listed = [...names]
        .map((queue) => ({
          ...stateOf(queue, pauseOf(project, queue, now)),
          default_ttl_seconds: defaultTtlOf(project, queue),
          counts: byQueue.get(queue)?.counts ?? zero,
          total: byQueue.get(queue)?.total ?? 0,
        }))
        .filter((q) => q.paused || q.total > 0 || q.default_ttl_seconds !== null)
        .sort((a, b) => (a.paused !== b.paused ? (a.paused ? -1 : 1) : a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0))
      return { data: listed.slice(0, maxQueuesListed), has_more: listed.length > maxQueuesListed }
    })

    app.post('/:queue/pause', { schema: pauseSchema, config: { role: 'admin' } }, async (request, reply) =>
      change(request, reply, { reason: request.body.reason ?? null, until: request.body.until ?? null }),
    )

    app.post('/:queue/resume', { schema: resumeSchema, config: { role: 'admin' } }, async (request, reply) => change(request, reply, null))

    /** Appends the limits (null: removed). */
    const setLimits = (request: FastifyRequest, reply: FastifyReply, queue: string, limits: FlowLimits | null) =>
      changeQueue(request, reply, queue, (acting, meta) => ({ type: 'set_queue_limits', data: { ...acting, limits }, meta }))

    app.put('/:queue/limits', { schema: putLimitsSchema, config: { role: 'admin' } }, async (request, reply) => {
      const { queue } = request.params
      const project = await setLimits(request, reply, queue, flowLimitsOf(request.body))
      return limitsView(queue, queueLimitsOf(project, queue))
    })

    app.get('/:queue/limits', { schema: getLimitsSchema, config: { role: 'viewer' } }, async (request) => {
      const { queue } = request.params
      return limitsView(queue, queueLimitsOf(await projectOf(request), queue))
    })

    app.delete('/:queue/limits', { schema: deleteLimitsSchema, config: { role: 'admin' } }, async (request, reply) => {
      await setLimits(request, reply, request.params.queue, null)
      return reply.code(204).send()
    })

    app.get('/:queue/limits/state', { schema: limitsStateSchema, config: { role: 'viewer' } }, async (request) => {
      const { queue } = request.params
      const projectId = request.principal.projectId
      const limits = queueLimitsOf(await projectOf(request), queue)
      const state = await flowGates.stateOf(deps.sql, projectId, queue, limits, deps.now(), maxKeysInState)
      return { queue, limits: limitsView(queue, limits), ...state }
    })

    app.put('/:queue/settings', { schema: settingsSchema, config: { role: 'admin' } }, async (request, reply) => {
      const { queue } = request.params
      const ttl = request.body.default_ttl_seconds
      const project = await changeQueue(request, reply, queue, (acting, meta) => ({
        type: 'set_queue_settings',
        data: { ...acting, default_ttl_seconds: ttl },
        meta,
      }))
      return { queue, default_ttl_seconds: defaultTtlOf(project, queue) }
    })
  }
}
