import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { jobStates } from '../../../../domain/job.ts'
import { throughputResolutions, type Resolution } from '../../../../domain/job-metrics.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest, rangeTooLarge } from '../errors.ts'
import { errorResponses, instant } from '../openapi.ts'
import { assertOrderedWindow, windowBound } from '../export-stream.ts'
import { clampLimit } from '../pagination.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'
import { limitText, minSeq, queueFilter, windowBoundText } from '../query-fields.ts'
import { boundedString } from '../text-fields.ts'
import { queueDepths, summary, throughput, topJobTypes, windowPercentiles } from '../../../use-cases/jobs/metrics-service.ts'

const hourMs = 3_600_000
const dayMs = 24 * hourMs

/**
 * The longest window per throughput interval (docs/api-notes.md, "Metrics"): 12 hours of minutes, a month of
 * hours, a year of days, so no answer holds more than about 750 buckets (its time grows with them).
 */
export const maxThroughputWindowMs: Record<Resolution, number> = { minute: 12 * hourMs, hour: 31 * dayMs, day: 366 * dayMs }
/** The job-types window is summed from hourly rows: at most 90 days of them. */
export const maxJobTypesWindowMs = 90 * dayMs

/** `from`/`until` with the export windows' codes; a missing bound defaults to `defaultSpanMs` before `until` (or now). */
function parseWindow(
  query: { from?: string | undefined; until?: string | undefined },
  now: Date,
  defaultSpanMs: number,
): { from: Date; until: Date } {
  const from = query.from === undefined ? null : windowBound(query.from, 'from')
  const until = query.until === undefined ? now : windowBound(query.until, 'until')
  const start = from ?? new Date(until.getTime() - defaultSpanMs)
  assertOrderedWindow(start, until)
  return { from: start, until }
}

/** `queue=` (an empty filter box) means every queue, as leaving it out does. */
const nonEmpty = (queue: string | undefined): string | null => (queue === undefined || queue === '' ? null : queue)

/** Without `interval`: the finest one that keeps the answer to a few hundred buckets. */
function defaultInterval(spanMs: number): Resolution {
  if (spanMs <= 6 * hourMs) return 'minute'
  if (spanMs <= 15 * dayMs) return 'hour'
  return 'day'
}

const windowQuery = {
  from: windowBoundText,
  until: windowBoundText,
  min_seq: minSeq,
}

const summaryQuery = z.object({
  queue: queueFilter,
  group_by: z.enum(['queue']).optional(),
  min_seq: minSeq,
})
const queuesQuery = z.object({ limit: limitText, min_seq: minSeq })
const throughputQuery = z.object({
  ...windowQuery,
  interval: boundedString(100).optional(),
  queue: queueFilter,
  percentiles: z
    .enum(['window'])
    .optional()
    .describe('extension: `window` adds `window_percentiles`, of every attempt finished in the window (the buckets merged), not the worst bucket'),
})
const jobTypesQuery = z.object({ ...windowQuery, limit: limitText })

const stateCounts = z
  .strictObject(Object.fromEntries(jobStates.map((s) => [s, z.number().int()])) as Record<(typeof jobStates)[number], z.ZodNumber>)
  .meta({ id: 'JobStateCounts' })

export const summaryResponse = z.strictObject({
  queue: z.string().nullable(),
  counts: stateCounts,
  total: z.number().int(),
  queues: z
    .array(z.strictObject({ queue: z.string(), counts: stateCounts, total: z.number().int() }))
    .optional()
    .describe('with group_by=queue: each queue, by name'),
})

export const queuesResponse = z.strictObject({
  data: z.array(
    z.strictObject({
      queue: z.string(),
      pending: z.number().int(),
      scheduled: z.number().int(),
      processing: z.number().int(),
      oldest_pending_at: instant.nullable().describe('when the longest-due unclaimed job became due; null when none is due'),
      oldest_pending_age_ms: z.number().int().nullable(),
    }),
  ),
  has_more: z.boolean(),
})

export const throughputResponse = z.strictObject({
  interval: z.enum(throughputResolutions),
  from: instant,
  until: instant,
  queue: z.string().nullable(),
  window_percentiles: z
    .strictObject({ p50_ms: z.number().int().nullable(), p95_ms: z.number().int().nullable(), p99_ms: z.number().int().nullable() })
    .optional()
    .describe('with percentiles=window: the durations of every attempt finished in the window, within 5%; null when none finished'),
  buckets: z.array(
    z.strictObject({
      start: instant.describe('UTC start of the bucket'),
      created: z.number().int(),
      succeeded: z.number().int(),
      failed: z.number().int().describe('attempts that failed, retried or not'),
      dead_lettered: z.number().int(),
      cancelled: z.number().int(),
      retried: z.number().int(),
      p50_ms: z.number().int().nullable().describe('of the durations of attempts finished in the bucket, within 5%; null when none finished'),
      p95_ms: z.number().int().nullable(),
      p99_ms: z.number().int().nullable(),
    }),
  ),
})

