import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { jobStates } from '../../../domain/job.ts'
import type { ApiContext } from '../app.ts'
import { hasRoleAtLeast } from '../api-key-directory.ts'
import { ApiError, forbidden, rateLimitExceeded } from '../errors.ts'
import { exportCooldownMs, parseExportWindow, sendJobsExport } from '../jobs-export.ts'
import { commandProject } from '../../projects/project-service.ts'
import { BillingStateBlocked } from '../../../domain/errors.ts'
import { billingOf } from '../../../domain/project.ts'
import { quotaHeaders, type Consumption } from '../../metering/allowance.ts'
import { jobFromRow } from '../../../projections/job-list.ts'
import { toJobDetail } from '../job-views.ts'
import { cursorPage, errorResponses, instant, mediaResponse, writeCodes } from '../openapi.ts'
import { streamJobProgress } from '../progress-stream.ts'
import { decodeCursor, decodeHistoryCursor, encodeCursor, encodeHistoryCursor, parseLimit } from '../pagination.ts'
import { isStorableInstant, unstorableInstantMessage } from '../storable.ts'
import { anyText, boundedString, storableText } from '../text-fields.ts'
import { assertPayloadSize, bodyBytesOf, jobPayload } from '../payload-field.ts'
import { cursorText, formatText, jobTypeFilter, limitText, minSeq, queueFilter, windowBoundText } from '../query-fields.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'

/** Tag limits the spec leaves open (README, "Limits we chose"). */
export const maxTags = 50
export const maxTagKeyLength = 100
export const maxTagValueLength = 500
/** ISO 8601 with an offset, at most 64 characters (bounded before the format's pattern runs). */
const isoInstant = boundedString(64)
  .pipe(z.iso.datetime({ offset: true }))
  .refine((s) => isStorableInstant(Date.parse(s)), unstorableInstantMessage)
  .transform((s) => new Date(s).toISOString())

/** Goes into a `text` column of the read model. */
const text = storableText

export const createJobBody = z.object({
  job_type: text(1, 500),
  payload: jobPayload,
  queue: text(1, 100).nullish(),
  run_at: isoInstant.nullish(),
  max_attempts: z.number().int().min(1).max(100).nullish(),
  timeout_seconds: z.number().int().min(1).max(86_400).nullish(),
  idempotency_key: text(1, 200).nullish(),
  tags: z
    .record(boundedString(maxTagKeyLength, 1), boundedString(maxTagValueLength))
    .refine((t) => Object.keys(t).length <= maxTags, `at most ${maxTags} tags`)
    .nullish(),
  parent_job_id: text(1, 36).nullish(),
})

/** Longer ids are unknown, like any other id this service did not issue (404 `job_not_found`). */
const jobIdParams = z.object({ jobId: anyText() })

const jobError = z.strictObject({ type: z.string(), message: z.string(), stack_trace: z.string() }).describe('error detail object')

/** The job detail object of the spec plus run_at, timeout_seconds, parent_job_id and worker_id (job-views.ts). */
export const jobDetail = z
  .strictObject({
    id: z.string(),
    state: z.enum(jobStates),
    job_type: z.string(),
    queue: z.string(),
    payload: z.record(z.string(), z.unknown()),
    created_at: instant,
    run_at: instant.nullable().describe('when the job may run; null for immediate'),
    started_at: instant.nullable(),
    completed_at: instant.nullable(),
    attempt: z.number().int().describe('0 before the first claim'),
    max_attempts: z.number().int(),
    timeout_seconds: z.number().int(),
    progress: z.number().nullable().describe('0.0 to 1.0, as the worker last reported it'),
    duration_ms: z.number().nullable(),
    error: jobError.nullable(),
    tags: z.record(z.string(), z.string()).nullable(),
    parent_job_id: z.string().nullable(),
    worker_id: z.string().nullable(),
  })
  .meta({ id: 'Job' })

const listQuery = z.object({
  state: z.enum(jobStates as [string, ...string[]]).optional(),
  queue: queueFilter,
  job_type: jobTypeFilter,
  created_after: isoInstant.optional(),
  created_before: isoInstant.optional(),
  limit: limitText,
  cursor: cursorText,
  min_seq: minSeq,
})

