import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { ackStatuses } from '../../../../domain/job.ts'
import { retryBaseDelayMs, retryJitterMs } from '../../../../domain/retry-policy.ts'
import { claimForPoll, type CatchUp, type ClaimedJob } from '../../../use-cases/jobs/claimer.ts'
import { registerRecurringSchedules } from '../../../use-cases/jobs/recurring-service.ts'
import { describeWorkers, maxWorkersListed, workerGoneAfterMs } from '../../../use-cases/workers/worker-presence.ts'
import { WorkerNotFound } from '../../../../domain/errors.ts'
import type { ApiContext } from '../context.ts'
import { runSerialPerKey } from '../../../use-cases/jobs/serial-per-key.ts'
import { invalidRequest, itemFailure, rateLimitExceeded, serviceUnavailable } from '../errors.ts'
import { refundProjectRequest } from '../request-limit.ts'
import { errorResponses, instant, itemErrorObject, writeCodes } from '../openapi.ts'
import { anyText, boundedString, storableText } from '../text-fields.ts'
import { jobTypeText, queueNameText } from '../job-fields.ts'
import { toStorableText } from '../../../../projections/storable-values.ts'
import { jobResult } from '../payload-field.ts'
import { scheduleBody } from './recurring.ts'

/** Error texts are kept, not refused, when long: a failing worker should not also fail to report. */
const maxErrorMessage = 10_000
const maxStackTrace = 65_536

/**
 * What a poll refused for its project's number of polls is told to wait: the spec's re-check
 * interval, so a worker that comes back then has missed nothing a waiting poll would have seen.
 */
const pollRetryAfterMs = 2_000

/** Goes into a `text` column of the read model. */
const workerId = storableText(1, 200).meta({ examples: ['wrk_web-1_4711'] })

export const pollBody = z.object({
  worker_id: workerId,
  queues: z.array(queueNameText).min(1).max(50),
  capacity: z.number().int().min(1).max(50).default(1),
  job_types: z.array(jobTypeText).min(1).max(100).nullish(),
  /** Extension: how long to hold the poll when nothing is claimable (0 answers at once). */
  wait_seconds: z.number().min(0).max(30).optional(),
})

/**
 * Cut to its bound, then made storable (U+0000 and unpaired surrogates become U+FFFD, as a cut
 * through a surrogate pair would leave one): refusing a failure report would strand its job, and
 * a text the read models cannot hold would read back otherwise than the log has it.
 */
const errorText = (max: number) => (s: string) => toStorableText(s.slice(0, max))

const errorDetail = z.object({
  type: boundedString(500).default('Error').transform(toStorableText),
  message: anyText().default('').transform(errorText(maxErrorMessage)),
  stack_trace: anyText().default('').transform(errorText(maxStackTrace)),
})

/** Any job id is looked up; one this service could not have issued is simply not found. */
const jobId = boundedString(2048, 1).meta({ examples: ['job_01j9z3k8q4x7v2m5n6p8r0s1t2'] })

/** The longest a `rate_limited` ack may hold its job and key back: a day. */
export const maxRetryAfterMs = 86_400_000

export const ackBody = z
  .object({
    job_id: jobId,
    worker_id: workerId,
    status: z
      .enum([...ackStatuses, 'rate_limited'])
      .describe(
        '`succeeded` or `failed`; extension (issue 29): `rate_limited`, with `retry_after_ms`: the job goes back to pending without spending an attempt, and its key (or queue) is held back until then',
      ),
    duration_ms: z.number().int().min(0).nullish(),
    error: errorDetail.nullish(),
    /** Extension: what the handler returned (issue 26). */
    result: jobResult.optional(),
    retry_after_ms: z
      .number()
      .int()
      .min(1)
      .max(maxRetryAfterMs)
      .optional()
      .describe(
        `extension (issue 29): with \`status: "rate_limited"\` (and only then): how long to hold the job and its key back, 1–${maxRetryAfterMs} ms`,
      ),
  })
  .superRefine((ack, ctx) => {
    if ((ack.status === 'rate_limited') !== (ack.retry_after_ms !== undefined)) {
      ctx.addIssue({ code: 'custom', path: ['retry_after_ms'], message: 'retry_after_ms is required with status "rate_limited", and only with it' })
    }
  })

