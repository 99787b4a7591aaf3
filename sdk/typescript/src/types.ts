import type { components, paths } from './openapi.js'

/**
 * Names for the generated operation types (src/openapi.ts, which the build makes from openapi.json),
 * so that every method's request and answer are the document's own.
 */
type Method = 'get' | 'put' | 'post' | 'patch' | 'delete'
export type Path = keyof paths
type Route<P extends Path, M extends Method> = NonNullable<paths[P][M]>

export type RequestBody<P extends Path, M extends Method> =
  Route<P, M> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never

/**
 * Query strings are text on the wire, and the document types numeric parameters such as `limit`
 * as strings (they are validated from the text); a number is sent as its decimal text.
 */
type QueryText<Q> = { [K in keyof Q]: K extends 'cursor' ? Q[K] : Q[K] extends string | undefined ? Q[K] | number : Q[K] }
export type Query<P extends Path, M extends Method> = Route<P, M> extends { parameters: { query?: infer Q } } ? QueryText<NonNullable<Q>> : never

type JsonOf<R> = R extends { content: { 'application/json': infer B } } ? B : never
export type ResponseBody<P extends Path, M extends Method> = Route<P, M>['responses'] extends infer R
  ? R extends { 200: infer Ok }
    ? JsonOf<Ok>
    : R extends { 201: infer Created }
      ? JsonOf<Created>
      : void
  : never

/** The body of a 202 (Accepted) answer: work the service goes on with after answering. */
export type AcceptedBody<P extends Path, M extends Method> = Route<P, M>['responses'] extends { 202: infer A } ? JsonOf<A> : never

export type Job = components['schemas']['Job']
export type JobState = Job['state']
export type CreateJobRequest = RequestBody<'/jobsvc/v1/jobs', 'post'>
/** The 201 of a create: a new job. */
export type CreatedJob = Route<'/jobsvc/v1/jobs', 'post'>['responses'] extends { 201: infer Created } ? JsonOf<Created> : never
/**
 * The 200 of a create with `dedup` whose key was held (README, "Deduplication"): no job was
 * created; this is the existing job's detail with `deduplicated: true`.
 */
export type DeduplicatedJob = components['schemas']['DeduplicatedJob']
export type JobListQuery = Query<'/jobsvc/v1/jobs', 'get'>
export type JobList = ResponseBody<'/jobsvc/v1/jobs', 'get'>
export type JobHistoryQuery = Query<'/jobsvc/v1/jobs/{jobId}/history', 'get'>
export type JobHistory = ResponseBody<'/jobsvc/v1/jobs/{jobId}/history', 'get'>
/** One event of a job's history: its `cursor` is the event feed's, which `jobs.get(id, { asOf })` takes. */
export type JobHistoryEvent = JobHistory['data'][number]
/**
 * `jobs.history()`'s query: `limit` and `cursor` as the route takes them; `types` a list of event
 * types (or the comma-separated text), `since` and `until` instants (inclusive).
 */
export type JobHistoryFilter = Omit<JobHistoryQuery, 'types' | 'since' | 'until'> & {
  types?: string | readonly string[]
  since?: string | Date
  until?: string | Date
}
/**
 * A job's place in its workflow (`GET /jobs/{jobId}/dependencies`, an extension): its parents
 * (those of `depends_on`) with their states, results, errors and whether it still waits for them,
 * and its children (graph jobs and continuations) with their states, the first 200 of
 * `children_total`.
 */
export type JobDependencies = ResponseBody<'/jobsvc/v1/jobs/{jobId}/dependencies', 'get'>
/** The job as it was at a moment of its history (`jobs.get(id, { asOf })`), with `as_of`: where the read stopped. */
export type JobAsOf = components['schemas']['JobAsOf']
export type BatchCreateRequest = RequestBody<'/jobsvc/v1/jobs/batch', 'post'>
export type BatchCreateResult = ResponseBody<'/jobsvc/v1/jobs/batch', 'post'>
/**
 * An export's query: the route's, with `attest` also as a boolean. `attest: true` (JSONL only;
 * `admin`) gives each line its events in the Merkle log and ends the export with a signed manifest
 * line, for `verifyExport` (docs/audit.md, "Attested exports").
 */
