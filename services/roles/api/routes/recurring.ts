import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { RecurringJobNotFound, RecurringJobTypeConflict } from '../../../../domain/errors.ts'
import { isActiveSchedule, recurringIdFor, type RecurringJob } from '../../../../domain/recurring-job.ts'
import { recurringJobs } from '../../../../projections/recurring-jobs.ts'
import { recurringHandler } from '../../../../streams/aggregates.ts'
import { deleteSchedule, upsertSchedule } from '../../../use-cases/jobs/recurring-service.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest } from '../errors.ts'
import { errorResponses, instant, noContent, writeCodes } from '../openapi.ts'
import { assertPayloadSize, bodyBytesOf, jobPayload } from '../payload-field.ts'
import { jobTypeText, maxAttemptsNumber, priorityNumber, queueNameText, timeoutSecondsNumber, ttlSecondsNumber } from '../job-fields.ts'
import { minSeq } from '../query-fields.ts'
import { boundedString, storableText } from '../text-fields.ts'
import { awaitOwnWrites, isoOrNull } from '../read-your-writes.ts'

const text = storableText

export const scheduleBody = z.object({
  job_type: jobTypeText,
  cron_expression: text(1, 200),
  queue: queueNameText.nullish(),
  timezone: text(1, 100).nullish(),
  max_attempts: maxAttemptsNumber.nullish(),
  timeout_seconds: timeoutSecondsNumber.nullish(),
  /** Every fired job carries it: the same limits as a job's payload. */
  payload: jobPayload.nullish(),
  /** Extension (issue 28): the priority of every job it creates. */
  priority: priorityNumber.nullish(),
  ttl_seconds: ttlSecondsNumber
    .nullish()
    .describe("extension: every occurrence's `ttl_seconds` (1–2,592,000); absent or null: the queue's default, if it has one"),
})

const idParams = z.object({ id: boundedString(600, 1) })
const listQuery = z.object({ min_seq: minSeq })

/** A schedule as the routes show it (docs/api-notes.md, "Recurring schedules"). */
export const recurringSchedule = z
  .strictObject({
    id: z.string().describe('`rjob_` followed by the slug of the job type'),
    job_type: z.string(),
    cron_expression: z.string(),
    queue: z.string(),
    timezone: z.string().describe('IANA name'),
    max_attempts: z.number().int(),
    timeout_seconds: z.number().int(),
    payload: z.record(z.string(), z.unknown()),
    ttl_seconds: z.number().int().optional().describe("extension: every occurrence's ttl; present only when the schedule has one"),
    next_run_at: instant.nullable(),
    last_run_at: instant.nullable(),
    last_job_id: z.string().nullable(),
    created_at: instant,
    updated_at: instant,
    priority: z.number().int().optional().describe('extension: the priority of every job it creates; present only when it is not 0'),
  })
  .meta({ id: 'RecurringSchedule' })

/** From the aggregate's state or a read-model row, which hold the same fields. */
export function scheduleView(s: RecurringJob | Record<string, unknown>): z.output<typeof recurringSchedule> {
  const r = s as Record<string, unknown>
  const iso = isoOrNull
  return {
    id: r.id as string,
    job_type: r.job_type as string,
    cron_expression: r.cron_expression as string,
    queue: r.queue as string,
    timezone: r.timezone as string,
    max_attempts: r.max_attempts as number,
    timeout_seconds: r.timeout_seconds as number,
    payload: (r.payload ?? {}) as Record<string, unknown>,
    ...(r.ttl_seconds === undefined || r.ttl_seconds === null ? {} : { ttl_seconds: r.ttl_seconds as number }),
    next_run_at: iso(r.next_run_at),
    last_run_at: iso(r.last_run_at),
    last_job_id: (r.last_job_id ?? null) as string | null,
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
    ...(r.priority === undefined || r.priority === null ? {} : { priority: r.priority as number }),
  }
}

const listSchema = {
  summary: 'List recurring schedules',
  description: 'Live schedules, by id. `min_seq` (an `X-Event-Seq` value) makes the read wait until the list includes that write.',
  tags: ['Recurring'],
  querystring: listQuery,
  response: { 200: z.strictObject({ data: z.array(recurringSchedule) }), ...errorResponses() },
}

const putSchema = {
  summary: 'Create or update a schedule',
  description:
    "`{id}` must be the job type's `rjob_` slug. 201 when the schedule is created, 200 when it is updated (an identical PUT changes nothing). The answer carries `X-Event-Seq`. The project's plan bounds its live schedules (one more is 409 `recurring_limit_reached`) and how close together the occurrences of a 6-field expression may be (400 `cron_interval_too_short`).",
  tags: ['Recurring'],
  params: idParams,
  body: scheduleBody,
  response: {
    200: recurringSchedule,
    201: recurringSchedule,
    ...errorResponses(
      ...writeCodes,
      'invalid_cron_expression',
      'cron_interval_too_short',
      'invalid_timezone',
      'recurring_job_type_conflict',
      'recurring_limit_reached',
      'log_budget_exceeded',
    ),
  },
}

const deleteSchema = {
  summary: 'Delete a schedule',
  tags: ['Recurring'],
  params: idParams,
  response: { 204: noContent('Deleted; the answer carries `X-Event-Seq`'), ...errorResponses(...writeCodes, 'recurring_job_not_found') },
}

/** `GET /jobsvc/v1/recurring`, `PUT` and `DELETE /jobsvc/v1/recurring/{id}`. */
export function recurringRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps, jobs } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get('/', { schema: listSchema, config: { role: 'viewer' } }, async (request) => {
      const projectId = request.principal.projectId
      await awaitOwnWrites(ctx, projectId, request.query.min_seq)
      const rows = await recurringJobs.activeOfProject(deps.sql, projectId)
      return { data: rows.map(scheduleView) }
    })

    app.put('/:id', { schema: putSchema, config: { role: 'member' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      if (request.body.payload) assertPayloadSize(request.body.payload, bodyBytesOf(request.headers), deps.config.tunables.max_payload_bytes)
      const ownId = recurringIdFor(request.body.job_type)
      if (request.params.id !== ownId) {
        // The type already has its schedule under its own id: the spec's conflict. Otherwise the
        // id is simply not the one this type's schedule has.
        const owner = (await recurringHandler.load(deps.store, recurringHandler.ref(projectId, ownId))).state
        if (isActiveSchedule(owner)) throw new RecurringJobTypeConflict(ownId, owner.job_type)
        throw invalidRequest(`params.id: the schedule of job type ${JSON.stringify(request.body.job_type)} is ${ownId}`)
      }
      const result = await upsertSchedule(
        deps,
        { id: projectId, plan: request.principal.project.plan },
        request.params.id,
        request.body,
        request.principal.actor,
      )
      jobs.noteWritten(projectId, result.seq)
      const created =
        result.appended &&
        result.events.some((e) => e.type === 'recurring_upserted') &&
        (result.before === null || result.before.status === 'deleted')
      return reply
        .code(created ? 201 : 200)
        .header('X-Event-Seq', String(result.seq))
        .send(scheduleView(result.state!))
    })

    app.delete('/:id', { schema: deleteSchema, config: { role: 'member' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      if (!/^rjob_[a-z0-9-]+$/.test(request.params.id)) throw new RecurringJobNotFound(`recurring job ${request.params.id} was not found`)
      const result = await deleteSchedule(deps, projectId, request.params.id, request.principal.actor)
      jobs.noteWritten(projectId, result.seq)
      return reply.code(204).header('X-Event-Seq', String(result.seq)).send()
    })
  }
}