/** What an ack answers, alone or as an item of a batch. */
const ackOutcome = z.strictObject({
  action: z.enum(['done', 'retry']).describe('`done` (completed or dead-lettered) or `retry`'),
  retry_at: instant.optional().describe('only when action is retry'),
  children_activated: z.number().int().optional().describe('continuations activated by this success; omitted when the job has none'),
})

export const heartbeatBody = z.object({
  job_id: jobId,
  worker_id: workerId,
  /** Extension: the job's progress, 0.0 to 1.0; a change is recorded as an event. */
  progress: z.number().min(0).max(1).nullish(),
})

/** Extension (issue 28): a worker hands a running job back, without spending its attempt. */
export const releaseBody = z.object({
  job_id: jobId,
  worker_id: workerId,
  delay_seconds: z
    .number()
    .int()
    .min(0)
    .max(86_400)
    .optional()
    .describe('the job waits this long (`scheduled`) before it can be claimed again; 0 or absent: `pending` at once'),
})

/** How long a signal poll waits by default: under the spec's 30 s, so that a proxy's idle limit fits. */
const defaultSignalWaitMs = 25_000

/**
 * Takes one of the project's poll slots for a long poll (429 with Retry-After past
 * `max_polls_per_project`) and gives the signal that ends its wait on a disconnect or on shutdown.
 * The request's own `close` fires as soon as its body has been read (Node >= 16), which ended
 * every long poll at once; the response closes before it ends only on a disconnect. `end()`, in
 * the poll's `finally` whichever way it ends, removes the shutdown listener (one left per poll
 * would pile up on the process-wide signal) and frees the slot.
 */
function holdLongPoll(
  ctx: Pick<ApiContext, 'polls' | 'stopping'>,
  projectId: string,
  reply: Pick<FastifyReply, 'raw'>,
): { gone: AbortSignal; end(): void } {
  const release = ctx.polls.tryAcquire(projectId)
  if (release === null) {
    throw rateLimitExceeded(
      pollRetryAfterMs,
      `this project already has ${ctx.polls.max} polls in flight on this server; poll again after Retry-After`,
    )
  }
  const gone = new AbortController()
  const abort = () => gone.abort()
  reply.raw.once('close', () => {
    if (!reply.raw.writableEnded) abort()
  })
  ctx.stopping.addEventListener('abort', abort, { once: true })
  return {
    gone: gone.signal,
    end: () => {
      ctx.stopping.removeEventListener('abort', abort)
      release()
    },
  }
}

/** Jobs one signal poll may watch: a worker's capacity is at most 50 per poll. */
const maxSignalJobs = 100

/** Extension (issue 28): a worker waits to hear that jobs it runs must stop. */
export const signalsBody = z.object({
  worker_id: workerId,
  job_ids: z.array(jobId).min(1).max(maxSignalJobs).describe('the jobs the worker is running'),
  wait_seconds: z.number().min(0).max(30).optional().describe('how long to hold the request when no job has to stop (default 25, at most 30)'),
})

/** A registered schedule has the recurring route's fields, but no payload (spec, Worker registration). */
const recurringSchedule = scheduleBody.omit({ payload: true })

export const registerBody = z.object({
  worker_id: workerId,
  queues: z.array(queueNameText).max(50),
  job_types: z.array(jobTypeText).max(100),
  hostname: boundedString(255).nullish(),
  sdk_version: boundedString(100).nullish(),
  // Items are checked one by one in the handler: a bad schedule is logged, not a 400 (spec).
  recurring_schedules: z.array(z.unknown()).max(100).nullish(),
})