export type ExportQuery = Omit<Query<'/jobsvc/v1/jobs/export', 'get'>, 'attest'> & { attest?: boolean | 'true' | 'false' }

export type PollRequest = RequestBody<'/jobsvc/v1/workers/poll', 'post'>
export type PolledJob = ResponseBody<'/jobsvc/v1/workers/poll', 'post'>['jobs'][number]
export type AckRequest = RequestBody<'/jobsvc/v1/workers/ack', 'post'>
export type AckResult = ResponseBody<'/jobsvc/v1/workers/ack', 'post'>
export type BatchAckResult = ResponseBody<'/jobsvc/v1/workers/ack/batch', 'post'>
export type HeartbeatRequest = RequestBody<'/jobsvc/v1/workers/heartbeat', 'post'>
export type HeartbeatResult = ResponseBody<'/jobsvc/v1/workers/heartbeat', 'post'>
export type RegisterRequest = RequestBody<'/jobsvc/v1/workers/register', 'post'>
export type ReleaseRequest = RequestBody<'/jobsvc/v1/workers/release', 'post'>
export type ReleaseResult = ResponseBody<'/jobsvc/v1/workers/release', 'post'>
export type SignalsRequest = RequestBody<'/jobsvc/v1/workers/signals', 'post'>
export type SignalsResult = ResponseBody<'/jobsvc/v1/workers/signals', 'post'>
/** What a cancel answers: 200 `cancelled`, or (with `includeRunning`) 202 for a running job asked to stop. */
export type CancelResult = { id: string; state: JobState } | { id: string; state: 'processing'; cancel_requested: true }
export type RecurringScheduleRegistration = NonNullable<RegisterRequest['recurring_schedules']>[number]

export type Webhook = components['schemas']['Webhook']
export type CreateWebhookRequest = RequestBody<'/jobsvc/v1/webhooks', 'post'>
export type CreatedWebhook = ResponseBody<'/jobsvc/v1/webhooks', 'post'>
export type UpdateWebhookRequest = RequestBody<'/jobsvc/v1/webhooks/{id}', 'patch'>
export type RotatedSecret = ResponseBody<'/jobsvc/v1/webhooks/{id}/rotate-secret', 'post'>
export type DeliveryListQuery = Query<'/jobsvc/v1/webhooks/{id}/deliveries', 'get'>
export type DeliveryList = ResponseBody<'/jobsvc/v1/webhooks/{id}/deliveries', 'get'>
export type WebhookDelivery = components['schemas']['WebhookDelivery']
export type ReplayMode = RequestBody<'/jobsvc/v1/webhooks/{id}/replay', 'post'>['mode']
export type WebhookEventType = NonNullable<RequestBody<'/jobsvc/v1/webhooks/{id}/replay', 'post'>['event_types']>[number]
export type ReplayCount = ResponseBody<'/jobsvc/v1/webhooks/{id}/replay', 'post'>
export type ReplayStarted = AcceptedBody<'/jobsvc/v1/webhooks/{id}/replay', 'post'>

/** A bulk action on the jobs a filter matches (docs/api-notes.md, "Bulk actions by filter"). */
export type BulkRequest = RequestBody<'/jobsvc/v1/jobs/bulk', 'post'>
export type BulkFilter = BulkRequest['filter']
export type BulkAction = BulkRequest['action']
export type BulkCount = ResponseBody<'/jobsvc/v1/jobs/bulk', 'post'>
export type BulkStarted = AcceptedBody<'/jobsvc/v1/jobs/bulk', 'post'>

/** A long-running action of the project (a webhook replay, a bulk job action), as it stands now. */
export type Operation = components['schemas']['Operation']
export type OperationListQuery = Query<'/jobsvc/v1/operations', 'get'>
export type OperationList = ResponseBody<'/jobsvc/v1/operations', 'get'>