const createSchema = {
  summary: 'Create a job',
  description:
    'The answer carries `Location`, `X-Event-Seq` and, with metering on, the `X-Quota-*` headers (refusals too). The body field `idempotency_key` is deprecated in favour of the `Idempotency-Key` header; using it adds `Deprecation`.',
  tags: ['Jobs'],
  body: createJobBody,
  response: {
    201: z
      .strictObject({
        id: z.string(),
        state: z.enum(jobStates).describe('`pending`, or `scheduled` when `run_at` or a live parent applies'),
        job_type: z.string(),
        queue: z.string(),
        created_at: instant,
        run_at: instant.nullable(),
        attempt: z.number().int(),
        max_attempts: z.number().int(),
      })
      .describe('The job was created (an idempotent replay repeats this answer)'),
    ...errorResponses(...writeCodes, 'billing_state_blocked', 'parent_terminal', 'invalid_state', 'parent_not_found', 'monthly_allowance_exceeded', 'spend_cap_reached'),
  },
}

const listSchema = {
  summary: 'List jobs, newest first',
  description: '`created_after` and `created_before` are exclusive. `min_seq` (an `X-Event-Seq` value) makes the read wait until the list includes that write.',
  tags: ['Jobs'],
  querystring: listQuery,
  response: { 200: cursorPage(jobDetail), ...errorResponses('invalid_limit', 'invalid_cursor') },
}

const exportSchema = {
  summary: "Export the project's jobs in a window",
  description:
    'Both bounds inclusive, at most 90 days. Chunked; rows by `created_at` then `id`; `Content-Disposition: attachment; filename="svc-jobs-<project_id>-<date>.<jsonl|csv>"`. One export per project per 60 s (429 with `Retry-After`).',
  tags: ['Jobs'],
  querystring: z.object({
    from: windowBoundText.describe('ISO 8601 date-time, start of the window (required)'),
    until: windowBoundText.describe('ISO 8601 date-time, end of the window (required)'),
    format: formatText.describe('`jsonl` (default) or `csv`'),
  }),
  response: {
    200: mediaResponse('The jobs, streamed', {
      'application/x-ndjson': 'one flat JSON object per line (format=jsonl)',
      'text/csv': 'RFC 4180 with a header row (format=csv)',
    }),
    ...errorResponses('invalid_from', 'invalid_until', 'invalid_range', 'range_too_large', 'invalid_format'),
  },
}

const readSchema = {
  summary: 'Read a job',
  description: 'The answer carries `X-Event-Seq`. A job of another project is `job_not_found` too.',
  tags: ['Jobs'],
  params: jobIdParams,
  response: { 200: jobDetail, ...errorResponses('job_not_found') },
}

/** A page of a job's history: a job can hold thousands of events (progress reports). */
const historyLimit = { fallback: 100, max: 500 }

const historySchema = {
  summary: "A job's events, oldest first",
  description: `Paged: \`limit\` 1–${historyLimit.max} (default ${historyLimit.fallback}; outside: \`invalid_limit\`), \`cursor\` the \`next_cursor\` of the previous page.`,
  tags: ['Jobs'],
  params: jobIdParams,
  querystring: z.object({ limit: boundedString(20).optional(), cursor: boundedString(200).optional() }),
  response: {
    200: z.strictObject({
      job_id: z.string(),
      data: z.array(
        z.strictObject({
          sequence: z.number().int().describe('position of the event in the log'),
          id: z.string(),
          type: z.string().describe('event type, e.g. job_created, job_claimed, job_succeeded'),
          time: instant,
          data: z.record(z.string(), z.unknown()),
        }),
      ),
      has_more: z.boolean(),
      next_cursor: z.string().nullable().describe('pass back as `cursor` for the next page; null when has_more is false'),
    }),
    ...errorResponses('job_not_found', 'invalid_limit', 'invalid_cursor'),
  },
}

/** What a stream refused for its project's number of open streams is told to wait. */
const streamRetryAfterMs = 5_000

const eventsSchema = {
  summary: "Follow a job's state and progress (server-sent events)",
  description:
    '`event: snapshot` frames: the current one at once, then one per change of state or progress. The stream closes when the job ends, and after 120 s. A project has at most `max_event_streams_per_project` streams open per API process (default 100); one more answers 429 `rate_limit_exceeded` with `Retry-After`.',
  tags: ['Jobs'],
  params: jobIdParams,
  response: {
    200: mediaResponse('The event stream', { 'text/event-stream': '`event: snapshot` frames whose `data` is `{state, progress, attempt, max_attempts}`' }),
    ...errorResponses('job_not_found'),
  },
}