const pollSchema = {
  summary: 'Claim jobs (long poll)',
  description:
    'Claims up to `capacity` pending jobs of the given queues (and job types) for this worker, atomically across workers. With nothing to claim the request is held up to `wait_seconds` (at most 30) and answers `{jobs: []}` at the deadline; such a poll, which waited its full time for nothing, does not count against the hourly request limit (`X-RateLimit-Remaining` says so). A project has at most `max_polls_per_project` polls in flight per API process (default 500); one more answers 429 `rate_limit_exceeded` with `Retry-After`. A poll sent again with the `Idempotency-Key` of one still waiting answers 409 `idempotency_key_reuse` at once.',
  tags: ['Workers'],
  body: pollBody,
  response: {
    200: z.strictObject({
      jobs: z.array(
        z.strictObject({
          id: z.string(),
          job_type: z.string(),
          payload: z.record(z.string(), z.unknown()),
          attempt: z.number().int().describe('1-based'),
          max_attempts: z.number().int(),
          timeout_seconds: z.number().int(),
          enqueued_at: instant,
          traceparent: z
            .string()
            .nullable()
            .describe("the W3C `traceparent` the job was created with (null without one): continue the creator's trace from it"),
          parent_results: z
            .record(z.string(), z.unknown())
            .optional()
            .describe(
              'extension (issue 30): only for a job created with `depends_on`: the result of each parent that succeeded (null when its handler returned none), by parent id; each at most 64 KiB',
            ),
        }),
      ),
    }),
    ...errorResponses(...writeCodes, 'service_unavailable'),
  },
}

const ackSchema = {
  summary: 'Report the outcome of an attempt',
  description: `A failure is retried under the retry policy of the job's queue (see \`GET /jobsvc/v1/retry-policy\`; by default \`${retryBaseDelayMs / 1000} × 2^(attempt−1)\` s plus 0–${retryJitterMs / 1000} s of jitter), or dead-lettered on the last attempt. The answer carries \`X-Event-Seq\`.`,
  tags: ['Workers'],
  body: ackBody,
  response: {
    200: ackOutcome,
    ...errorResponses(...writeCodes, 'job_not_found', 'worker_mismatch', 'invalid_state'),
  },
}

/** Acks one batch may carry (README, "Security and limits"). */
export const maxBatchAcks = 1000

/**
 * Acks of one batch in flight at once: enough to keep the publisher's pipeline full, few enough
 * that a batch of 1,000 does not queue its whole burst ahead of every other request.
 */
const acksInFlight = 64

const batchAckItem = z.union([
  z.strictObject({ job_id: z.string(), status: z.literal(200), body: ackOutcome }),
  z.strictObject({
    job_id: z.string().nullable().describe("the item's `job_id`; null when it had none that could be read"),
    status: z.number().int().describe('the status a single ack of this item would have answered'),
    error: itemErrorObject('invalid_request', 'job_not_found', 'worker_mismatch', 'invalid_state', 'service_unavailable', 'internal_error'),
  }),
])

const ackBatchSchema = {
  summary: 'Report the outcomes of up to 1,000 attempts',
  description: `\`acks\` holds 1 to ${maxBatchAcks.toLocaleString('en-US')} bodies of \`POST /jobsvc/v1/workers/ack\`, each validated and applied exactly as a single ack; \`results\` answers them in the same order, each with its \`job_id\`, the status a single ack would have had, and its body or its error object. The request answers 200 when the batch was processed, whatever its items' outcomes; \`X-Event-Seq\` is the highest of its acks. Acks of one job in a batch are applied in order. The whole request is refused (the error envelope) only when its body is not \`{acks: [1 to 1,000 items]}\`, by the hourly request limit (the batch counts one request per ack, all or none; a replay counts one) and by the \`Idempotency-Key\` rules (a key covers the whole batch).`,
  tags: ['Workers'],
  body: z.object({ acks: z.array(z.unknown()).min(1).max(maxBatchAcks) }),
  response: {
    200: z.strictObject({
      acked: z.number().int().describe('items answered 200'),
      failed: z.number().int().describe('items answered with an error'),
      results: z.array(batchAckItem).describe('one per item of `acks`, in its order'),
    }),
    ...errorResponses(...writeCodes),
  },
}

/** Documented only: the route validates each ack itself, so one bad ack fails alone. */
const documentedAckBatchBody = z.object({ acks: z.array(ackBody).min(1).max(maxBatchAcks) })

const ackBatchConfig = {
  role: 'member',
  documentedBody: documentedAckBatchBody,
  requestWeight: (body: unknown) => (body as { acks: unknown[] }).acks.length,
} as const

type BatchAckItem = z.output<typeof batchAckItem>

/** The ack's job id as sent, when it is one this service could look up; null otherwise. */
function jobIdOf(raw: unknown): string | null {
  const id = (raw as { job_id?: unknown } | null)?.job_id
  return typeof id === 'string' && jobId.safeParse(id).success ? id : null
}

