import {
  AuditVerificationError,
  fail,
  toLeafObject,
  verifyCheckpoint,
  verifyInclusion,
  type AuditFailureCode,
  type AuditKey,
  type AuditKeys,
  type Checkpoint,
  type InclusionProof,
} from './audit.js'
import { sleep } from './backoff.js'
import { JobsvcError } from './errors.js'
import { EventConsumersApi } from './event-consumers.js'
import { fetchEventsPage, followEvents, type EventFeedOptions, type EventsPage } from './event-feed.js'
import { ExportDownload, snapshotsOf } from './streams.js'
import { Transport, type Call, type ClientOptions, type QueryValues, type RequestOptions } from './transport.js'
import type {
  AckRequest,
  AckResult,
  ActivityPage,
  ActivityQuery,
  Alert,
  AuditCheckpoint,
  AuditCheckpointPage,
  AuditCheckpointQuery,
  AuditConsistencyProof,
  AuditInclusionProof,
  AuditKeysDocument,
  AlertRequest,
  BatchAckResult,
  BatchCreateRequest,
  BatchCreateResult,
  CancelResult,
  CreatedJob,
  DeduplicatedJob,
  CreatedWebhook,
  CreateJobRequest,
  CreateWebhookRequest,
  DeliveryList,
  DeliveryListQuery,
  ProjectRetryPolicy,
  QueueRetryPolicy,
  RetryPolicyRequest,
  PauseQueueRequest,
  QueueLimits,
  QueueLimitsRequest,
  QueueLimitsState,
  QueueList,
  QueueState,
  QueueSettings,
  QueueSettingsRequest,
  ExportQuery,
  FeedEvent,
  HeartbeatRequest,
  HeartbeatResult,
  Job,
  JobAsOf,
  JobDependencies,
  JobHistory,
  JobHistoryFilter,
  JobList,
  JobListQuery,
  JobSnapshot,
  BulkCount,
  BulkRequest,
  BulkStarted,
  Operation,
  OperationList,
  OperationListQuery,
  Page,
  PollRequest,
  Query,
  RecurringSchedule,
  RegisterRequest,
  ReplayCount,
  ReplayMode,
  ReplayStarted,
  ResponseBody,
  RotatedSecret,
  UpdateWebhookRequest,
  UpsertRecurringRequest,
  Webhook,
  WebhookDelivery,
  WebhookEventType,
  ReleaseRequest,
  ReleaseResult,
  SignalsRequest,
  SignalsResult,
} from './types.js'

const v1 = '/jobsvc/v1'
const instant = (value: string | Date | undefined) => (value instanceof Date ? value.toISOString() : value)
const terminal = new Set(['succeeded', 'failed', 'cancelled', 'dead_letter'])
const id = (value: string) => encodeURIComponent(value)

/** Every page of a cursor-paginated list, item by item, following `next_cursor`. */
async function* everyItem<T, Q extends { cursor?: string }>(fetchPage: (query: Q) => Promise<Page<T>>, query: Q): AsyncGenerator<T> {
  let cursor = query.cursor
  for (;;) {
    const page = await fetchPage({ ...query, cursor })
    yield* page.data
    if (!page.has_more || !page.next_cursor) return
    cursor = page.next_cursor
  }
}

/**
 * A typed client of every `/jobsvc/v1` route an API key may call. Each method resolves to the
 * answer's body, typed from the service's OpenAPI document, or throws a {@link JobsvcError}.
 */
export class JobsvcClient {
  readonly #http: Transport
  readonly jobs: JobsApi
  readonly workers: WorkersApi
  readonly webhooks: WebhooksApi
  readonly recurring: RecurringApi
  readonly alerts: AlertsApi
  readonly retryPolicy: RetryPolicyApi
  readonly queues: QueuesApi
  readonly activity: ActivityApi
  readonly metrics: MetricsApi
  readonly auditLog: AuditLogApi
  readonly audit: AuditApi
  readonly eventConsumers: EventConsumersApi
  readonly operations: OperationsApi