export type RecurringSchedule = components['schemas']['RecurringSchedule']
export type UpsertRecurringRequest = RequestBody<'/jobsvc/v1/recurring/{id}', 'put'>
export type Alert = components['schemas']['Alert']
export type AlertRequest = RequestBody<'/jobsvc/v1/alerts', 'post'>
export type ProjectRetryPolicy = ResponseBody<'/jobsvc/v1/retry-policy', 'get'>
export type QueueRetryPolicy = ResponseBody<'/jobsvc/v1/queues/{queue}/retry-policy', 'get'>
export type RetryPolicyRequest = RequestBody<'/jobsvc/v1/retry-policy', 'put'>
export type QueueList = ResponseBody<'/jobsvc/v1/queues', 'get'>
export type QueueState = ResponseBody<'/jobsvc/v1/queues/{queue}/pause', 'post'>
export type PauseQueueRequest = NonNullable<RequestBody<'/jobsvc/v1/queues/{queue}/pause', 'post'>>
export type QueueSettings = ResponseBody<'/jobsvc/v1/queues/{queue}/settings', 'put'>
export type QueueSettingsRequest = RequestBody<'/jobsvc/v1/queues/{queue}/settings', 'put'>
export type ActivityQuery = Query<'/jobsvc/v1/activity', 'get'>
export type ActivityPage = ResponseBody<'/jobsvc/v1/activity', 'get'>

/** A queue's flow limits (an extension); `concurrency`, `rate` and `updated_at` are null when it has none. */
export type QueueLimits = components['schemas']['QueueLimits']
/** `PUT /queues/{queue}/limits`: at least one of `concurrency` and `rate`; `concurrency` needs `limit` or `per_key`. */
export type QueueLimitsRequest = RequestBody<'/jobsvc/v1/queues/{queue}/limits', 'put'>
/** `GET /queues/{queue}/limits/state`: the queue's slots, bucket and hold now, and its 50 keys with the most jobs waiting. */
export type QueueLimitsState = ResponseBody<'/jobsvc/v1/queues/{queue}/limits/state', 'get'>

/** One event of the project's feed (`GET /events`): `cursor` is where to resume after it. */
export type FeedEvent = components['schemas']['FeedEvent']
export type EventFeedQuery = Query<'/jobsvc/v1/events', 'get'>
export type EventFeedAnswer = ResponseBody<'/jobsvc/v1/events', 'get'>

/** A named consumer of the feed: `position` is where it goes on, `delivered` how far polls were handed events. */
export type EventConsumer = components['schemas']['EventConsumer']
export type EventConsumerWithLag = components['schemas']['EventConsumerWithLag']
export type CreateEventConsumerRequest = RequestBody<'/jobsvc/v1/event-consumers', 'post'>
export type EventConsumerPollRequest = RequestBody<'/jobsvc/v1/event-consumers/{name}/poll', 'post'>
/** A poll's events, leased to it: commit `ack_cursor` once they are handled. */
export type EventConsumerPoll = ResponseBody<'/jobsvc/v1/event-consumers/{name}/poll', 'post'>
export type EventConsumerSeekRequest = RequestBody<'/jobsvc/v1/event-consumers/{name}/seek', 'post'>

/** A signed checkpoint of the project's Merkle log, as the service gives it (docs/audit.md, "Checkpoints"). */
export type AuditCheckpoint = ResponseBody<'/jobsvc/v1/audit/checkpoints', 'post'>
/** `audit.checkpoints()`'s query: `from` and `until` (issued at or after, before) as instants; `after` a page's `next_cursor`. */
export type AuditCheckpointQuery = Omit<Query<'/jobsvc/v1/audit/checkpoints', 'get'>, 'from' | 'until'> & {
  from?: string | Date
  until?: string | Date
}
export type AuditCheckpointPage = ResponseBody<'/jobsvc/v1/audit/checkpoints', 'get'>
export type AuditInclusionProof = ResponseBody<'/jobsvc/v1/audit/proofs/inclusion', 'get'>
export type AuditConsistencyProof = ResponseBody<'/jobsvc/v1/audit/proofs/consistency', 'get'>
/** `GET /jobsvc/v1/audit/keys`: every key that ever signed, with its window. */
export type AuditKeysDocument = ResponseBody<'/jobsvc/v1/audit/keys', 'get'>

/** One frame of the progress stream (spec, Job progress stream). */
export interface JobSnapshot {
  state: JobState
  progress: number | null
  attempt: number
  max_attempts: number
}

/** A page of a cursor-paginated list. */
export interface Page<T> {
  data: T[]
  has_more: boolean
  next_cursor?: string | null
}
