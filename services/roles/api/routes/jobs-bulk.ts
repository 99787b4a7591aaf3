import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import {
  bulkActions,
  bulkPriorityRange,
  bulkSampleSize,
  checkBulkPriority,
  maxBulkFilterIds,
  resolveBulkFilter,
} from '../../../../domain/job-bulk.ts'
import { jobStates } from '../../../../domain/job.ts'
import { maxTagKeyLength, maxTags, maxTagValueLength } from '../../../../domain/job-options.ts'
import { JobBulkActions } from '../../../use-cases/jobs/bulk.ts'
import { OperationService } from '../../../use-cases/operations/operation-service.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest } from '../errors.ts'
import { jobTypeText, queueNameText } from '../job-fields.ts'
import { errorResponses, writeCodes } from '../openapi.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'
import { boundedString } from '../text-fields.ts'
import { isoInstant } from './jobs.ts'

/** Values one list of the filter may hold (ids excepted). */
const maxListValues = 100

const bulkFilter = z
  .strictObject({
    ids: z.array(boundedString(2048, 1)).min(1).max(maxBulkFilterIds).optional().describe(`job ids, at most ${maxBulkFilterIds}`),
    states: z
      .array(z.enum(jobStates))
      .min(1)
      .max(jobStates.length)
      .optional()
      .describe(
        'default: every state the action applies to (retry: failed, dead_letter; cancel, set_priority: pending, scheduled); others are refused',
      ),
    queues: z.array(queueNameText).min(1).max(maxListValues).optional(),
    job_types: z.array(jobTypeText).min(1).max(maxListValues).optional(),
    tags: z
      .record(boundedString(maxTagKeyLength, 1), boundedString(maxTagValueLength))
      .refine((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= maxTags, `1 to ${maxTags} tags`)
      .optional()
      .describe("the job's tags contain every pair"),
    error_type: boundedString(500, 1).optional().describe("the last error's `type`"),
    created_from: isoInstant.optional().describe('inclusive'),
    created_until: isoInstant.optional().describe('inclusive'),
    finished_from: isoInstant.optional().describe('`completed_at`, inclusive'),
    finished_until: isoInstant.optional().describe('`completed_at`, inclusive'),
  })
  .describe('every key given must hold; each list matches any of its values; at least one key')

const bulkBody = z.strictObject({
  action: z
    .enum(bulkActions)
    .describe('`retry` (failed, dead_letter), `cancel` (pending, scheduled) or `set_priority` (pending, scheduled; with `priority`)'),
  filter: bulkFilter,
  priority: z
    .number()
    .int()
    .min(bulkPriorityRange.min)
    .max(bulkPriorityRange.max)
    .optional()
    .describe('set_priority only: the offset in seconds, −600 to 600'),
  dry_run: z.boolean().optional().describe('count only: nothing changes'),
})

const bulkSchema = {
  summary: 'Retry or cancel the jobs a filter matches',
  description:
    'Extension (issue 28). `retry` applies to failed and dead-lettered jobs, `cancel` to pending and scheduled ones (never a running one), as the ' +
    'single-job routes do. With `dry_run`, 200 with the count and the first jobs the action would take; otherwise 202 with an operation ' +
    '(`GET /jobsvc/v1/operations/{id}`, `DELETE` stops it) that changes them, each by one event carrying `operation_id`. A job whose state no ' +
    "longer allows the action when reached is skipped and counted in the operation's `failed`. A filter matching more jobs than the plan's " +
    '`bulk_operation_max_jobs` is refused, dry run included (409 `bulk_limit_exceeded`). Needs the project role admin.',
  tags: ['Jobs'],
  body: bulkBody,
  response: {
    200: z.strictObject({
      matched: z.number().int().describe('jobs the action would change now'),
      sample_ids: z.array(z.string()).describe(`the first ${bulkSampleSize} of them, in the order the operation takes them (oldest first)`),
    }),
    202: z.strictObject({ operation_id: z.string().describe('`op_…`'), matched: z.number().int().describe('jobs the operation changes') }),
    ...errorResponses(...writeCodes, 'bulk_limit_exceeded'),
  },
}

/**
 * `POST /jobsvc/v1/jobs/bulk`: an action on every job a filter matches, counted from the job list
 * and run as an operation by the dispatcher role. Admins only, as reading and stopping operations
 * is: one request changes up to the plan's cap of jobs.
 */
export function jobBulkRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps, jobs } = ctx
  const bulk = new JobBulkActions(deps, new OperationService(deps))
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.post('/', { schema: bulkSchema, config: { role: 'admin' } }, async (request, reply) => {
      const body = request.body
      const { projectId, project } = request.principal
      const resolved = resolveBulkFilter(body.action, body.filter)
      if ('refused' in resolved) throw invalidRequest(resolved.refused)
      const priority = checkBulkPriority(body.action, body.priority)
      if (priority !== null) throw invalidRequest(priority.refused)
      // Counted once the job list holds this project's own writes through this process.
      await awaitOwnWrites(ctx, projectId, undefined)
      const params = { action: body.action, filter: resolved.filter, ...(body.priority === undefined ? {} : { priority: body.priority }) }
      const plan = await bulk.plan(projectId, params, deps.config.plans[project.plan].bulk_operation_max_jobs)
      if (body.dry_run === true) return reply.code(200).send({ matched: plan.matched, sample_ids: plan.sampleIds })
      const result = await bulk.start(projectId, plan, request.principal.actor)
      jobs.noteWritten(projectId, result.seq)
      return reply.code(202).header('X-Event-Seq', String(result.seq)).send({ operation_id: result.state!.id, matched: plan.matched })
    })
  }
}