const cancelSchema = {
  summary: 'Cancel a pending or scheduled job',
  description: 'Needs the project role member or above. Scheduled continuations are cancelled with it.',
  tags: ['Jobs'],
  params: jobIdParams,
  response: {
    200: z.strictObject({ id: z.string(), state: z.enum(jobStates).describe('`cancelled`') }),
    ...errorResponses(...writeCodes, 'forbidden', 'job_not_found', 'invalid_state'),
  },
}

const retrySchema = {
  summary: 'Retry a failed or dead-lettered job',
  tags: ['Jobs'],
  params: jobIdParams,
  response: {
    200: z.strictObject({ id: z.string(), state: z.enum(jobStates).describe('`pending`'), attempt: z.number().int() }),
    ...errorResponses(...writeCodes, 'job_not_found', 'invalid_state'),
  },
}

/** Creation with metering off (a tunable): nothing is counted and no quota headers are sent. */
const unmetered: Consumption = {
  admitted: true,
  period: '',
  usedAfter: 0,
  asOverage: false,
  reading: { limit: 0, used: 0, overage: 0, overageCostCents: 0, spendCapCents: null, resetAt: 0 },
}

export function jobRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps, jobs } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    // Every job-creation answer carries the quota headers, replays and refusals included; the
    // handler sets them when it takes a unit, this fills them in for every other answer.
    app.addHook('onSend', async (request, reply, payload) => {
      if (request.method !== 'POST' || request.routeOptions.url !== '/jobsvc/v1/jobs/' && request.routeOptions.url !== '/jobsvc/v1/jobs') return payload
      if (reply.hasHeader('X-Quota-Limit') || !request.principal || !deps.config.tunables.metering_enabled) return payload
      const { project } = request.principal
      const reading = await ctx.billing.allowance.read(project.id, ctx.billing.termsOf(project), deps.now()).catch(() => null)
      if (reading !== null) void reply.headers(quotaHeaders(reading))
      return payload
    })

    app.post('/', { schema: createSchema }, async (request, reply) => {
      const body = request.body
      assertPayloadSize(body.payload, bodyBytesOf(request.headers), deps.config.tunables.max_payload_bytes)
      const { project } = request.principal
      if (billingOf(project).state !== 'active') {
        throw new BillingStateBlocked(`the project's billing state is ${billingOf(project).state}; job reads still work`)
      }
      // The allowance is taken before the append (so it is never exceeded) and given back if the
      // job is not created after all.
      const terms = ctx.billing.termsOf(project)
      const consumption = deps.config.tunables.metering_enabled
        ? await ctx.billing.allowance.consume(project.id, terms, deps.now())
        : unmetered
      if (consumption !== unmetered) void reply.headers(quotaHeaders(consumption.reading))
      if (!consumption.admitted) {
        throw new ApiError(429, consumption.code, consumption.code === 'spend_cap_reached' ? 'the spend cap is reached' : "this period's job allowance is used up")
      }
      const created = await jobs.create(request.principal.projectId, {
        job_type: body.job_type,
        payload: body.payload,
        queue: body.queue ?? 'default',
        run_at: body.run_at ?? null,
        max_attempts: body.max_attempts ?? 3,
        timeout_seconds: body.timeout_seconds ?? 1800,
        tags: body.tags ?? null,
        parent_job_id: body.parent_job_id ?? null,
        idempotency_key: body.idempotency_key ?? null,
      }).catch(async (err) => {
        if (consumption !== unmetered) await ctx.billing.allowance.release(project.id, consumption)
        throw err
      })
      const { job, seq } = created
      if (consumption !== unmetered && consumption.usedAfter >= Math.ceil(terms.allowance * 0.8)) {
        ctx.billing.noteUsage(project, terms, consumption.usedAfter, consumption.period).catch((err) => {
          deps.log.warn({ err, project_id: project.id }, 'allowance warning not recorded')
        })
      }
      return reply
        .code(201)
        .header('Location', `/jobsvc/v1/jobs/${job.id}`)
        .header('X-Event-Seq', String(seq))
        .send({
          id: job.id,
          state: job.state,
          job_type: job.job_type,
          queue: job.queue,
          created_at: job.created_at,
          run_at: job.run_at,
          attempt: job.attempt,
          max_attempts: job.max_attempts,
        })
    })

    app.get('/', { schema: listSchema }, async (request, reply) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = parseLimit(q.limit, 50, 1, 100)
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor)
      await awaitOwnWrites(ctx, projectId, q.min_seq)
      const sql = deps.sql
      const rows = await sql`
        SELECT * FROM jobs
        WHERE project_id = ${projectId}
          ${q.state ? sql`AND state = ${q.state}` : sql``}
          ${q.queue ? sql`AND queue = ${q.queue}` : sql``}
          ${q.job_type ? sql`AND job_type = ${q.job_type}` : sql``}
          ${q.created_after ? sql`AND created_at > ${q.created_after}` : sql``}
          ${q.created_before ? sql`AND created_at < ${q.created_before}` : sql``}
          ${after ? sql`AND (created_at, id) < (${after.created_at}, ${after.id})` : sql``}
        ORDER BY created_at DESC, id DESC
        LIMIT ${limit + 1}`
      const page = rows.slice(0, limit).map((r) => jobFromRow(r))
      const hasMore = rows.length > limit
      const last = page.at(-1)
      return reply.send({
        data: page.map(toJobDetail),
        has_more: hasMore,
        next_cursor: hasMore && last ? encodeCursor({ created_at: last.created_at, id: last.id }) : null,
      })
    })

    app.get('/export', { schema: exportSchema }, async (request, reply) => {
      const window = parseExportWindow(request.query)
      const projectId = request.principal.projectId
      const verdict = await ctx.accounts.limits.takeCooldown('jobs-export', projectId, exportCooldownMs, deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'one jobs export per project per 60 seconds')
      await commandProject(deps, projectId, {
        type: 'record_jobs_export',
        data: { from: window.from.toISOString(), until: window.until.toISOString(), format: window.format },
        meta: { now: deps.now().toISOString() },
      })
      return sendJobsExport(deps, reply, projectId, window)
    })

    app.get('/:jobId', { schema: readSchema }, async (request, reply) => {
      const { job, seq } = await jobs.get(request.principal.projectId, request.params.jobId)
      return reply.header('X-Event-Seq', String(seq)).send(toJobDetail(job))
    })

    app.get('/:jobId/history', { schema: historySchema }, async (request) => {
      const limit = parseLimit(request.query.limit, historyLimit.fallback, 1, historyLimit.max)
      const from = request.query.cursor === undefined ? null : decodeHistoryCursor(request.query.cursor)
      const page = await jobs.history(request.principal.projectId, request.params.jobId, from, limit)
      return {
        job_id: request.params.jobId,
        data: page.events.map(({ seq, event: e }) => ({ sequence: seq, id: e.id, type: e.type, time: e.time, data: e.data as Record<string, unknown> })),
        has_more: page.next !== null,
        next_cursor: page.next === null ? null : encodeHistoryCursor(page.next),
      }
    })

    app.get('/:jobId/events', { schema: eventsSchema }, async (request, reply) => {
      const projectId = request.principal.projectId
      const release = ctx.streams.tryAcquire(projectId)
      if (release === null) {
        throw rateLimitExceeded(streamRetryAfterMs, `this project already has ${ctx.streams.max} progress streams open on this server; retry after Retry-After`)
      }
      await streamJobProgress(deps, jobs, ctx.stopping, request, reply, projectId, request.params.jobId, release)
    })

    app.post('/:jobId/cancel', { schema: cancelSchema }, async (request, reply) => {
      if (!hasRoleAtLeast(request.principal.role, 'member')) throw forbidden('cancelling a job needs the project role member or above')
      const { job, seq } = await jobs.cancel(request.principal.projectId, request.params.jobId)
      return reply.header('X-Event-Seq', String(seq)).send({ id: job.id, state: job.state })
    })

    app.post('/:jobId/retry', { schema: retrySchema }, async (request, reply) => {
      const { job, seq } = await jobs.retry(request.principal.projectId, request.params.jobId)
      return reply.header('X-Event-Seq', String(seq)).send({ id: job.id, state: job.state, attempt: job.attempt })
    })
  }
}
