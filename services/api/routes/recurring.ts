import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { RecurringJobNotFound, RecurringJobTypeConflict } from '../../../domain/errors.ts'
import { isActiveSchedule, recurringIdFor, type RecurringJob } from '../../../domain/recurring-job.ts'
import { deleteSchedule, recurringRef, upsertSchedule } from '../../jobs/recurring-service.ts'
import type { ApiContext } from '../app.ts'
import { invalidRequest } from '../errors.ts'
import { isStorableText, unstorableTextMessage } from '../storable.ts'
import { awaitOwnWrites, isoOrNull } from '../read-your-writes.ts'

const text = (min: number, max: number) => z.string().min(min).max(max).refine(isStorableText, unstorableTextMessage)

export const scheduleBody = z.object({
  job_type: text(1, 500),
  cron_expression: text(1, 200),
  queue: text(1, 100).nullish(),
  timezone: text(1, 100).nullish(),
  max_attempts: z.number().int().min(1).max(100).nullish(),
  timeout_seconds: z.number().int().min(1).max(86_400).nullish(),
  payload: z.record(z.string(), z.unknown()).nullish(),
})

const idParams = z.object({ id: z.string().min(1).max(600) })
const listQuery = z.object({ min_seq: z.coerce.number().int().min(0).optional() })

/** A schedule as the routes show it (README, "Recurring schedules"). */
export function scheduleView(s: RecurringJob | Record<string, unknown>) {
  const r = s as Record<string, unknown>
  const iso = isoOrNull
  return {
    id: r.id,
    job_type: r.job_type,
    cron_expression: r.cron_expression,
    queue: r.queue,
    timezone: r.timezone,
    max_attempts: r.max_attempts,
    timeout_seconds: r.timeout_seconds,
    payload: r.payload ?? {},
    next_run_at: iso(r.next_run_at),
    last_run_at: iso(r.last_run_at),
    last_job_id: r.last_job_id ?? null,
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
  }
}

/** `GET /jobsvc/v1/recurring`, `PUT` and `DELETE /jobsvc/v1/recurring/{id}`. */
export function recurringRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps, jobs } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get('/', { schema: { querystring: listQuery } }, async (request) => {
      const projectId = request.principal.projectId
      await awaitOwnWrites(ctx, projectId, request.query.min_seq)
      const rows = await deps.sql`SELECT * FROM recurring_jobs WHERE project_id = ${projectId} AND status = 'active' ORDER BY id LIMIT 1000`
      return { data: rows.map(scheduleView) }
    })

    app.put('/:id', { schema: { params: idParams, body: scheduleBody } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const ownId = recurringIdFor(request.body.job_type)
      if (request.params.id !== ownId) {
        // The type already has its schedule under its own id: the spec's conflict. Otherwise the
        // id is simply not the one this type's schedule has.
        const owner = (await deps.store.load<RecurringJob>(recurringRef(projectId, ownId))).state
        if (isActiveSchedule(owner)) throw new RecurringJobTypeConflict(ownId, owner.job_type)
        throw invalidRequest(`params.id: the schedule of job type ${JSON.stringify(request.body.job_type)} is ${ownId}`)
      }
      const result = await upsertSchedule(deps, projectId, request.params.id, request.body)
      jobs.noteWritten(projectId, result.seq)
      const created = result.appended && result.events.some((e) => e.type === 'recurring_upserted') && (result.before === null || result.before.status === 'deleted')
      return reply.code(created ? 201 : 200).header('X-Event-Seq', String(result.seq)).send(scheduleView(result.state!))
    })

    app.delete('/:id', { schema: { params: idParams } }, async (request, reply) => {
      const projectId = request.principal.projectId
      if (!/^rjob_[a-z0-9-]+$/.test(request.params.id)) throw new RecurringJobNotFound(`recurring job ${request.params.id} was not found`)
      const result = await deleteSchedule(deps, projectId, request.params.id)
      jobs.noteWritten(projectId, result.seq)
      return reply.code(204).header('X-Event-Seq', String(result.seq)).send()
    })
  }
}
