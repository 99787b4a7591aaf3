import type { FastifyPluginAsync, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { Forbidden, GraphNotCreated } from '../../../../domain/errors.ts'
import { isGraphBatch, looksLikeGraphBatch, maxGraphBatchJobs, maxRefLength, planGraph } from '../../../../domain/job-graph.ts'
import { jobStates, parentFailureRules, type Job } from '../../../../domain/job.ts'
import { hasRoleAtLeast } from '../../../../domain/project/index.ts'
import { maxConcurrencyKeyLength, maxParents, maxTagKeyLength, maxTags, maxTagValueLength } from '../../../../domain/job-options.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest, itemFailure, rateLimitExceeded, type ItemFailure } from '../errors.ts'
import { exportCooldownMs, parseExportWindow, sendJobsExport, wantsAttestation } from '../export-stream.ts'
import { ExportAttestation } from '../../../use-cases/audit/export-attestation.ts'
import { assertAuditLogKept } from './audit.ts'
import { commandProject } from '../../../use-cases/projects/project-service.ts'
import { quotaHeaders } from '../../../use-cases/metering/allowance.ts'
import { createGraph, createJobs } from '../../../use-cases/jobs/create-jobs.ts'
import { maxChildrenShown } from '../../../use-cases/jobs/job-service.ts'
import { runSerialPerKey } from '../../../use-cases/jobs/serial-per-key.ts'
import {
  bodyKeyDeprecation,
  completeItemKey,
  keyRefusal,
  releaseItemKey,
  reserveItemKey,
  singleCreateFingerprint,
  type ItemKey,
} from '../idempotency-hooks.ts'
import { jobList } from '../../../../projections/job-list.ts'
import { toJobDetail } from '../job-views.ts'
import { cursorPage, errorResponses, instant, itemErrorObject, mediaResponse, writeCodes } from '../openapi.ts'
import { streamJobProgress } from '../progress-stream.ts'
import { decodeCursor, decodeHistoryCursor, encodeCursor, encodeHistoryCursor, parseLimit } from '../pagination.ts'
import { isStorableInstant, isStorableText, unstorableInstantMessage, unstorableTextMessage } from '../storable.ts'
import { anyText, boundedString, storableText } from '../text-fields.ts'
import { assertPayloadSize, bodyBytesOf, jobPayload } from '../payload-field.ts'
import { jobTypeText, maxAttemptsNumber, priorityNumber, queueNameText, timeoutSecondsNumber, ttlSecondsNumber } from '../job-fields.ts'
import { cursorText, formatText, jobTypeFilter, limitText, minSeq, queueFilter, windowBoundText } from '../query-fields.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'
import { historyEventTypes, toHistoryFilter, toJobMoment } from '../job-moments.ts'
import { encodeFeedCursor } from '../../../use-cases/events/feed-cursor.ts'
import { readJobAsOf } from '../../../use-cases/jobs/job-as-of.ts'
import { debounceField, dedupField } from '../dedup-fields.ts'

/** ISO 8601 with an offset, at most 64 characters (bounded before the format's pattern runs). */
export const isoInstant = boundedString(64)
  .pipe(z.iso.datetime({ offset: true }))
  .refine((s) => isStorableInstant(Date.parse(s)), unstorableInstantMessage)
  .transform((s) => new Date(s).toISOString())

/** Goes into a `text` column of the read model. */
const text = storableText

const createJobFields = z.object({
  job_type: jobTypeText,
  payload: jobPayload.meta({ examples: [{ to: 'ada@example.com' }] }),
  queue: queueNameText.nullish(),
  run_at: isoInstant.nullish(),
  max_attempts: maxAttemptsNumber.nullish().describe("default: the `max_attempts` of the queue's retry policy (3 unless the project set one)"),
  timeout_seconds: timeoutSecondsNumber.nullish(),
  idempotency_key: text(1, 200).nullish(),
  tags: z
    .record(boundedString(maxTagKeyLength, 1), text(0, maxTagValueLength))
    .refine((t) => Object.keys(t).length <= maxTags, `at most ${maxTags} tags`)
    .refine((t) => Object.keys(t).every(isStorableText), `a key ${unstorableTextMessage}`)
    .nullish(),
  parent_job_id: text(1, 36).nullish(),
  priority: priorityNumber.nullish(),
  ttl_seconds: ttlSecondsNumber
    .nullish()
    .describe(
      'extension (issue 28): seconds the job may wait to be claimed once due (1–2,592,000); not claimed by then, it ends `cancelled` with `cancel_reason: "expired"`. Absent or null: the queue\'s default ttl, if it has one',
    ),
  dedup: dedupField.nullish(),
  debounce: debounceField.nullish(),
  concurrency_key: text(1, maxConcurrencyKeyLength)
    .nullish()
    .describe(
      'extension (issue 29): the key the queue\'s per-key limits count the job by when they are `by: "concurrency_key"` (`PUT /queues/{queue}/limits`); absent or null: none',
    ),
  depends_on: z
    .array(text(1, 36))
    .min(1)
    .max(maxParents)
    .refine((ids) => new Set(ids).size === ids.length, 'a parent may be named once')
    .nullish()
    .describe(
      `extension (issue 30): 1–${maxParents} parent job ids of the project; the job waits \`scheduled\` until every parent has succeeded, then becomes \`pending\` (or stays scheduled until its \`run_at\`). Not with \`parent_job_id\` (its one-parent form) or \`debounce\``,
    ),
  on_parent_failure: z
    .enum(parentFailureRules)
    .nullish()
    .describe(
      'extension (issue 30), with `depends_on` (or `depends_on_refs` in a batch): what a parent that is dead-lettered or cancelled does to the job: `cancel` (default) cancels it, `run` runs it once every parent has ended (a fan-in of whatever finished), `ignore` drops that parent from its parents',
    ),
})

/** The rules across a create's fields; `hasParentRefs`: a graph batch's item names parents by ref. */
function refineCreate(body: z.output<typeof createJobFields>, ctx: z.RefinementCtx, hasParentRefs = false): void {
  const hasParents = body.depends_on != null || hasParentRefs
  if (hasParents && body.parent_job_id != null)
    ctx.addIssue({ code: 'custom', path: ['depends_on'], message: 'depends_on cannot be combined with parent_job_id (its one-parent form)' })
  if (body.on_parent_failure != null && !hasParents)
    ctx.addIssue({ code: 'custom', path: ['on_parent_failure'], message: 'on_parent_failure needs depends_on' })
  // A debounce decides the job's due time and its key; a parent would decide the due time too.
  if (body.debounce == null) return
  const clash =
    body.dedup != null ? 'dedup' : body.run_at != null ? 'run_at' : body.parent_job_id != null ? 'parent_job_id' : hasParents ? 'depends_on' : null
  if (clash !== null) ctx.addIssue({ code: 'custom', path: ['debounce'], message: `debounce cannot be combined with ${clash}` })
}

export const createJobBody = createJobFields.superRefine((body, ctx) => refineCreate(body, ctx))

/**
 * A batch item: a single create's body, and (issue 30) a graph's `ref` and `depends_on_refs`
 * (domain/job-graph.ts: a ref names an earlier item only, so parents come first).
 */
const batchItemBody = createJobFields
  .extend({
    ref: text(1, maxRefLength)
      .nullish()
      .describe('extension (issue 30): names the item for later items of the same batch (`depends_on_refs`); unique in the batch'),
    depends_on_refs: z
      .array(text(1, maxRefLength))
      .min(1)
      .max(maxParents)
      .nullish()
      .describe(
        `extension (issue 30): refs of EARLIER items of the batch the job depends on, beside \`depends_on\` (${maxParents} parents at most in all). A batch using refs is a graph: it is created whole or not at all`,
      ),
  })
  .superRefine((body, ctx) => refineCreate(body, ctx, body.depends_on_refs != null))

/** Longer ids are unknown, like any other id this service did not issue (404 `job_not_found`). */
const jobIdParams = z.object({ jobId: anyText() })

const jobError = z.strictObject({ type: z.string(), message: z.string(), stack_trace: z.string() }).describe('error detail object')

/** The job detail object of the spec plus run_at, timeout_seconds, parent_job_id, worker_id, traceparent and result (job-views.ts). */
export const jobDetail = z
  .strictObject({
    id: z.string().meta({ examples: ['job_01j9z3k8q4x7v2m5n6p8r0s1t2'] }),
    state: z.enum(jobStates),
    job_type: z.string().meta({ examples: ['send-email'] }),
    queue: z.string().meta({ examples: ['emails'] }),
    payload: z.record(z.string(), z.unknown()).meta({ examples: [{ to: 'ada@example.com' }] }),
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
    traceparent: z.string().nullable().describe("the create's valid W3C `traceparent` header; null without one"),
    result: z.unknown().describe("what the handler of the job's successful attempt returned (the ack's `result`); null without one"),
    cancel_requested_at: instant
      .optional()
      .describe(
        'Extension (issue 28): when a cancel of the running attempt was asked for (`include_running`); absent on jobs never asked to stop while running',
      ),
    priority: z
      .number()
      .int()
      .optional()
      .describe('extension: the claim order offset in seconds; present only for a job created with a non-zero priority or changed since'),
    ttl_seconds: z
      .number()
      .int()
      .optional()
      .describe('extension (issue 28): present only for a job created with a ttl (its own or its queue’s default)'),
    expires_at: instant
      .nullable()
      .optional()
      .describe(
        'extension: present only with `ttl_seconds`: when its current wait to be claimed runs out; null while it runs, waits for its parent, or has ended after running',
      ),
    cancel_reason: z
      .enum(['expired', 'concurrency_limit', 'parent_never_created'])
      .optional()
      .describe(
        'extension: present only on a job cancelled because it was not claimed within its ttl (`expired`), because its key was full under `cancel_newest` (`concurrency_limit`), or because a parent of its graph batch was never created, the batch cut short by a crash (`parent_never_created`)',
      ),
    concurrency_key: z.string().optional().describe('extension (issue 29): present only for a job created with one'),
    depends_on: z
      .array(z.string())
      .optional()
      .describe('extension (issue 30): present only for a job created with `depends_on`: its parents (less those dropped under `ignore`)'),
    waiting_for: z
      .array(z.string())
      .optional()
      .describe('extension (issue 30), with `depends_on`: the parents it still waits for (empty once activated)'),
    on_parent_failure: z.enum(parentFailureRules).optional().describe('extension (issue 30), with `depends_on`'),
  })
  .meta({ id: 'Job' })

/** A create that met its dedup key's holder (issue 29): the existing job, as a single read shows it. */
const deduplicatedJob = jobDetail
  .extend({ deduplicated: z.literal(true).describe("no job was created: this is the job holding the create's `dedup` key") })
  .describe("A duplicate under the create's `dedup` option: no job was created, this is the existing one")
  .meta({ id: 'DeduplicatedJob' })

const listQuery = z.object({
  state: z.enum(jobStates).optional(),
  queue: queueFilter,
  job_type: jobTypeFilter,
  created_after: isoInstant.optional(),
  created_before: isoInstant.optional(),
  limit: limitText,
  cursor: cursorText,
  min_seq: minSeq,
})

/** The single create's 201 body; each created item of a batch carries the same. */
const createdJob = z
  .strictObject({
    id: z.string(),
    state: z.enum(jobStates).describe('`pending`, or `scheduled` when `run_at` or a live parent applies'),
    job_type: z.string(),
    queue: z.string(),
    created_at: instant,
    run_at: instant.nullable(),
    attempt: z.number().int(),
    max_attempts: z.number().int(),
    depends_on: z.array(z.string()).optional().describe('extension (issue 30): only for a job created with `depends_on`, as on the job'),
    waiting_for: z.array(z.string()).optional().describe('extension (issue 30): only with `depends_on`: the parents it waits for'),
    on_parent_failure: z.enum(parentFailureRules).optional().describe('extension (issue 30): only with `depends_on`'),
  })
  .describe('The created job')

function toCreatedJob(job: Job): z.output<typeof createdJob> {
  return {
    id: job.id,
    state: job.state,
    job_type: job.job_type,
    queue: job.queue,
    created_at: job.created_at,
    run_at: job.run_at,
    attempt: job.attempt,
    max_attempts: job.max_attempts,
    // Extension (issue 30): a job of a graph says what it waits for.
    ...(job.depends_on === undefined
      ? {}
      : { depends_on: job.depends_on, waiting_for: job.waiting_for ?? [], on_parent_failure: job.on_parent_failure ?? 'cancel' }),
  }
}

/**
 * The creates' only header of their own. Not checked by the schema: a malformed trace context is
 * dropped by the job aggregate instead of refusing the job (domain/trace-context.ts). Other headers
 * pass through untouched.
 */
const creationHeaders = z.looseObject({
  // Bounded like every string (Node caps the headers at 16 KiB anyway), never refused for its form.
  traceparent: anyText()
    .optional()
    .describe(
      'W3C Trace Context (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`), stored with the job (each job of a batch) and handed to its workers in poll answers; an invalid value is ignored',
    ),
})

/** What refuses one job, alone or as an item of a batch (its status is the single create's). */
const creationCodes = [
  'parent_terminal',
  'invalid_state',
  'parent_not_found',
  'monthly_allowance_exceeded',
  'spend_cap_reached',
  'log_budget_exceeded',
] as const

const createSchema = {
  summary: 'Create a job',
  description:
    'The answer carries `Location`, `X-Event-Seq` and, with metering on, the `X-Quota-*` headers (refusals too). The body field `idempotency_key` is deprecated in favour of the `Idempotency-Key` header; using it adds `Deprecation`.',
  tags: ['Jobs'],
  headers: creationHeaders,
  body: createJobBody,
  response: {
    200: deduplicatedJob,
    201: createdJob.describe('The job was created (an idempotent replay repeats this answer)'),
    ...errorResponses(...writeCodes, 'billing_state_blocked', ...creationCodes),
  },
}

/** Jobs one batch may create (README, "Security and limits"). */
export const maxBatchJobs = 1000

/**
 * Items are validated one by one in the handler, each exactly as a single create's body: one bad
 * item fails alone. A graph batch may hold more than a plain one (assertBatchSize).
 */
const batchBody = z.object({ jobs: z.array(z.unknown()).min(1).max(maxGraphBatchJobs) })

/** Documented only: the route validates each item itself, so one bad item fails alone (in a graph batch, none is created then). */
const documentedBatchBody = z.object({ jobs: z.array(batchItemBody).min(1).max(maxGraphBatchJobs) })

/** A plain batch holds at most maxBatchJobs items; one whose items carry `ref` or `depends_on_refs`, maxGraphBatchJobs. */
function assertBatchSize(items: readonly unknown[]): void {
  if (items.length <= maxBatchJobs || looksLikeGraphBatch(items)) return
  throw invalidRequest(
    `body.jobs: at most ${maxBatchJobs.toLocaleString('en-US')} items (${maxGraphBatchJobs.toLocaleString('en-US')} in a graph batch, whose items carry ref or depends_on_refs)`,
  )
}

const batchConfig = {
  role: 'member',
  documentedBody: documentedBatchBody,
  requestWeight: (body: unknown) => (body as { jobs: unknown[] }).jobs.length,
} as const

const batchItem = z.union([
  z.strictObject({
    status: z.literal(201),
    body: createdJob,
    idempotent_replay: z.literal(true).optional().describe("present when the item's body-field `idempotency_key` replayed an earlier create"),
  }),
  z.strictObject({ status: z.literal(200), body: deduplicatedJob }),
  z.strictObject({
    status: z.number().int().describe('the status a single create of this item would have answered'),
    error: itemErrorObject(
      'invalid_request',
      'idempotency_key_reuse',
      ...creationCodes,
      'graph_not_created',
      'service_unavailable',
      'internal_error',
    ),
  }),
])

const batchSchema = {
  summary: 'Create up to 1,000 jobs (2,000 in a graph batch)',
  description: [
    `\`jobs\` holds 1 to ${maxBatchJobs.toLocaleString('en-US')} bodies of \`POST /jobsvc/v1/jobs\` (extension: up to ${maxGraphBatchJobs.toLocaleString('en-US')} in a graph batch, whose items carry \`ref\` or \`depends_on_refs\`), each validated and created exactly as a single create; \`results\` answers them in the same order, each with the status a single create would have had and its 201 body or its error object. The request answers 200 when the batch was processed, whatever its items' outcomes.`,
    "Each created job takes a unit of the monthly allowance: when fewer units are left than valid items, the first ones are created and the rest answer 429 `monthly_allowance_exceeded` or `spend_cap_reached`. The `X-Quota-*` headers count before the first job of the batch; `X-Event-Seq` is the last created job's.",
    "The whole request is refused (the error envelope, no `results`) when its body is not `{jobs: [1 to 1,000 items]}` (2,000 in a graph batch), the project's billing state is not active (402), by the hourly request limit (the batch counts one request per item, all or none; a replay counts one) and by the `Idempotency-Key` rules: a key covers the whole batch, and a replay repeats the whole answer. An item's body-field `idempotency_key` works as on a single create, in the same key space.",
  ].join('\n\n'),
  tags: ['Jobs'],
  headers: creationHeaders,
  body: batchBody,
  response: {
    200: z
      .strictObject({
        created: z.number().int().describe('items answered 201'),
        failed: z.number().int().describe('items answered with an error (a duplicate under `dedup`, answered 200, counts in neither)'),
        results: z.array(batchItem).describe('one per item of `jobs`, in its order'),
      })
      .describe('The batch was processed (an idempotent replay repeats this answer)'),
    ...errorResponses(...writeCodes, 'billing_state_blocked'),
  },
}

const listSchema = {
  summary: 'List jobs, newest first',
  description:
    '`created_after` and `created_before` are exclusive. `min_seq` (an `X-Event-Seq` value) makes the read wait until the list includes that write.',
  tags: ['Jobs'],
  querystring: listQuery,
  response: { 200: cursorPage(jobDetail), ...errorResponses('invalid_limit', 'invalid_cursor') },
}

const exportSchema = {
  summary: "Export the project's jobs in a window",
  description:
    'Both bounds inclusive, at most 90 days. Chunked; rows by `created_at` then `id`; `Content-Disposition: attachment; filename="svc-jobs-<project_id>-<date>.<jsonl|csv>"`. One export per project per 60 s (429 with `Retry-After`). A dashboard session needs the role member: a viewer gets 403 `forbidden` and does not spend the cooldown.',
  tags: ['Jobs'],
  querystring: z.object({
    from: windowBoundText.describe('ISO 8601 date-time, start of the window (required)'),
    until: windowBoundText.describe('ISO 8601 date-time, end of the window (required)'),
    format: formatText.describe('`jsonl` (default) or `csv`'),
    include: z
      .enum(['result'])
      .optional()
      .describe('extension: `result` adds each job’s result (the last JSONL field, raw JSON or null; a last CSV column `Result`, JSON text)'),
    attest: boundedString(8)
      .optional()
      .describe(
        'extension: `true` adds to each line its job’s `job_created` and latest event in the Merkle log (`attestation`) and ends the export with a manifest line (a checkpoint and its proof; docs/audit.md). JSONL only; needs `admin`',
      ),
  }),
  response: {
    200: mediaResponse('The jobs, streamed', {
      'application/x-ndjson': 'one flat JSON object per line (format=jsonl)',
      'text/csv': 'RFC 4180 with a header row (format=csv)',
    }),
    ...errorResponses('forbidden', 'invalid_from', 'invalid_until', 'invalid_range', 'range_too_large', 'invalid_format', 'service_unavailable'),
  },
}

/** Where an `as_of` read stopped, and how far the log goes past it. */
const asOfPoint = z
  .strictObject({
    sequence: z
      .number()
      .int()
      .describe('the stream sequence the read stopped at: the last message of the job (or of its progress reports) through the moment'),
    latest_sequence: z
      .number()
      .int()
      .describe("the job's latest sequence now, as `X-Event-Seq` says it: the answer is behind by the messages between the two"),
    time: instant.optional().describe('the instant `as_of` named (UTC); absent when it named a cursor'),
  })
  .describe('extension: where the job was read to')

/** The job detail object as it was at a moment of its history, with where the read stopped. */
const jobAsOfDetail = jobDetail.extend({ as_of: asOfPoint }).meta({ id: 'JobAsOf' })

const readSchema = {
  summary: 'Read a job',
  description: [
    'The answer carries `X-Event-Seq`. A job of another project is `job_not_found` too.',
    "Extension: `as_of` (an RFC 3339 date-time, or an event's `cursor` from the event feed or the job's history) answers the job as it was then, folded from its events up to that moment (those whose time is at or before the instant; up to and including the event the cursor names), with `as_of` added. Before its creation: `job_not_found`; a moment whose history retention removed: 410 `history_expired`; a cursor this project was not given: `invalid_cursor`; other text: `invalid_request`. Without `as_of` the answer is the job detail object.",
  ].join('\n\n'),
  tags: ['Jobs'],
  params: jobIdParams,
  querystring: z.object({
    as_of: boundedString(200).optional().describe("extension: an RFC 3339 date-time or an event's cursor; the job as it was then"),
  }),
  response: {
    200: z.union([jobDetail, jobAsOfDetail]).describe('The job detail object; with `as_of`, as it was then and with `as_of` added'),
    ...errorResponses('job_not_found', 'invalid_request', 'invalid_cursor', 'history_expired'),
  },
}

const dependenciesSchema = {
  summary: "A job's parents, with their states and results, and its children",
  description:
    'Extension (issue 30). For a job created with `depends_on`: each parent, in the order given, with its state, the result of its successful attempt (null without one), its last error and whether the job still waits for it; a parent gone from the log (retention) has `state` null. Read from the log. A job without `depends_on` has no parents here (a continuation names its one parent as `parent_job_id`). `children` lists the jobs that depend on this one (through `depends_on` or `parent_job_id`) with their states.',
  tags: ['Jobs'],
  params: jobIdParams,
  response: {
    200: z.strictObject({
      job_id: z.string(),
      state: z.enum(jobStates),
      on_parent_failure: z.enum(parentFailureRules).nullable().describe('null for a job without `depends_on`'),
      waiting_for: z.number().int().describe('parents it still waits for'),
      parents: z.array(
        z.strictObject({
          job_id: z.string(),
          state: z.enum(jobStates).nullable(),
          result: z.unknown(),
          error: jobError.nullable(),
          waiting: z.boolean().describe('the job still waits for this parent'),
        }),
      ),
      children: z
        .array(z.strictObject({ job_id: z.string(), state: z.enum(jobStates).nullable().describe('null: gone from the log') }))
        .describe(`jobs created with this one in \`depends_on\` or as \`parent_job_id\`, in creation order; the first ${maxChildrenShown}`),
      children_total: z.number().int().describe('all its children, shown or not'),
    }),
    ...errorResponses('job_not_found'),
  },
}

/** A page of a job's history: a job can hold thousands of events (progress reports). */
const historyLimit = { fallback: 100, max: 500 }

const historySchema = {
  summary: "A job's events, oldest first",
  description: [
    `Paged: \`limit\` 1–${historyLimit.max} (default ${historyLimit.fallback}; outside: \`invalid_limit\`), \`cursor\` the \`next_cursor\` of the previous page.`,
    "Extension: `types` (comma-separated event types of a job's history; another value: `invalid_request`), `since` and `until` (RFC 3339, inclusive) keep some events, with the same paging. A filtered page looks at no more than 1,000 of the job's messages: it may then hold fewer events than `limit` and still say `has_more`.",
  ].join('\n\n'),
  tags: ['Jobs'],
  params: jobIdParams,
  querystring: z.object({
    limit: boundedString(20).optional(),
    cursor: boundedString(200).optional(),
    types: boundedString(1000)
      .optional()
      .describe(`extension: comma-separated event types, of ${historyEventTypes.map((t) => `\`${t}\``).join(', ')}`),
    since: boundedString(100).optional().describe('extension: RFC 3339; events at or after it'),
    until: boundedString(100).optional().describe('extension: RFC 3339; events at or before it'),
  }),
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
          cursor: z
            .string()
            .describe(
              "extension: the event's cursor in the event feed: `after` there, or `as_of` of `GET /jobs/{jobId}` for the job as of this event",
            ),
        }),
      ),
      has_more: z.boolean(),
      next_cursor: z.string().nullable().describe('pass back as `cursor` for the next page; null when has_more is false'),
    }),
    ...errorResponses('job_not_found', 'invalid_request', 'invalid_limit', 'invalid_cursor'),
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
    200: mediaResponse('The event stream', {
      'text/event-stream': '`event: snapshot` frames whose `data` is `{state, progress, attempt, max_attempts}`',
    }),
    ...errorResponses('job_not_found'),
  },
}

/**
 * Extension (issue 28): the spec's cancel takes no body, and one without `include_running` is
 * answered as the spec says. Documented only: the handler reads the opt-in itself, so a body the
 * spec's clients may send (none, or anything else) is never refused.
 */
const cancelBody = z
  .object({
    include_running: z
      .boolean()
      .optional()
      .describe(
        'extension: `true` also cancels a `processing` job: 202, its worker is told (`cancel` from the heartbeat and the signal poll) and it ends `cancelled` when the worker acknowledges or when `cancel_grace_ms` (30 s) has passed',
      ),
  })
  .describe("optional: without a body (or without `include_running`) the cancel is the spec's")

const includeRunningOptIn = z.object({ include_running: z.boolean() })

/** True when the body opts in to cancelling a running job; 400 when it names the option with a value that is not a boolean. */
function includesRunning(body: unknown): boolean {
  if (typeof body !== 'object' || body === null || !('include_running' in body)) return false
  const parsed = includeRunningOptIn.safeParse(body)
  if (!parsed.success) throw invalidRequest('body.include_running: expected a boolean')
  return parsed.data.include_running
}

const cancelSchema = {
  summary: 'Cancel a pending or scheduled job (or, opted in, a running one)',
  description:
    'Needs the project role member or above. Scheduled continuations are cancelled with it. Extension (issue 28): with the body `{"include_running": true}` a `processing` job is not refused but asked to stop: 202 `{id, state: "processing", cancel_requested: true}` (again 202 while it stops); its continuations are cancelled when it ends. Without it a processing job answers 409 `invalid_state`, as the spec says.',
  tags: ['Jobs'],
  params: jobIdParams,
  response: {
    200: z.strictObject({ id: z.string(), state: z.enum(jobStates).describe('`cancelled`') }),
    202: z
      .strictObject({ id: z.string(), state: z.literal('processing'), cancel_requested: z.literal(true) })
      .describe('extension: a running job asked to stop (`include_running`)'),
    ...errorResponses(...writeCodes, 'forbidden', 'job_not_found', 'invalid_state'),
  },
}

const retrySchema = {
  summary: 'Retry a failed or dead-lettered job',
  description: 'Needs the project role member or above.',
  tags: ['Jobs'],
  params: jobIdParams,
  response: {
    200: z.strictObject({ id: z.string(), state: z.enum(jobStates).describe('`pending`'), attempt: z.number().int() }),
    ...errorResponses(...writeCodes, 'forbidden', 'job_not_found', 'invalid_state', 'log_budget_exceeded'),
  },
}

const patchSchema = {
  summary: "Change a waiting job's priority",
  description:
    "Extension (issue 28): `priority` (-600 to 600) re-ranks a `pending` or `scheduled` job in its queue's claim order (due time minus priority); another state answers 409 `invalid_state`. Needs the project role member or above. The same priority again changes nothing. The answer is the job detail object, which shows `priority` from then on.",
  tags: ['Jobs'],
  params: jobIdParams,
  body: z.strictObject({ priority: priorityNumber }),
  response: {
    200: jobDetail.describe('The job, re-ranked'),
    ...errorResponses(...writeCodes, 'forbidden', 'job_not_found', 'invalid_state'),
  },
}

type CreatedItem = { status: 201; body: z.output<typeof createdJob>; idempotent_replay?: true }
type DeduplicatedItem = { status: 200; body: z.output<typeof deduplicatedJob> }
type BatchItem = CreatedItem | DeduplicatedItem | ItemFailure
type ReservedKey = Extract<ItemKey, { outcome: 'reserved' }>

/** A batch item that passed the single create's validation. */
interface ValidItem {
  index: number
  body: z.output<typeof batchItemBody>
}

/** Body-field keys of one batch reserved at once (each reservation is a read and a write of the KV bucket). */
const keyReservationsInFlight = 32

/** `body.jobs[3].tags.team: <message>`: the item's first failure, named as the single create names it. */
function describeItemIssue(error: z.ZodError, at: string): string {
  const issue = error.issues[0]!
  return `${[at, ...issue.path.map(String)].join('.')}: ${issue.message}`
}

/** Each item through the single create's schema and payload size check; a failure is the item's answer. */
function validateBatchItems(request: FastifyRequest, items: readonly unknown[], maxPayloadBytes: number, results: BatchItem[]): ValidItem[] {
  const bodyBytes = bodyBytesOf(request.headers)
  const valid: ValidItem[] = []
  items.forEach((raw, index) => {
    const at = `body.jobs[${index}]`
    const parsed = batchItemBody.safeParse(raw)
    if (!parsed.success) return void (results[index] = itemFailure(request, invalidRequest(describeItemIssue(parsed.error, at))))
    try {
      assertPayloadSize(parsed.data.payload, bodyBytes, maxPayloadBytes, `${at}.payload`)
    } catch (err) {
      return void (results[index] = itemFailure(request, err))
    }
    valid.push({ index, body: parsed.data })
  })
  return valid
}

/** What to do with a valid item once its body-field key, if any, is settled. */
type ItemPlan =
  | { kind: 'create'; held: ReservedKey | null }
  /** Answered already: replayed from the store, or its key refused. */
  | { kind: 'answered' }
  /** The same key and body as an earlier item of the batch: it answers what that one answered. */
  | { kind: 'repeat'; of: number }

/**
 * Settles the deprecated body-field keys as single creates would: each key is reserved once per
 * batch (by its first item) in the shared key space; a stored answer is replayed, a key used for
 * another body refused. A later item with the same key repeats the first one's answer, or is
 * refused when its body differs.
 */
async function settleItemKeys(
  ctx: Pick<ApiContext, 'idempotency'>,
  request: FastifyRequest,
  valid: readonly ValidItem[],
  results: BatchItem[],
): Promise<ItemPlan[]> {
  const plans: ItemPlan[] = valid.map(() => ({ kind: 'create', held: null }))
  const firsts = new Map<string, { at: number; fingerprint: string }>()
  valid.forEach(({ index, body }, at) => {
    const key = body.idempotency_key
    if (key === undefined || key === null) return
    const fingerprint = singleCreateFingerprint(body)
    const first = firsts.get(key)
    if (first === undefined) return void firsts.set(key, { at, fingerprint })
    if (first.fingerprint === fingerprint) return void (plans[at] = { kind: 'repeat', of: valid[first.at]!.index })
    results[index] = itemFailure(request, keyRefusal('mismatch'))
    plans[at] = { kind: 'answered' }
  })
  const owners = [...firsts.entries()]
  await runSerialPerKey(
    owners.map(() => null),
    keyReservationsInFlight,
    async (k) => {
      const [key, { at, fingerprint }] = owners[k]!
      const { index } = valid[at]!
      let held: ItemKey
      try {
        held = await reserveItemKey(ctx.idempotency, request.principal.projectId, key, fingerprint)
      } catch (err) {
        results[index] = itemFailure(request, err)
        return void (plans[at] = { kind: 'answered' })
      }
      if (held.outcome === 'reserved') return void (plans[at] = { kind: 'create', held })
      results[index] =
        held.outcome !== 'replay'
          ? itemFailure(request, held.error)
          : held.status === 200
            ? { status: 200, body: held.body as DeduplicatedItem['body'] }
            : { status: 201, body: held.body as CreatedItem['body'], idempotent_replay: true }
      plans[at] = { kind: 'answered' }
    },
  )
  return plans
}

/**
 * A batch of creates: every item validated as the single create validates it, body-field keys
 * settled, the rest created through the one creation use case (one allowance request for the
 * batch, appends pipelined), then the keyed items' answers stored. Whole-request refusals
 * (billing state, an outage before any job) are thrown, after freeing the keys reserved here.
 */
function traceparentOf(request: FastifyRequest): string | null {
  const value = request.headers.traceparent
  return typeof value === 'string' ? value : null
}

/** A duplicate's answer: the job holding the key as a single read shows it, and the sequence that read covers. */
async function toDeduplicated(ctx: Pick<ApiContext, 'jobs'>, job: Job): Promise<{ body: z.output<typeof deduplicatedJob>; seq: number }> {
  const read = await ctx.jobs.get(job.project_id, job.id)
  return { body: { ...toJobDetail(read.job), deduplicated: true }, seq: read.seq }
}

async function createBatch(
  ctx: Pick<ApiContext, 'deps' | 'jobs' | 'billing' | 'idempotency'>,
  request: FastifyRequest,
  reply: FastifyReply,
  items: readonly unknown[],
): Promise<{ results: BatchItem[]; lastSeq: number }> {
  const store = ctx.idempotency
  const results = new Array<BatchItem>(items.length)
  const valid = validateBatchItems(request, items, ctx.deps.config.tunables.max_payload_bytes, results)
  if (isGraphBatch(valid.map((v) => v.body))) return createGraphBatch(ctx, request, reply, valid, results)
  if (valid.some((v) => v.body.idempotency_key != null)) void reply.header('Deprecation', bodyKeyDeprecation)
  const plans = await settleItemKeys(ctx, request, valid, results)
  const toCreate = valid.flatMap((item, at) => {
    const plan = plans[at]!
    return plan.kind === 'create' ? [{ ...item, held: plan.held }] : []
  })
  const creation = await createJobs(
    ctx,
    request.principal.project,
    toCreate.map((c) => ({ request: c.body, traceparent: traceparentOf(request), actor: request.principal.actor })),
  ).catch(async (err: unknown) => {
    await Promise.all(toCreate.map((c) => c.held && releaseItemKey(store, c.held).catch(() => undefined)))
    throw err
  })
  if (creation.reading !== null) void reply.headers(quotaHeaders(creation.reading))
  let lastSeq = 0
  const storing = creation.results.map(async (result, k) => {
    const { index, held } = toCreate[k]!
    if (!result.ok) {
      results[index] = itemFailure(request, result.error)
      if (held !== null) await releaseItemKey(store, held).catch(() => undefined)
      return
    }
    if (result.deduplicated === true) {
      // The job is another request's: a body-field key replays created jobs only, so it is freed.
      if (held !== null) await releaseItemKey(store, held).catch(() => undefined)
      try {
        const { body, seq } = await toDeduplicated(ctx, result.job)
        results[index] = { status: 200, body }
        lastSeq = Math.max(lastSeq, seq)
      } catch (err) {
        results[index] = itemFailure(request, err)
      }
      return
    }
    const body = toCreatedJob(result.job)
    results[index] = { status: 201, body }
    lastSeq = Math.max(lastSeq, result.seq)
    // The item's job stands even if its answer could not be stored; a repeat would then run again.
    if (held !== null) {
      await completeItemKey(store, held, body, result.seq).catch((err) => {
        request.log.warn({ err, request_id: request.id }, "idempotency: a batch item's answer could not be stored")
      })
    }
  })
  await Promise.all(storing)
  valid.forEach(({ index }, at) => {
    const plan = plans[at]!
    if (plan.kind !== 'repeat') return
    const first = results[plan.of]!
    results[index] = first.status === 201 && 'body' in first ? { status: 201, body: first.body, idempotent_replay: true } : first
  })
  return { results, lastSeq }
}

/**
 * A batch whose items name each other by ref (issue 30): a graph, created whole or not at all
 * (createGraph). An invalid item, or a graph that is not one (domain/job-graph.ts), fails alone
 * and every other item answers 424 `graph_not_created` naming it. Body-field keys, `dedup` and
 * `debounce` (which may answer an existing job instead of creating one) are refused in a graph.
 */
async function createGraphBatch(
  ctx: Pick<ApiContext, 'deps' | 'jobs' | 'billing'>,
  request: FastifyRequest,
  reply: FastifyReply,
  valid: readonly ValidItem[],
  results: BatchItem[],
): Promise<{ results: BatchItem[]; lastSeq: number }> {
  for (const { index, body } of valid) {
    const misplaced = body.idempotency_key != null ? 'idempotency_key' : body.dedup != null ? 'dedup' : body.debounce != null ? 'debounce' : null
    if (misplaced !== null)
      results[index] = itemFailure(request, invalidRequest(`body.jobs[${index}].${misplaced}: not available in a graph batch (items using ref)`))
  }
  const planned = planGraph(valid.map((v) => v.body))
  if (!planned.ok)
    for (const [at, message] of planned.errors)
      results[valid[at]!.index] = itemFailure(request, invalidRequest(`body.jobs[${valid[at]!.index}].${message}`))
  const failed = results.findIndex((r) => r !== undefined)
  if (failed >= 0 || !planned.ok) {
    const code = (results[failed] as ItemFailure).error.code
    for (const { index } of valid) results[index] ??= itemFailure(request, new GraphNotCreated(failed, code))
    return { results, lastSeq: 0 }
  }
  const creation = await createGraph(
    ctx,
    request.principal.project,
    valid.map((v) => ({ request: v.body, traceparent: traceparentOf(request), actor: request.principal.actor })),
    planned.plan,
  )
  if (creation.reading !== null) void reply.headers(quotaHeaders(creation.reading))
  let lastSeq = 0
  creation.results.forEach((result, k) => {
    const { index } = valid[k]!
    if (!result.ok) return void (results[index] = itemFailure(request, result.error))
    results[index] = { status: 201, body: toCreatedJob(result.job) }
    lastSeq = Math.max(lastSeq, result.seq)
  })
  return { results, lastSeq }
}

export function jobRoutes(
  ctx: Pick<ApiContext, 'deps' | 'jobs' | 'billing' | 'accounts' | 'idempotency' | 'streams' | 'watcher' | 'logHead' | 'stopping' | 'audit'>,
): FastifyPluginAsync {
  const { deps, jobs } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    // Every job-creation answer carries the quota headers, replays and refusals included; the
    // handler sets them when it takes units, this fills them in for every other answer. A hook of
    // the two creation routes only: reads and the other writes do not pass through it.
    const fillQuotaHeaders: onSendHookHandler = (request, reply, payload, done) => {
      if (reply.hasHeader('X-Quota-Limit') || !request.principal || !deps.config.tunables.metering_enabled) return done(null, payload)
      const { project } = request.principal
      ctx.billing.allowance.read(project.id, ctx.billing.termsOf(project), deps.now()).then(
        (reading) => {
          void reply.headers(quotaHeaders(reading))
          done(null, payload)
        },
        () => done(null, payload),
      )
    }

    app.post('/', { schema: createSchema, config: { role: 'member' }, onSend: fillQuotaHeaders }, async (request, reply) => {
      const body = request.body
      assertPayloadSize(body.payload, bodyBytesOf(request.headers), deps.config.tunables.max_payload_bytes)
      const creation = await createJobs(ctx, request.principal.project, [
        { request: body, traceparent: traceparentOf(request), actor: request.principal.actor },
      ])
      if (creation.reading !== null) void reply.headers(quotaHeaders(creation.reading))
      const result = creation.results[0]!
      if (!result.ok) throw result.error
      if (result.deduplicated === true) {
        const { body, seq } = await toDeduplicated(ctx, result.job)
        return reply.code(200).header('Location', `/jobsvc/v1/jobs/${result.job.id}`).header('X-Event-Seq', String(seq)).send(body)
      }
      return reply
        .code(201)
        .header('Location', `/jobsvc/v1/jobs/${result.job.id}`)
        .header('X-Event-Seq', String(result.seq))
        .send(toCreatedJob(result.job))
    })

    app.post('/batch', { schema: batchSchema, config: batchConfig, onSend: fillQuotaHeaders }, async (request, reply) => {
      assertBatchSize(request.body.jobs)
      const answer = await createBatch(ctx, request, reply, request.body.jobs)
      if (answer.lastSeq > 0) void reply.header('X-Event-Seq', String(answer.lastSeq))
      const created = answer.results.filter((r) => r.status === 201).length
      const failed = answer.results.filter((r) => r.status >= 400).length
      return { created, failed, results: answer.results }
    })

    app.get('/', { schema: listSchema, config: { role: 'viewer' } }, async (request, reply) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = parseLimit(q.limit, 50, 1, 100)
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor)
      await awaitOwnWrites(ctx, projectId, q.min_seq)
      const { rows: page, hasMore } = await jobList.page(deps.sql, projectId, q, after, limit)
      const last = page.at(-1)
      return reply.send({
        data: page.map(toJobDetail),
        has_more: hasMore,
        next_cursor: hasMore && last ? encodeCursor({ created_at: last.created_at, id: last.id }) : null,
      })
    })

    app.get('/export', { schema: exportSchema, config: { role: 'member' } }, async (request, reply) => {
      const window = parseExportWindow(request.query)
      const projectId = request.principal.projectId
      const attest = wantsAttestation(request.query.attest, window)
      if (attest) assertAuditLogKept(ctx)
      if (attest && !hasRoleAtLeast(request.principal.role, 'admin'))
        throw new Forbidden('an attested export signs a checkpoint: it needs the project role admin or above')
      const verdict = await ctx.accounts.limits.takeCooldown('jobs-export', projectId, exportCooldownMs, deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'one jobs export per project per 60 seconds')
      await commandProject(deps, projectId, {
        type: 'record_jobs_export',
        data: { from: window.from.toISOString(), until: window.until.toISOString(), format: window.format },
        meta: { now: deps.now().toISOString(), actor: request.principal.actor },
      })
      // An attested export is evidence: it holds what this process wrote before it.
      if (attest) await awaitOwnWrites(ctx, projectId, undefined)
      return sendJobsExport(deps, reply, projectId, window, {
        withResult: request.query.include === 'result',
        attestation: attest ? new ExportAttestation(deps, ctx.audit, projectId) : undefined,
      })
    })

    app.get('/:jobId', { schema: readSchema, config: { role: 'viewer' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      if (request.query.as_of !== undefined) {
        const moment = toJobMoment(request.query.as_of, projectId)
        const read = await readJobAsOf(deps, projectId, request.params.jobId, moment)
        const point = { sequence: read.seq, latest_sequence: read.latestSeq, ...('time' in moment ? { time: moment.time } : {}) }
        return reply.header('X-Event-Seq', String(read.latestSeq)).send({ ...toJobDetail(read.job), as_of: point })
      }
      const { job, seq } = await jobs.get(projectId, request.params.jobId)
      return reply.header('X-Event-Seq', String(seq)).send(toJobDetail(job))
    })

    app.get('/:jobId/dependencies', { schema: dependenciesSchema, config: { role: 'viewer' } }, async (request) => {
      const { job, parents, children, childrenTotal } = await jobs.dependencies(request.principal.projectId, request.params.jobId)
      return {
        job_id: job.id,
        state: job.state,
        on_parent_failure: job.on_parent_failure ?? null,
        waiting_for: job.waiting_for?.length ?? 0,
        parents: parents.map((p) => ({ job_id: p.job_id, state: p.state, result: p.result ?? null, error: p.error, waiting: p.waiting })),
        children,
        children_total: childrenTotal,
      }
    })

    app.get('/:jobId/history', { schema: historySchema, config: { role: 'viewer' } }, async (request) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = parseLimit(q.limit, historyLimit.fallback, 1, historyLimit.max)
      const from = q.cursor === undefined ? null : decodeHistoryCursor(q.cursor)
      const page = await jobs.history(projectId, request.params.jobId, from, limit, toHistoryFilter(q))
      return {
        job_id: request.params.jobId,
        data: page.events.map(({ seq, event: e, position }) => ({
          sequence: seq,
          id: e.id,
          type: e.type,
          time: e.time,
          data: e.data as Record<string, unknown>,
          cursor: encodeFeedCursor(projectId, position),
        })),
        has_more: page.next !== null,
        next_cursor: page.next === null ? null : encodeHistoryCursor(page.next),
      }
    })

    app.get('/:jobId/events', { schema: eventsSchema, config: { role: 'viewer' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const release = ctx.streams.tryAcquire(projectId)
      if (release === null) {
        throw rateLimitExceeded(
          streamRetryAfterMs,
          `this project already has ${ctx.streams.max} progress streams open on this server; retry after Retry-After`,
        )
      }
      await streamJobProgress(deps, jobs, ctx.stopping, request, reply, projectId, request.params.jobId, release)
    })

    app.post('/:jobId/cancel', { schema: cancelSchema, config: { role: 'member', documentedBody: cancelBody } }, async (request, reply) => {
      const includeRunning = includesRunning(request.body)
      const { job, seq } = await jobs.cancel(request.principal.projectId, request.params.jobId, request.principal.actor, includeRunning)
      void reply.header('X-Event-Seq', String(seq))
      if (job.state === 'processing') return reply.code(202).send({ id: job.id, state: 'processing' as const, cancel_requested: true as const })
      return reply.send({ id: job.id, state: job.state })
    })

    app.patch('/:jobId', { schema: patchSchema, config: { role: 'member' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      const { seq } = await jobs.setPriority(projectId, request.params.jobId, request.body.priority, { actor: request.principal.actor })
      const { job } = await jobs.get(projectId, request.params.jobId)
      return reply.header('X-Event-Seq', String(seq)).send(toJobDetail(job))
    })

    app.post('/:jobId/retry', { schema: retrySchema, config: { role: 'member' } }, async (request, reply) => {
      const { job, seq } = await jobs.retry(request.principal.projectId, request.params.jobId, request.principal.actor)
      return reply.header('X-Event-Seq', String(seq)).send({ id: job.id, state: job.state, attempt: job.attempt })
    })
  }
}