const heartbeatSchema = {
  summary: 'Keep a claimed job alive (and report progress)',
  description:
    "Send one every `max(timeout_seconds / 3, 10 s)`. A changed `progress` is recorded as a `job_progressed` event on the job's progress subject; past the project's log budget that report is refused (429 `log_budget_exceeded`), the heartbeat's liveness still recorded.",
  tags: ['Workers'],
  body: heartbeatBody,
  response: {
    200: z.strictObject({
      status: z
        .enum(['ok', 'cancel'])
        .describe(
          '`ok`: continue; `cancel` (only after a cancel with `include_running`, an extension): stop the job and ack it as `failed`; it then ends `cancelled`, never retried',
        ),
    }),
    ...errorResponses(...writeCodes, 'job_not_found', 'invalid_state', 'worker_mismatch', 'log_budget_exceeded'),
  },
}

const releaseSchema = {
  summary: 'Hand a running job back',
  description:
    'An extension (issue 28). The job held by this worker is `pending` again (or `scheduled` for `delay_seconds`), and the attempt is not spent: the next claim gets the same attempt number, within the same `max_attempts`. An ack or heartbeat of the released attempt afterwards answers 409. A job whose cancel was asked for (`include_running`) ends `cancelled` instead. The answer carries `X-Event-Seq`.',
  tags: ['Workers'],
  body: releaseBody,
  response: {
    200: z.strictObject({
      id: z.string(),
      state: z.enum(['pending', 'scheduled', 'cancelled']),
      attempt: z.number().int().describe('attempts spent: the next claim is attempt + 1'),
      run_at: instant.nullable().describe('when it can be claimed again; null: now'),
    }),
    ...errorResponses(...writeCodes, 'job_not_found', 'worker_mismatch', 'invalid_state'),
  },
}

const signalsSchema = {
  summary: 'Wait for the jobs a worker must stop (long poll)',
  description: `An extension (issue 28). Answers as soon as one of \`job_ids\` must stop, or after \`wait_seconds\` with \`{cancel: []}\`: \`cancel\` lists the jobs of the list this worker runs whose cancel was asked for (\`POST /jobsvc/v1/jobs/{jobId}/cancel\` with \`include_running\`) and those already cancelled. Every API process follows the log, so a cancel asked of any process reaches the poll within milliseconds; the SDKs keep one such poll open while they run jobs (at most ${maxSignalJobs} ids). Ids of no job of the project are ignored. A poll that waited its full time for nothing does not count against the hourly request limit, and it takes one of the project's \`max_polls_per_project\` slots while it waits.`,
  tags: ['Workers'],
  body: signalsBody,
  response: {
    200: z.strictObject({ cancel: z.array(z.string()).describe('jobs to stop now; ack each as `failed`') }),
    ...errorResponses(...writeCodes),
  },
}

const registerSchema = {
  summary: 'Announce a worker and upsert its recurring schedules',
  description:
    'Each schedule is upserted as `rjob_<slug of job_type>`; one that cannot be saved (a bad cron expression, say) is logged, and the answer is still `registered`.',
  tags: ['Workers'],
  body: registerBody,
  response: { 200: z.strictObject({ status: z.literal('registered') }), ...errorResponses(...writeCodes) },
}

/** A worker as `GET /jobsvc/v1/workers` shows it (services/use-cases/workers/worker-presence.ts). */
const workerSchema = z
  .strictObject({
    worker_id: z.string(),
    hostname: z.string().nullable().describe('as the worker registered it'),
    sdk_version: z.string().nullable(),
    queues: z.array(z.string()).describe('the queues of its last poll (or registration)'),
    job_types: z.array(z.string()).describe('the job types it registered or last polled for; empty: any'),
    registered_at: instant.nullable(),
    last_poll_at: instant.nullable(),
    last_seen_at: instant.describe('its last registration, poll, heartbeat or ack'),
    status: z.enum(['active', 'gone']).describe(`\`gone\`: silent for over ${workerGoneAfterMs / 1000} s`),
    running: z
      .array(
        z.strictObject({
          job_id: z.string(),
          job_type: z.string(),
          queue: z.string(),
          attempt: z.number().int(),
          started_at: instant,
          timeout_seconds: z.number().int(),
          last_heartbeat_at: instant.nullable().describe("null: no heartbeat since this attempt's claim"),
        }),
      )
      .describe('the jobs it is processing now'),
    finished_last_hour: z.strictObject({ succeeded: z.number().int(), failed: z.number().int() }).describe('its acks in the last hour'),
  })
  .meta({ id: 'Worker' })