  constructor(options: ClientOptions) {
    this.#http = new Transport(options)
    const call = <T>(c: Call) => this.#http.json<T>(c)
    const send = (c: Call) => this.#http.send(c)
    this.jobs = new JobsApi(call, send)
    this.workers = new WorkersApi(call)
    this.webhooks = new WebhooksApi(call)
    this.recurring = new RecurringApi(call)
    this.alerts = new AlertsApi(call)
    this.retryPolicy = new RetryPolicyApi(call)
    this.queues = new QueuesApi(call)
    this.activity = new ActivityApi(call)
    this.metrics = new MetricsApi(call)
    this.auditLog = new AuditLogApi(send)
    this.audit = new AuditApi(call)
    this.eventConsumers = new EventConsumersApi(this.#http)
    this.operations = new OperationsApi(call)
  }

  /**
   * The project's events, oldest first, followed live: everything from `after` (or `fromTime`, or
   * the oldest event the log holds), then each event as it is appended, through long polls. The
   * iteration ends only at `break`, the signal's abort (without an error) or an error it cannot
   * wait out: no answer, 5xx and 429 are retried with back-off for as long as they last;
   * {@link CursorExpiredError} says that retention removed events after `after`. Nothing is
   * stored: to resume after a restart, keep the `cursor` of the last event handled.
   */
  events(options: EventFeedOptions = {}): AsyncGenerator<FeedEvent> {
    return followEvents(this.#http, options)
  }

  /** One page of the project's events (`GET /events`); pass its `nextCursor` as `after` for the next. */
  eventsPage(options: EventFeedOptions = {}): Promise<EventsPage> {
    return fetchEventsPage(this.#http, options, 'safe')
  }
}

type CallJson = <T>(call: Call) => Promise<T>
type CallRaw = (call: Call) => Promise<Response>

export class JobsApi {
  constructor(
    private readonly call: CallJson,
    private readonly send: CallRaw,
  ) {}

  /**
   * `POST /jobs`, with an Idempotency-Key so that the SDK's retries never create twice. With
   * `dedup` (an extension), a create whose key is held answers the existing job with
   * `deduplicated: true` instead of creating one. `concurrency_key` (an extension) is the key the
   * queue's per-key flow limits count the job under. `depends_on` (an extension, 1 to 100 job ids)
   * makes the job wait `scheduled` until every parent has ended, and `on_parent_failure` (`cancel`,
   * `run` or `ignore`) says what a parent that does not succeed does to it.
   */
  create(body: CreateJobRequest, options?: RequestOptions): Promise<CreatedJob | DeduplicatedJob> {
    return this.call({ method: 'POST', path: `${v1}/jobs`, body, options, repeat: 'key' })
  }

  /** `POST /jobs/batch`: 1 to 1,000 creates, one result per item (docs/api-notes.md, "Batches"). */
  createBatch(jobs: BatchCreateRequest['jobs'], options?: RequestOptions): Promise<BatchCreateResult> {
    return this.call({ method: 'POST', path: `${v1}/jobs/batch`, body: { jobs }, options, repeat: 'key' })
  }

  /**
   * The job now; with `asOf` (an instant, or an event's `cursor` from `history()` or the event
   * feed), the job as it was then, with `as_of`: where the read stopped and the job's latest
   * sequence. Before the job's creation: `job_not_found`; a moment retention removed the history
   * of: `history_expired` (410).
   */
  get(jobId: string, options?: RequestOptions): Promise<Job>
  get(jobId: string, options: RequestOptions & { asOf: string | Date }): Promise<JobAsOf>
  get(jobId: string, options: RequestOptions & { asOf?: string | Date } = {}): Promise<Job | JobAsOf> {
    const { asOf, ...rest } = options
    const query = asOf === undefined ? undefined : { as_of: instant(asOf) }
    return this.call({ method: 'GET', path: `${v1}/jobs/${id(jobId)}`, query, options: rest, repeat: 'safe' })
  }

  list(query: JobListQuery = {}, options?: RequestOptions): Promise<JobList> {
    return this.call({ method: 'GET', path: `${v1}/jobs`, query: query as QueryValues, options, repeat: 'safe' })
  }

  /** Every job the filter matches, newest first, page after page. */
  listAll(filter: Omit<JobListQuery, 'cursor'> = {}, options?: RequestOptions): AsyncGenerator<Job> {
    return everyItem((query) => this.list(query, options), filter as JobListQuery)
  }

  /**
   * Cancels a pending or scheduled job. With `includeRunning` (an extension) a processing job is
   * asked to stop instead of refused: `{id, state: 'processing', cancel_requested: true}`; its
   * worker's `ctx.signal` fires within a second and the job ends `cancelled`.
   */
  cancel(jobId: string, options: RequestOptions & { includeRunning?: boolean } = {}): Promise<CancelResult> {
    const { includeRunning, ...rest } = options
    const body = includeRunning === true ? { include_running: true } : undefined
    return this.call({ method: 'POST', path: `${v1}/jobs/${id(jobId)}/cancel`, body, options: rest, repeat: 'key' })
  }

  /**
   * Changes a pending or scheduled job's priority (an extension: -600 to 600 seconds, higher
   * sooner; claims take due jobs by due time minus priority) and answers the job. Another state is
   * `invalid_state`. Setting the same priority again changes nothing.
   */
  setPriority(jobId: string, priority: number, options?: RequestOptions): Promise<Job> {
    return this.call({ method: 'PATCH', path: `${v1}/jobs/${id(jobId)}`, body: { priority }, options, repeat: 'key' })
  }

  retry(jobId: string, options?: RequestOptions): Promise<ResponseBody<'/jobsvc/v1/jobs/{jobId}/retry', 'post'>> {
    return this.call({ method: 'POST', path: `${v1}/jobs/${id(jobId)}/retry`, options, repeat: 'key' })
  }

  /**
   * `POST /jobs/bulk` (an extension, admins only): retries or cancels every job `filter` matches.
   * With `dry_run: true`, `{matched, sample_ids}`; otherwise `{operation_id, matched}`, an operation
   * to follow with `client.operations.get()` or `client.operations.wait()`. A filter matching more
   * than the plan allows is 409 `bulk_limit_exceeded`.
   */
  bulk(request: BulkRequest & { dry_run: true }, options?: RequestOptions): Promise<BulkCount>
  bulk(request: BulkRequest & { dry_run?: false }, options?: RequestOptions): Promise<BulkStarted>
  bulk(request: BulkRequest, options?: RequestOptions): Promise<BulkCount | BulkStarted>
  bulk(request: BulkRequest, options?: RequestOptions): Promise<BulkCount | BulkStarted> {
    return this.call({ method: 'POST', path: `${v1}/jobs/bulk`, body: request, options, repeat: 'key' })
  }

  /**
   * One page of the job's events from the log, oldest first: `limit` and `cursor` page it, `types`
   * (event types), `since` and `until` (inclusive) filter it.
   */
  async history(jobId: string, query: JobHistoryFilter = {}, options?: RequestOptions): Promise<JobHistory> {
    const { types, since, until, ...paging } = query
    if (types !== undefined && typeof types !== 'string' && types.length === 0) {
      // The service reads an empty `types` as no filter at all: an empty list must not widen to every type.
      throw new TypeError('types names no event type; leave it out to read every type')
    }
    const filter = { types: typeof types === 'string' || types === undefined ? types : types.join(','), since: instant(since), until: instant(until) }
    return this.call({
      method: 'GET',
      path: `${v1}/jobs/${id(jobId)}/history`,
      query: { ...paging, ...filter } as QueryValues,
      options,
      repeat: 'safe',
    })
  }

  /**
   * The job's workflow (an extension): each parent named in its `depends_on`, in order, with its
   * state, result, last error and `waiting` (the job still waits for it), and its children with
   * their states (the first 200; `children_total` counts them all). A continuation's one parent is
   * its `parent_job_id`, not among `parents`.
   */
  dependencies(jobId: string, options?: RequestOptions): Promise<JobDependencies> {
    return this.call({ method: 'GET', path: `${v1}/jobs/${id(jobId)}/dependencies`, options, repeat: 'safe' })
  }

  /**
   * The job's progress stream: a snapshot now, then one per change of state or progress, ending
   * after a terminal state. The service closes a stream after 120 s; this reconnects then, and
   * skips the repeated snapshot a reconnect begins with. Stop early with `break` or the signal.
   */
  async *events(jobId: string, options?: RequestOptions): AsyncGenerator<JobSnapshot> {
    let last: string | null = null
    for (;;) {
      const res = await this.send({ method: 'GET', path: `${v1}/jobs/${id(jobId)}/events`, options, repeat: 'safe' })
      if (res.body === null) throw new JobsvcError({ code: 'network_error', status: 0, message: 'the progress stream answered without a body' })
      let state: string | null = null
      for await (const snapshot of snapshotsOf(res.body)) {
        state = snapshot.state
        const seen = JSON.stringify(snapshot)
        if (seen !== last) yield snapshot
        last = seen
        if (terminal.has(state)) return
      }
      if (options?.signal?.aborted) return
    }
  }

  /**
   * `GET /jobs/export`, streamed: read `records()` (JSONL), `body` or `text()`. With `attest: true`
   * the last line is the signed manifest: hand the `text()` to `verifyExport`.
   */
  async export(query: ExportQuery, options?: RequestOptions): Promise<ExportDownload> {
    const res = await this.send({ method: 'GET', path: `${v1}/jobs/export`, query: query as QueryValues, options, repeat: 'once' })
    return new ExportDownload(res)
  }
}

/** The worker protocol. The {@link Worker} drives it; these are for loops of your own. */
export class WorkersApi {
  constructor(private readonly call: CallJson) {}

  register(body: RegisterRequest, options?: RequestOptions): Promise<ResponseBody<'/jobsvc/v1/workers/register', 'post'>> {
    return this.call({ method: 'POST', path: `${v1}/workers/register`, body, options, repeat: 'safe' })
  }

  poll(body: PollRequest, options?: RequestOptions): Promise<ResponseBody<'/jobsvc/v1/workers/poll', 'post'>> {
    return this.call({ method: 'POST', path: `${v1}/workers/poll`, body, options, repeat: 'once' })
  }

  heartbeat(body: HeartbeatRequest, options?: RequestOptions): Promise<HeartbeatResult> {
    return this.call({ method: 'POST', path: `${v1}/workers/heartbeat`, body, options, repeat: 'once' })
  }

  /**
   * Ends the attempt: `succeeded`, `failed`, or (an extension) `rate_limited` with
   * `retry_after_ms`, which puts the job back, due that long from now, without spending its
   * attempt, and holds back its concurrency key (or, without a per-key limit, its queue) until then.
   */
  ack(body: AckRequest, options?: RequestOptions): Promise<AckResult> {
    return this.call({ method: 'POST', path: `${v1}/workers/ack`, body, options, repeat: 'once' })
  }

  /**
   * `POST /workers/release` (an extension): hands a running job back, pending again (or after
   * `delay_seconds`) without spending its attempt.
   */
  release(body: ReleaseRequest, options?: RequestOptions): Promise<ReleaseResult> {
    return this.call({ method: 'POST', path: `${v1}/workers/release`, body, options, repeat: 'once' })
  }

  /**
   * `POST /workers/signals` (an extension): waits up to `wait_seconds` for one of `job_ids` to be
   * cancelled, and answers those to stop.
   */
  signals(body: SignalsRequest, options?: RequestOptions): Promise<SignalsResult> {
    return this.call({ method: 'POST', path: `${v1}/workers/signals`, body, options, repeat: 'once' })
  }

  /** `POST /workers/ack/batch`: 1 to 1,000 acks, one result per item. */
  ackBatch(acks: AckRequest[], options?: RequestOptions): Promise<BatchAckResult> {
    return this.call({ method: 'POST', path: `${v1}/workers/ack/batch`, body: { acks }, options, repeat: 'once' })
  }
}

/**
 * A project's settings of one kind (webhooks, alerts): list, get, create, update, delete. A kind
 * that `patches` updates with a keyed PATCH; the others replace every setting with a PUT, safe to
 * repeat.
 */
class SettingsApi<Item, CreateBody, Created, UpdateBody> {
  constructor(
    protected readonly call: CallJson,
    private readonly path: string,
    private readonly patches: boolean,
  ) {}

  list(options?: RequestOptions): Promise<{ data: Item[] }> {
    return this.call({ method: 'GET', path: this.path, options, repeat: 'safe' })
  }

  get(itemId: string, options?: RequestOptions): Promise<Item> {
    return this.call({ method: 'GET', path: this.itemPath(itemId), options, repeat: 'safe' })
  }

  create(body: CreateBody, options?: RequestOptions): Promise<Created> {
    return this.call({ method: 'POST', path: this.path, body, options, repeat: 'key' })
  }

  update(itemId: string, body: UpdateBody, options?: RequestOptions): Promise<Item> {
    const path = this.itemPath(itemId)
    return this.call(this.patches ? { method: 'PATCH', path, body, options, repeat: 'key' } : { method: 'PUT', path, body, options, repeat: 'safe' })
  }

  delete(itemId: string, options?: RequestOptions): Promise<void> {
    return this.call({ method: 'DELETE', path: this.itemPath(itemId), options, repeat: 'key' })
  }

  private itemPath(itemId: string): string {
    return `${this.path}/${id(itemId)}`
  }
}

/** `create` answers the signing `secret`, shown this once. */
export class WebhooksApi extends SettingsApi<Webhook, CreateWebhookRequest, CreatedWebhook, UpdateWebhookRequest> {
  constructor(call: CallJson) {
    super(call, `${v1}/webhooks`, true)
  }

  /** A new secret; the previous one keeps signing beside it for 24 hours. */
  rotateSecret(webhookId: string, options?: RequestOptions): Promise<RotatedSecret> {
    return this.call({ method: 'POST', path: `${v1}/webhooks/${id(webhookId)}/rotate-secret`, options, repeat: 'key' })
  }

  deliveries(webhookId: string, query: DeliveryListQuery = {}, options?: RequestOptions): Promise<DeliveryList> {
    return this.call({ method: 'GET', path: `${v1}/webhooks/${id(webhookId)}/deliveries`, query: query as QueryValues, options, repeat: 'safe' })
  }

  allDeliveries(
    webhookId: string,
    query: Omit<DeliveryListQuery, 'cursor'> = {},
    options?: RequestOptions,
  ): AsyncGenerator<DeliveryList['data'][number]> {
    return everyItem((q) => this.deliveries(webhookId, q, options), query as DeliveryListQuery)
  }

  /**
   * A new delivery of the same event (same event id and body), signed with the current secret when
   * sent; 409 `invalid_state` while the delivery is still pending, the subscription inactive, or the
   * event gone from the log.
   */
  redeliver(webhookId: string, deliveryId: string, options?: RequestOptions): Promise<WebhookDelivery> {
    const path = `${v1}/webhooks/${id(webhookId)}/deliveries/${id(deliveryId)}/redeliver`
    return this.call({ method: 'POST', path, options, repeat: 'key' })
  }

  /**
   * Sends the subscription's webhook events of a time range again, read from the log (docs/api-notes.md,
   * "Redelivery and replay"). It runs as an operation (`client.operations.get(operation_id)`); with
   * `dryRun` it only counts, and answers `{ matched }`.
   */
  replay(webhookId: string, replay: WebhookReplay & { dryRun: true }, options?: RequestOptions): Promise<ReplayCount>
  replay(webhookId: string, replay: WebhookReplay & { dryRun?: false }, options?: RequestOptions): Promise<ReplayStarted>
  replay(webhookId: string, replay: WebhookReplay, options?: RequestOptions): Promise<ReplayCount | ReplayStarted>
  replay(webhookId: string, replay: WebhookReplay, options?: RequestOptions): Promise<ReplayCount | ReplayStarted> {
    const body = {
      since: toInstant(replay.since),
      until: replay.until === undefined ? undefined : toInstant(replay.until),
      event_types: replay.eventTypes,
      mode: replay.mode,
      dry_run: replay.dryRun,
    }
    return this.call({ method: 'POST', path: `${v1}/webhooks/${id(webhookId)}/replay`, body, options, repeat: 'key' })
  }
}

/** Which of a subscription's events a replay sends again. */
export interface WebhookReplay {
  /** The events' own time, from (a `Date` or RFC 3339 text). */
  since: string | Date
  /** Up to (default now); after `since`. */
  until?: string | Date
  /** `failed`: whose latest delivery to the subscription failed; `missing`: never delivered to it; `all`. */
  mode: ReplayMode
  /** Default: the subscription's own; each must be among them. */
  eventTypes?: WebhookEventType[]
  /** Count only: nothing is sent and no operation is made. */
  dryRun?: boolean
}

const toInstant = (value: string | Date) => (value instanceof Date ? value.toISOString() : value)

/** The project's long-running actions, today webhook replays (docs/api-notes.md, "Operations"). */
export class OperationsApi {
  constructor(private readonly call: CallJson) {}

  /** As it stands now, progress included. */
  get(operationId: string, options?: RequestOptions): Promise<Operation> {
    return this.call({ method: 'GET', path: `${v1}/operations/${id(operationId)}`, options, repeat: 'safe' })
  }

  /** Newest first; `limit` 1–100 (default 50). */
  list(query: OperationListQuery = {}, options?: RequestOptions): Promise<OperationList> {
    return this.call({ method: 'GET', path: `${v1}/operations`, query: query as QueryValues, options, repeat: 'safe' })
  }

  listAll(query: Omit<OperationListQuery, 'cursor'> = {}, options?: RequestOptions): AsyncGenerator<Operation> {
    return everyItem((q) => this.list(q, options), query as OperationListQuery)
  }

  /**
   * Polls the operation every `intervalMs` (default 1 s) until it is no longer `running`, calling
   * `onProgress` with each reading; resolves to it as it ended. `signal` stops the wait (it rejects
   * with the signal's reason); the operation runs on.
   */
  async wait(operationId: string, options: RequestOptions & { intervalMs?: number; onProgress?: (op: Operation) => void } = {}): Promise<Operation> {
    const { intervalMs = 1_000, onProgress, ...rest } = options
    for (;;) {
      const op = await this.get(operationId, rest)
      onProgress?.(op)
      if (op.status !== 'running') return op
      await sleep(intervalMs, rest.signal)
      rest.signal?.throwIfAborted()
    }
  }

  /**
   * Stops a running operation (what it did stays done) and answers it `cancelled`; again on a
   * cancelled one answers it as it is; one that ended otherwise is 409 `invalid_state`.
   */
  cancel(operationId: string, options?: RequestOptions): Promise<Operation> {
    return this.call({ method: 'DELETE', path: `${v1}/operations/${id(operationId)}`, options, repeat: 'key' })
  }
}

export class RecurringApi {
  constructor(private readonly call: CallJson) {}

  list(query: Query<'/jobsvc/v1/recurring', 'get'> = {}, options?: RequestOptions): Promise<{ data: RecurringSchedule[] }> {
    return this.call({ method: 'GET', path: `${v1}/recurring`, query: query as QueryValues, options, repeat: 'safe' })
  }

  /** Creates or replaces the schedule `rjob_<slug of job_type>`. */
  upsert(scheduleId: string, body: UpsertRecurringRequest, options?: RequestOptions): Promise<RecurringSchedule> {
    return this.call({ method: 'PUT', path: `${v1}/recurring/${id(scheduleId)}`, body, options, repeat: 'safe' })
  }

  delete(scheduleId: string, options?: RequestOptions): Promise<void> {
    return this.call({ method: 'DELETE', path: `${v1}/recurring/${id(scheduleId)}`, options, repeat: 'key' })
  }
}

/** `update` replaces every setting of the alert. */
export class AlertsApi extends SettingsApi<Alert, AlertRequest, Alert, AlertRequest> {
  constructor(call: CallJson) {
    super(call, `${v1}/alerts`, false)
  }
}

/**
 * The project's retry policy and its per-queue overrides (docs/api-notes.md, "Retry policy"): what an ack's
 * `retry_at` and a new job's default `max_attempts` follow. `set` replaces every field.
 */
export class RetryPolicyApi {
  constructor(private readonly call: CallJson) {}

  get(options?: RequestOptions): Promise<ProjectRetryPolicy> {
    return this.call({ method: 'GET', path: `${v1}/retry-policy`, options, repeat: 'safe' })
  }

  set(policy: RetryPolicyRequest, options?: RequestOptions): Promise<ProjectRetryPolicy> {
    return this.call({ method: 'PUT', path: `${v1}/retry-policy`, body: policy, options, repeat: 'safe' })
  }

  /** Back to the service's default. */
  remove(options?: RequestOptions): Promise<void> {
    return this.call({ method: 'DELETE', path: `${v1}/retry-policy`, options, repeat: 'safe' })
  }

  getForQueue(queue: string, options?: RequestOptions): Promise<QueueRetryPolicy> {
    return this.call({ method: 'GET', path: `${v1}/queues/${id(queue)}/retry-policy`, options, repeat: 'safe' })
  }

  setForQueue(queue: string, policy: RetryPolicyRequest, options?: RequestOptions): Promise<QueueRetryPolicy> {
    return this.call({ method: 'PUT', path: `${v1}/queues/${id(queue)}/retry-policy`, body: policy, options, repeat: 'safe' })
  }

  /** The queue follows the project's policy again. */
  removeForQueue(queue: string, options?: RequestOptions): Promise<void> {
    return this.call({ method: 'DELETE', path: `${v1}/queues/${id(queue)}/retry-policy`, options, repeat: 'safe' })
  }
}

/**
 * Pausing and resuming queues (docs/api-notes.md, "Queue pauses"): a paused queue's jobs are
 * created but handed to no poll until it is resumed or its `until` passes. A queue's settings, and
 * its flow limits (an extension): how many of its jobs run at once and how fast they start.
 */
export class QueuesApi {
  constructor(private readonly call: CallJson) {}

  /** The paused queues, then every queue holding jobs, with their counts per state. */
  list(query: { min_seq?: number } = {}, options?: RequestOptions): Promise<QueueList> {
    return this.call({ method: 'GET', path: `${v1}/queues`, query: query as QueryValues, options, repeat: 'safe' })
  }

  /** Needs `admin`. Pausing again replaces the reason and `until`. */
  pause(queue: string, pause: PauseQueueRequest = {}, options?: RequestOptions): Promise<QueueState> {
    return this.call({ method: 'POST', path: `${v1}/queues/${id(queue)}/pause`, body: pause, options, repeat: 'safe' })
  }

  /** Wakes the queue's waiting polls at once. A queue that is not paused is answered as it is. */
  resume(queue: string, options?: RequestOptions): Promise<QueueState> {
    return this.call({ method: 'POST', path: `${v1}/queues/${id(queue)}/resume`, body: {}, options, repeat: 'safe' })
  }

  /**
   * Needs `admin`. `default_ttl_seconds`: the `ttl_seconds` of jobs created in the queue without
   * their own (null removes it); a job not claimed within it of becoming due ends `cancelled`
   * with `cancel_reason: 'expired'`.
   */
  setSettings(queue: string, settings: QueueSettingsRequest, options?: RequestOptions): Promise<QueueSettings> {
    return this.call({ method: 'PUT', path: `${v1}/queues/${id(queue)}/settings`, body: settings, options, repeat: 'safe' })
  }

  /**
   * Needs `admin`. Replaces the queue's flow limits: `concurrency` (its running jobs, overall
   * `limit` and/or `per_key`, counted by `concurrency_key`, `job_type` or `tag:<name>`) and
   * `rate` (starts per `period_seconds`, with a `burst`, for the queue or per key). A poll is
   * handed only the jobs a limit lets start; the others wait, pending.
   */
  setLimits(queue: string, limits: QueueLimitsRequest, options?: RequestOptions): Promise<QueueLimits> {
    return this.call({ method: 'PUT', path: `${v1}/queues/${id(queue)}/limits`, body: limits, options, repeat: 'safe' })
  }

  /** The queue's flow limits; `concurrency`, `rate` and `updated_at` are null when it has none. */
  getLimits(queue: string, options?: RequestOptions): Promise<QueueLimits> {
    return this.call({ method: 'GET', path: `${v1}/queues/${id(queue)}/limits`, options, repeat: 'safe' })
  }

  /** Needs `admin`. The queue's jobs start as they did before it had limits. */
  deleteLimits(queue: string, options?: RequestOptions): Promise<void> {
    return this.call({ method: 'DELETE', path: `${v1}/queues/${id(queue)}/limits`, options, repeat: 'safe' })
  }

  /**
   * The limits at work now: jobs holding a slot (`running`), due jobs waiting for one, the rate
   * bucket's `tokens`, a `rate_limited` ack's hold (`held_until`), and the same per key for the 50
   * keys with the most jobs waiting.
   */
  getLimitsState(queue: string, options?: RequestOptions): Promise<QueueLimitsState> {
    return this.call({ method: 'GET', path: `${v1}/queues/${id(queue)}/limits/state`, options, repeat: 'safe' })
  }
}

export class ActivityApi {
  constructor(private readonly call: CallJson) {}

  list(query: ActivityQuery = {}, options?: RequestOptions): Promise<ActivityPage> {
    return this.call({ method: 'GET', path: `${v1}/activity`, query: query as QueryValues, options, repeat: 'safe' })
  }

  listAll(query: Omit<ActivityQuery, 'cursor'> = {}, options?: RequestOptions): AsyncGenerator<ActivityPage['data'][number]> {
    return everyItem((q) => this.list(q, options), query as ActivityQuery)
  }
}

export class MetricsApi {
  constructor(private readonly call: CallJson) {}

  summary(
    query: Query<'/jobsvc/v1/metrics/summary', 'get'> = {},
    options?: RequestOptions,
  ): Promise<ResponseBody<'/jobsvc/v1/metrics/summary', 'get'>> {
    return this.call({ method: 'GET', path: `${v1}/metrics/summary`, query: query as QueryValues, options, repeat: 'safe' })
  }

  throughput(
    query: Query<'/jobsvc/v1/metrics/throughput', 'get'> = {},
    options?: RequestOptions,
  ): Promise<ResponseBody<'/jobsvc/v1/metrics/throughput', 'get'>> {
    return this.call({ method: 'GET', path: `${v1}/metrics/throughput`, query: query as QueryValues, options, repeat: 'safe' })
  }

  queues(query: Query<'/jobsvc/v1/metrics/queues', 'get'> = {}, options?: RequestOptions): Promise<ResponseBody<'/jobsvc/v1/metrics/queues', 'get'>> {
    return this.call({ method: 'GET', path: `${v1}/metrics/queues`, query: query as QueryValues, options, repeat: 'safe' })
  }

  jobTypes(
    query: Query<'/jobsvc/v1/metrics/job-types', 'get'> = {},
    options?: RequestOptions,
  ): Promise<ResponseBody<'/jobsvc/v1/metrics/job-types', 'get'>> {
    return this.call({ method: 'GET', path: `${v1}/metrics/job-types`, query: query as QueryValues, options, repeat: 'safe' })
  }
}

/** The audit-log export takes a dashboard session (a JWT of an admin or owner), not the API key. */
export class AuditLogApi {
  constructor(private readonly send: CallRaw) {}

  async export(projectId: string, query: ExportQuery, session: { token: string }, options?: RequestOptions): Promise<ExportDownload> {
    const res = await this.send({
      method: 'GET',
      path: `${v1}/projects/${id(projectId)}/audit-log/export`,
      query: query as QueryValues,
      options,
      repeat: 'once',
      authorization: `Bearer ${session.token}`,
    })
    return new ExportDownload(res)
  }
}

/**
 * The project's Merkle log (docs/audit.md): signed checkpoints, inclusion and consistency proofs and
 * the signing keys, and {@link AuditApi.verifyEvent}, which proves a feed event with them.
 * Checkpoints and proofs need `admin` (or the API key); the keys need no credentials.
 */
export class AuditApi {
  constructor(private readonly call: CallJson) {}

  /**
   * `POST /audit/checkpoints`: a checkpoint signed now over every event the log has taken in, or
   * the newest one when the tree has not grown since it. Keep it outside the service: a checkpoint
   * you hold is what makes a log that lost its newest events detectable.
   */
  issueCheckpoint(options?: RequestOptions): Promise<AuditCheckpoint> {
    return this.call({ method: 'POST', path: `${v1}/audit/checkpoints`, options, repeat: 'key' })
  }

  /** One page of the project's checkpoints, smallest tree first; pass its `next_cursor` as `after` for the next. */
  checkpoints(query: AuditCheckpointQuery = {}, options?: RequestOptions): Promise<AuditCheckpointPage> {
    const { from, until, ...paging } = query
    const filter = { from: instant(from), until: instant(until) }
    return this.call({ method: 'GET', path: `${v1}/audit/checkpoints`, query: { ...paging, ...filter } as QueryValues, options, repeat: 'safe' })
  }

  /** Every checkpoint the filter matches, smallest tree first, page after page. */
  allCheckpoints(filter: Omit<AuditCheckpointQuery, 'after'> = {}, options?: RequestOptions): AsyncGenerator<AuditCheckpoint> {
    // The list pages by `after` (a tree size) where the other lists take `cursor`.
    return everyItem<AuditCheckpoint, { cursor?: string }>(({ cursor }) => this.checkpoints({ ...filter, after: cursor }, options), {})
  }

  /** The hashes from leaf `leafIndex` to the root of the first `treeSize` leaves (RFC 9162 §2.1.3). */
  inclusionProof(leafIndex: number, treeSize: number, options?: RequestOptions): Promise<AuditInclusionProof> {
    const query = { leaf_index: leafIndex, tree_size: treeSize }
    return this.call({ method: 'GET', path: `${v1}/audit/proofs/inclusion`, query, options, repeat: 'safe' })
  }

  /** The hashes that prove the tree of `first` leaves a prefix of the tree of `second` (RFC 9162 §2.1.4). */
  consistencyProof(first: number, second: number, options?: RequestOptions): Promise<AuditConsistencyProof> {
    return this.call({ method: 'GET', path: `${v1}/audit/proofs/consistency`, query: { first, second }, options, repeat: 'safe' })
  }

  /** `GET /audit/keys`: every key that ever signed, with its window. Save it beside the checkpoints you keep. */
  keys(options?: RequestOptions): Promise<AuditKeysDocument> {
    return this.call({ method: 'GET', path: `${v1}/audit/keys`, options, repeat: 'safe' })
  }

  /**
   * Proves that a feed event (from `client.events()`, `eventsPage()` or a named consumer) is in the
   * project's log as the service signed it: the event's leaf, recomputed here, with an inclusion
   * proof, leads to the root of a checkpoint whose signature verifies with the keys. The service is
   * trusted for nothing but the keys, and not for those when you pass `keys` you saved. The
   * checkpoint is `checkpoint` when given, else the oldest one whose tree holds the event, or one
   * issued now when none does yet. A refusal is a verdict (`verified: false`, with the verifier's
   * `code` and `reason`); a failed request throws its {@link JobsvcError}.
   */
  async verifyEvent(event: FeedEvent, options: VerifyEventOptions = {}): Promise<EventVerdict> {
    const { keys, checkpoint, ...request } = options
    const index = event.leaf_index
    if (index === null || !Number.isSafeInteger(index) || index < 0) {
      throw new TypeError('the event has no leaf_index: the audit log had not taken it in when it was read; read it from the feed again')
    }
    try {
      const leaf = toLeafObject(event, 'the event')
      const trusted = keys ?? (await this.keys(request))
      const signed = verifyCheckpoint(checkpoint ?? (await this.#checkpointHolding(index, request)), trusted)
      const head = signed.checkpoint
      if (leaf.project_id !== head.project_id)
        fail('project_mismatch', `the event is of project ${leaf.project_id}, the checkpoint of ${head.project_id}`)
      if (index >= head.tree_size)
        fail('leaf_out_of_range', `leaf ${index} is beyond the checkpoint's tree of ${head.tree_size} leaves: the event is newer`)
      const proof = await this.inclusionProof(index, head.tree_size, request)
      if (proof.leaf_index !== index) fail('inclusion_failed', `the service answered a proof for leaf ${proof.leaf_index}, not ${index}`)
      verifyInclusion(leaf, proof, head)
      return { verified: true, leafIndex: index, checkpoint: head, key: signed.key, proof }
    } catch (error) {
      if (error instanceof AuditVerificationError) return { verified: false, leafIndex: index, code: error.code, reason: error.message }
      throw error
    }
  }

  /** The oldest checkpoint whose tree holds leaf `index` (the list's `after` is a tree size), or one issued now. */
  async #checkpointHolding(index: number, options: RequestOptions): Promise<AuditCheckpoint> {
    const { data } = await this.checkpoints({ after: index, limit: 1 }, options)
    return data[0] ?? (await this.issueCheckpoint(options))
  }
}

export interface VerifyEventOptions extends RequestOptions {
  /** The keys document to trust, one you saved (default: `GET /audit/keys` now). */
  keys?: AuditKeys
  /** A checkpoint you hold whose tree holds the event (default: the oldest the service lists that does, or one issued now). */
  checkpoint?: Checkpoint
}

/** What `audit.verifyEvent` found: the checkpoint, key and proof that prove the event, or why it is refused. */
export type EventVerdict =
  | { verified: true; leafIndex: number; checkpoint: Checkpoint; key: AuditKey; proof: InclusionProof }
  | { verified: false; leafIndex: number; code: AuditFailureCode; reason: string }