export const jobTypesResponse = z.strictObject({
  from: instant,
  until: instant,
  data: z.array(
    z.strictObject({
      job_type: z.string(),
      created: z.number().int(),
      succeeded: z.number().int(),
      failed: z.number().int(),
      dead_lettered: z.number().int(),
      success_rate: z.number().nullable().describe('share of finished attempts that succeeded, 0 to 1'),
      avg_duration_ms: z.number().nullable().describe('mean duration of finished attempts'),
    }),
  ),
})

/** `GET /jobsvc/v1/metrics/*`: dashboards' numbers, read from the projector's rollups (docs/api-notes.md, "Metrics"). */
export function metricsRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get(
      '/summary',
      {
        config: { role: 'viewer' },
        schema: {
          summary: 'Job counts by state',
          description: 'From the projector rollups. `queue` restricts it to one queue; `group_by=queue` adds each queue.',
          tags: ['Metrics'],
          querystring: summaryQuery,
          response: { 200: summaryResponse, ...errorResponses() },
        },
      },
      async (request) => {
        const projectId = request.principal.projectId
        await awaitOwnWrites(ctx, projectId, request.query.min_seq)
        return summary(deps, projectId, { queue: nonEmpty(request.query.queue), byQueue: request.query.group_by === 'queue' })
      },
    )

    app.get(
      '/queues',
      {
        config: { role: 'viewer' },
        schema: {
          summary: 'Depth per queue and the age of its oldest due job',
          description: 'Deepest queue first. `limit` is clamped to 1–1000 (default 100).',
          tags: ['Metrics'],
          querystring: queuesQuery,
          response: { 200: queuesResponse, ...errorResponses() },
        },
      },
      async (request) => {
        const projectId = request.principal.projectId
        await awaitOwnWrites(ctx, projectId, request.query.min_seq)
        return queueDepths(deps, projectId, clampLimit(request.query.limit, 100, 1, 1000))
      },
    )

    app.get(
      '/throughput',
      {
        config: { role: 'viewer' },
        schema: {
          summary: 'Created, succeeded and failed per time bucket, with duration percentiles',
          description:
            'UTC buckets of a `minute` (windows up to 12 hours), `hour` (31 days) or `day` (366 days); default window the last hour, default interval by its length.',
          tags: ['Metrics'],
          querystring: throughputQuery,
          response: { 200: throughputResponse, ...errorResponses('invalid_from', 'invalid_until', 'invalid_range', 'range_too_large') },
        },
      },
      async (request) => {
        const q = request.query
        const projectId = request.principal.projectId
        const window = parseWindow(q, deps.now(), hourMs)
        const span = window.until.getTime() - window.from.getTime()
        const interval = q.interval ?? defaultInterval(span)
        if (!(throughputResolutions as readonly string[]).includes(interval)) throw invalidRequest('interval must be minute, hour or day')
        const resolution = interval as Resolution
        if (span > maxThroughputWindowMs[resolution]) {
          const hours = maxThroughputWindowMs[resolution] / hourMs
          const limit = hours < 24 ? `${hours} hours` : `${hours / 24} days`
          throw rangeTooLarge(`a ${resolution} interval serves windows of at most ${limit}`)
        }
        await awaitOwnWrites(ctx, projectId, q.min_seq)
        const asked = { ...window, interval: resolution, queue: nonEmpty(q.queue) }
        return {
          interval: resolution,
          from: window.from.toISOString(),
          until: window.until.toISOString(),
          queue: nonEmpty(q.queue),
          ...(q.percentiles === 'window' ? { window_percentiles: await windowPercentiles(deps, projectId, asked) } : {}),
          buckets: await throughput(deps, projectId, asked),
        }
      },
    )

    app.get(
      '/job-types',
      {
        config: { role: 'viewer' },
        schema: {
          summary: 'Top job types by volume, with success rate and average duration',
          description: 'Default window the last 24 hours, at most 90 days. `limit` is clamped to 1–100 (default 10).',
          tags: ['Metrics'],
          querystring: jobTypesQuery,
          response: { 200: jobTypesResponse, ...errorResponses('invalid_from', 'invalid_until', 'invalid_range', 'range_too_large') },
        },
      },
      async (request) => {
        const q = request.query
        const projectId = request.principal.projectId
        const window = parseWindow(q, deps.now(), dayMs)
        if (window.until.getTime() - window.from.getTime() > maxJobTypesWindowMs) throw rangeTooLarge()
        await awaitOwnWrites(ctx, projectId, q.min_seq)
        const data = await topJobTypes(deps, projectId, { ...window, limit: clampLimit(q.limit, 10, 1, 100) })
        return { from: window.from.toISOString(), until: window.until.toISOString(), data }
      },
    )
  }
}