const listWorkersSchema = {
  summary: 'List the workers seen in the last hour',
  description: `An extension (issue 26). Every worker that registered, polled, heartbeated or acked in the last hour, most recently seen first (at most ${maxWorkersListed}), with the jobs it is running and its acks of the last hour. What the API processes saw is written every second, so a worker shows up within about a second; one silent for ${workerGoneAfterMs / 1000} s is \`gone\`.`,
  tags: ['Workers'],
  response: { 200: z.strictObject({ data: z.array(workerSchema) }), ...errorResponses('forbidden') },
}

const getWorkerSchema = {
  summary: 'One worker seen in the last hour',
  description: 'As an item of the list; 404 `worker_not_found` for a worker not seen in the last hour.',
  tags: ['Workers'],
  params: z.object({ workerId }),
  response: { 200: workerSchema, ...errorResponses('forbidden', 'worker_not_found') },
}

function toPolledJob({ job, payload }: ClaimedJob, parentResults?: Record<string, unknown>) {
  return {
    id: job.id,
    job_type: job.job_type,
    payload,
    attempt: job.attempt,
    max_attempts: job.max_attempts,
    timeout_seconds: job.timeout_seconds,
    enqueued_at: job.created_at,
    traceparent: job.traceparent,
    ...(parentResults === undefined ? {} : { parent_results: parentResults }),
  }
}

export function workerRoutes(
  ctx: Pick<ApiContext, 'deps' | 'jobs' | 'ready' | 'claims' | 'watcher' | 'polls' | 'stopping' | 'requestRate' | 'presence' | 'pauses' | 'flow'>,
): FastifyPluginAsync {
  const { deps, jobs } = ctx
  const catchUp: CatchUp = { projection: ctx.watcher, maxWaitMs: deps.config.tunables.read_your_writes_wait_ms }
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    /**
     * Claims at once when it can; otherwise waits until the ready index wakes it (as soon as a job
     * of its queues becomes claimable), re-checking every tick as a safety net. Claims come from
     * the index; only a queue the index cannot vouch for, and the tick's re-check, ask the read
     * model, taking their turn in the process's claim line (services/use-cases/jobs/claim-line.ts), which
     * bounds the Postgres connections one project's polls hold.
     */
    app.post('/poll', { schema: pollSchema, config: { role: 'member', longPoll: true } }, async (request, reply) => {
      const b = request.body
      const held = holdLongPoll(ctx, request.principal.projectId, reply)
      const claim = {
        projectId: request.principal.projectId,
        workerId: b.worker_id,
        queues: [...new Set(b.queues)],
        jobTypes: b.job_types ? [...new Set(b.job_types)] : null,
        capacity: b.capacity,
      }
      ctx.presence.polled(claim.projectId, claim.workerId, claim.queues, claim.jobTypes, deps.now())
      const t = deps.config.tunables
      const waitMs = Math.min(b.wait_seconds === undefined ? t.poll_max_wait_ms : b.wait_seconds * 1000, t.poll_max_wait_ms)
      const deadline = Date.now() + waitMs
      // A poll that asked to wait and waited its full time for nothing costs nothing.
      const waited = waitMs > 0
      const gone = held.gone
      try {
        return await pollUntilClaimedOrDeadline()
      } finally {
        held.end()
      }

      /**
       * A graph job is handed its parents' results (issue 30). Their claims stand whatever
       * happens here: a failure to read them is this poll's, and the reaper retries the attempt,
       * as for a payload that could not be read.
       */
      async function withParentResults(c: ClaimedJob) {
        if (c.job.depends_on === undefined) return toPolledJob(c)
        return toPolledJob(c, await jobs.parentResults(claim.projectId, c.job))
      }

      async function pollUntilClaimedOrDeadline() {
        const restarting = () => serviceUnavailable('the service is restarting; poll again with backoff')
        // Open before the first claim, so that a job that becomes claimable between a claim and
        // the wait that follows it still wakes this poll.
        const session = ctx.ready.open(claim.projectId, claim.queues, claim.jobTypes, claim.capacity)
        try {
          let recheck = false
          for (;;) {
            if (ctx.stopping.aborted) throw restarting()
            // Read on every round: a pause or resume through any process applies to a waiting poll.
            const pauses = ctx.pauses.of(claim.projectId, claim.queues, request.principal.project)
            const claimed = await claimForPoll(jobs, ctx.claims, session, claim, gone, recheck, catchUp, deadline, pauses.paused, ctx.flow)
            // A claim still waiting for its turn when shutdown began was withdrawn, not run.
            if (claimed.length === 0 && ctx.stopping.aborted) throw restarting()
            const remaining = deadline - Date.now()
            if (claimed.length > 0 || gone.aborted) return { jobs: await Promise.all(claimed.map(withParentResults)) }
            if (remaining <= 0) {
              if (waited) refundProjectRequest(ctx, request, reply)
              return { jobs: [] }
            }
            // A pause that ends by itself wakes the poll when it ends (a resume wakes it through the index).
            const pauseEndsIn = pauses.endsAt === null ? Infinity : Math.max(1, pauses.endsAt - deps.now().getTime())
            recheck = (await session.wait(Math.min(remaining, t.poll_tick_ms, pauseEndsIn), gone)) === 'timeout'
          }
        } finally {
          session.close()
        }
      }
    })

    /** One ack, alone or of a batch: a `rate_limited` one hands the attempt back and holds its gate (issue 29). */
    async function applyAck(request: FastifyRequest, ack: z.output<typeof ackBody>) {
      const projectId = request.principal.projectId
      if (ack.status === 'rate_limited') {
        const answer = await jobs.rateLimited(projectId, ack.job_id, ack.worker_id, ack.retry_after_ms!, (queue) =>
          ctx.flow.limitsOf(projectId, queue),
        )
        ctx.presence.beat(projectId, ack.worker_id, deps.now())
        return answer
      }
      const answer = await jobs.ack(
        projectId,
        ack.job_id,
        { worker_id: ack.worker_id, status: ack.status, duration_ms: ack.duration_ms ?? null, error: ack.error ?? null, result: ack.result ?? null },
        request.principal.project.retry_policies,
      )
      ctx.presence.acked(projectId, ack.worker_id, ack.status, deps.now())
      return answer
    }

    app.post('/ack', { schema: ackSchema, config: { role: 'member' } }, async (request, reply) => {
      const { outcome, seq } = await applyAck(request, request.body)
      return reply.header('X-Event-Seq', String(seq)).send(outcome)
    })

    /**
     * Each ack validated and applied as the single ack is; acks are pipelined, those of one job
     * applied one after another so that their outcomes do not depend on a race.
     */
    app.post('/ack/batch', { schema: ackBatchSchema, config: ackBatchConfig }, async (request, reply) => {
      const items = request.body.acks
      const results = new Array<BatchAckItem>(items.length)
      const valid: Array<{ index: number; ack: z.output<typeof ackBody> }> = []
      items.forEach((raw, index) => {
        const parsed = ackBody.safeParse(raw)
        if (parsed.success) return void valid.push({ index, ack: parsed.data })
        const issue = parsed.error.issues[0]!
        const failure = itemFailure(request, invalidRequest(`${[`body.acks[${index}]`, ...issue.path.map(String)].join('.')}: ${issue.message}`))
        results[index] = { job_id: jobIdOf(raw), ...failure }
      })
      let lastSeq = 0
      await runSerialPerKey(
        valid.map((v) => v.ack.job_id),
        acksInFlight,
        async (k) => {
          const { index, ack } = valid[k]!
          try {
            const { outcome, seq } = await applyAck(request, ack)
            lastSeq = Math.max(lastSeq, seq)
            results[index] = { job_id: ack.job_id, status: 200, body: outcome }
          } catch (err) {
            results[index] = { job_id: ack.job_id, ...itemFailure(request, err) }
          }
        },
      )
      if (lastSeq > 0) void reply.header('X-Event-Seq', String(lastSeq))
      const acked = results.filter((r) => r.status === 200).length
      return { acked, failed: results.length - acked, results }
    })

    app.post('/heartbeat', { schema: heartbeatSchema, config: { role: 'member' } }, async (request) => {
      const b = request.body
      const status = await jobs.heartbeat(request.principal.projectId, b.job_id, b.worker_id, b.progress ?? null)
      ctx.presence.beat(request.principal.projectId, b.worker_id, deps.now())
      return { status }
    })

    app.post('/release', { schema: releaseSchema, config: { role: 'member' } }, async (request, reply) => {
      const b = request.body
      const delayMs = (b.delay_seconds ?? 0) * 1000
      const runAt = delayMs > 0 ? new Date(deps.now().getTime() + delayMs).toISOString() : null
      const { job, seq } = await jobs.release(request.principal.projectId, b.job_id, b.worker_id, runAt)
      ctx.presence.beat(request.principal.projectId, b.worker_id, deps.now())
      const state = job.state as 'pending' | 'scheduled' | 'cancelled'
      return reply
        .header('X-Event-Seq', String(seq))
        .send({ id: job.id, state, attempt: job.attempt, run_at: state === 'cancelled' ? null : job.run_at })
    })

    /**
     * Watches the jobs before it reads their states, so a cancel appended between the read and the
     * wait still wakes it; re-reads them every tick as a safety net (the follower may stall).
     */
    app.post('/signals', { schema: signalsSchema, config: { role: 'member', longPoll: true } }, async (request, reply) => {
      const b = request.body
      const projectId = request.principal.projectId
      const held = holdLongPoll(ctx, projectId, reply)
      const gone = held.gone
      const t = deps.config.tunables
      const ids = [...new Set(b.job_ids)]
      const waitMs = Math.min(b.wait_seconds === undefined ? defaultSignalWaitMs : b.wait_seconds * 1000, t.poll_max_wait_ms)
      const deadline = Date.now() + waitMs
      let signalled: () => void = () => undefined
      const unwatch = ctx.ready.watchSignals(ids, () => signalled())
      ctx.presence.beat(projectId, b.worker_id, deps.now())
      try {
        for (;;) {
          const woken = new Promise<void>((resolve) => (signalled = resolve))
          const cancel = await jobs.cancelSignals(projectId, b.worker_id, ids)
          const remaining = deadline - Date.now()
          if (cancel.length > 0 || gone.aborted) return { cancel }
          if (remaining <= 0) {
            if (waitMs > 0) refundProjectRequest(ctx, request, reply)
            return { cancel }
          }
          await new Promise<void>((resolve) => {
            const done = () => {
              clearTimeout(timer)
              gone.removeEventListener('abort', done)
              resolve()
            }
            const timer = setTimeout(done, Math.min(remaining, t.poll_tick_ms))
            gone.addEventListener('abort', done, { once: true })
            void woken.then(done)
          })
        }
      } finally {
        unwatch()
        held.end()
      }
    })

    app.post('/register', { schema: registerSchema, config: { role: 'member' } }, async (request) => {
      const b = request.body
      const project = { id: request.principal.projectId, plan: request.principal.project.plan }
      ctx.presence.registered(
        project.id,
        b.worker_id,
        { hostname: b.hostname ?? null, sdkVersion: b.sdk_version ?? null, queues: [...new Set(b.queues)], jobTypes: [...new Set(b.job_types)] },
        deps.now(),
      )
      const results = await registerRecurringSchedules(deps, project, b.recurring_schedules ?? [], recurringSchedule, request.principal.actor)
      for (const r of results) {
        if (!r.ok)
          request.log.warn({ request_id: request.id, worker_id: b.worker_id, schedule: r.input, reason: r.reason }, 'register: schedule not saved')
      }
      return { status: 'registered' as const }
    })

    app.get('/', { schema: listWorkersSchema, config: { role: 'viewer' } }, async (request) => {
      return { data: await describeWorkers(deps, ctx.presence, jobs, request.principal.projectId) }
    })

    app.get('/:workerId', { schema: getWorkerSchema, config: { role: 'viewer' } }, async (request) => {
      const [worker] = await describeWorkers(deps, ctx.presence, jobs, request.principal.projectId, request.params.workerId)
      if (worker === undefined) throw new WorkerNotFound(`no worker ${request.params.workerId} was seen in the last hour`)
      return worker
    })
  }
}
