import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { InvalidPriority, InvalidState, JobNotFound, ParentTerminal, WorkerMismatch } from './errors.ts'
import { retryDelayMs, retryPolicyFor, type RetryPolicies } from './retry-policy.ts'
import { toTraceparent } from './trace-context.ts'

/**
 * The job aggregate. Field names are snake_case because the state and the events are a public
 * contract: the state is the job detail object of the API, and the events are what analytics
 * consumers read from the stream (docs/event-log.md).
 */

export const jobStates = ['pending', 'scheduled', 'processing', 'succeeded', 'failed', 'cancelled', 'dead_letter'] as const
export type JobState = (typeof jobStates)[number]

export const terminalJobStates: readonly JobState[] = ['succeeded', 'failed', 'cancelled', 'dead_letter']

export function isTerminal(state: JobState): boolean {
  return terminalJobStates.includes(state)
}

export interface JobError {
  type: string
  message: string
  stack_trace: string
}

export interface Job {
  id: string
  project_id: string
  state: JobState
  job_type: string
  queue: string
  created_at: string
  /** When the job may next be claimed or promoted; null means "as soon as it is pending". */
  run_at: string | null
  started_at: string | null
  completed_at: string | null
  attempt: number
  max_attempts: number
  timeout_seconds: number
  /**
   * Progress as the job's own messages set it: reset by a claim or a retry, and set only by logs
   * written before progress had a subject of its own (domain/job-progress.ts, `progressOf`).
   */
  progress: number | null
  duration_ms: number | null
  /**
   * Where the last error is kept: the stream sequence of the message whose `job_attempt_failed` or
   * `job_dead_lettered` recorded it, 0 in that message itself (a message's sequence is assigned
   * when it is stored), null when there is none. The error is read from that message once
   * (`errorOf`), not carried by every later one.
   */
  error_seq: number | null
  /**
   * The last error itself, only in a state written before errors were kept once (see
   * `upgradeJob`); carried until the job leaves it, absent otherwise.
   */
  error?: JobError | null
  tags: Record<string, string> | null
  parent_job_id: string | null
  /** A continuation still waiting for its parent to succeed. */
  waiting_for_parent: boolean
  /** Continuations attached to this job, in the order they were created. */
  children: string[]
  worker_id: string | null
  idempotency_key: string | null
  /** The W3C `traceparent` the job was created with (domain/trace-context.ts); handed to its workers. */
  traceparent: string | null
  updated_at: string
  /**
   * When a cancel of the running attempt was asked for (`include_running`); present only from
   * then on, so a job that never had one keeps the shape of every older message.
   */
  cancel_requested_at?: string
  /**
   * Claim order offset in seconds (issue 28, item 5): present only for a job created with a
   * non-zero priority or changed since, so every other job keeps the shape of older messages.
   */
  priority?: number
  /**
   * How long the job may wait to be claimed each time it becomes due (issue 28, expiry), with
   * `expires_at` the end of its current wait (absent while it runs or waits for its parent) and
   * `cancel_reason` set once the wait ran out. All three are present only for a job created with
   * a ttl, so every other job keeps the shape of every older message.
   */
  ttl_seconds?: number
  expires_at?: string
  cancel_reason?: 'expired' | 'concurrency_limit' | 'parent_never_created'
  /**
   * Where the payload is kept once a dedup create replaced it (issue 29, `job_payload_replaced`):
   * the stream sequence of the message holding the latest one, 0 in that message itself. Absent
   * while the payload is the one of the job's `job_created`, so every other job keeps the shape of
   * every older message.
   */
  payload_seq?: number
  /**
   * The key a queue's per-key limits may count the job by (issue 29, `by: "concurrency_key"`);
   * present only when the job was created with one, so every other job keeps the shape of older messages.
   */
  concurrency_key?: string
  /**
   * The flow gates (domain/flow-gate.ts) the last claimed attempt took a slot or a token in, by
   * their aggregate ids: freed when the attempt ends. Present only once a claim took one.
   */
  gates?: string[]
  /**
   * The claim's hold in those gates (domain/flow-gate.ts HoldRef): what a release frees, so it
   * frees this claim's slots and never those of a later claim of the same attempt number.
   * Present with `gates` on claims written since holds were named.
   */
  gate_hold?: string
  /** Since when, and why, the waiting job has been refused a gate (issue 29): cleared by its next claim. */
  limit_waiting?: LimitWait
  /**
   * A job of a graph (issue 30): the parents it was created with (`depends_on`, less those a
   * failure dropped under `on_parent_failure: "ignore"`), the ones it still waits for
   * (`waiting_for`: none once activated) and what a parent's dead-letter or cancel does to it.
   * Present only for a job created with `depends_on`, so every other job keeps the shape of
   * older messages; a spec continuation (`parent_job_id`) has none of them.
   */
  depends_on?: string[]
  waiting_for?: string[]
  on_parent_failure?: ParentFailureRule
}

/**
 * What a parent that ends without success (dead-lettered or cancelled) does to a job of a graph:
 * `cancel` cancels it (the continuation's rule), `run` counts the parent as settled so the job
 * runs once every parent has ended (a fan-in of whatever finished), `ignore` drops the parent
 * from the job's parents altogether.
 */
export const parentFailureRules = ['cancel', 'run', 'ignore'] as const
export type ParentFailureRule = (typeof parentFailureRules)[number]

/** How a parent of a graph job ended, as its `job_parent_settled` records it. */
export type ParentOutcome = 'succeeded' | 'dead_letter' | 'cancelled'

/** A job waiting for a gate: a slot of its key or queue (`concurrency`), a token (`rate`), or a worker's hold (`held`). */
export interface LimitWait {
  reason: 'concurrency' | 'rate' | 'held'
  /** The key it waits for (null: its queue). */
  key: string | null
  since: string
}

/**
 * What the log keeps once instead of in every message of a job: the payload (in its
 * `job_created`, the first message of its subject), the last error (in the message that recorded
 * it) and the progress (on the job's progress subject). A reader that shows them resolves them.
 */
export interface JobFacts {
  payload: Record<string, unknown>
  error: JobError | null
  progress: number | null
  /** What the handler of its successful attempt returned (null: nothing, or not succeeded), kept in that attempt's `job_succeeded`. */
  result: unknown
}

/** A job as the API shows it: its state with the facts kept once. */
export type JobView = Omit<Job, 'error' | 'error_seq' | 'progress'> & JobFacts

export function toJobView(job: Job, facts: JobFacts): JobView {
  const { error: _inline, error_seq: _at, ...state } = job
  return { ...state, ...facts }
}

/** `null` until the job's first event. */
export type JobAggregate = Job | null

/** What a worker reports of an attempt. */
export const ackStatuses = ['succeeded', 'failed'] as const
export type AckStatus = (typeof ackStatuses)[number]

/**
 * `expired`: not claimed within its ttl of becoming due (expire_job); `concurrency_limit`: its key
 * was full under `cancel_newest` (issue 29); `parent_never_created`: a job of a graph batch that
 * the process died in, left waiting for a parent of the batch that was never appended (issue 30),
 * and the jobs of that batch waiting on it in turn.
 */
export type CancelReason = 'requested' | 'parent_cancelled' | 'parent_dead_lettered' | 'expired' | 'concurrency_limit' | 'parent_never_created'

/** The error type of the failure ack by which a worker says it stopped a job whose cancel it was told of. */
export const cancelledErrorType = 'Cancelled'

/** What a job is created with: on the `create_job` command, and as decided on its `job_created`. */
export interface JobDefinition {
  job_id: string
  project_id: string
  job_type: string
  queue: string
  payload: Record<string, unknown>
  run_at: string | null
  max_attempts: number
  timeout_seconds: number
  tags: Record<string, string> | null
  parent_job_id: string | null
  idempotency_key: string | null
  /** Absent or 0: no offset (and none is recorded on the `job_created`). */
  priority?: number
  /** Seconds the job may wait to be claimed once due (domain/job-options.ts, ttlSecondsRange); absent or null: no limit. */
  ttl_seconds?: number | null
  /** The key per-key limits may count it by (issue 29); absent or null: none. */
  concurrency_key?: string | null
  /** Its parents (issue 30): it runs once each has succeeded; absent or null: none (or `parent_job_id`'s one). */
  depends_on?: string[] | null
  /** With `depends_on`: what a parent's dead-letter or cancel does to it (default `cancel`). */
  on_parent_failure?: ParentFailureRule | null
}

/** Why a job was handed back other than by a worker's plain release (see job_released). */
export type ReleaseReason = 'rate_limited' | 'limit_refused'

export type JobEvent =
  | {
      type: 'job_created'
      data: JobDefinition & {
        state: 'pending' | 'scheduled'
        waiting_for_parent: boolean
        /** With `depends_on` (issue 30): the parents that had yet to succeed when it was attached to them. */
        waiting_for?: string[]
        /** A job of a graph batch (issue 30): its children of the batch, created before it (leaves first). */
        children?: string[]
        /** Absent from events written before trace context was kept. */
        traceparent?: string | null
        created_at: string
      }
    }
  | { type: 'job_child_attached'; data: { child_job_id: string; attached_at: string } }
  | { type: 'job_promoted'; data: { promoted_at: string } }
  | { type: 'job_activated'; data: { parent_job_id: string; state: 'pending' | 'scheduled'; activated_at: string } }
  // A parent of a graph job ended (issue 30): `waiting` parents are left; `dropped` under
  // `on_parent_failure: "ignore"`. The last one settled comes with the job_activated.
  | {
      type: 'job_parent_settled'
      data: { parent_job_id: string; outcome: ParentOutcome; dropped: boolean; waiting: number; of: number; settled_at: string }
    }
  // `gates`: the flow gates the attempt holds (issue 29); `limit_wait_ms`: how long the job waited
  // for them since it was first refused. Both only where there were any.
  | {
      type: 'job_claimed'
      data: { worker_id: string; attempt: number; started_at: string; gates?: string[]; hold?: string; limit_wait_ms?: number }
    }
  // A claim found the job's key (or queue) at its limit, out of tokens or held (issue 29): recorded once per wait.
  | { type: 'job_limit_waiting'; data: LimitWait }
  // On the job's progress subject (domain/job-progress.ts); `attempt` is absent from the reports that
  // logs written before it kept on the job's own subject.
  | { type: 'job_progressed'; data: { worker_id: string; attempt?: number; progress: number; reported_at: string } }
  | {
      type: 'job_succeeded'
      /** `result`: what the worker's handler returned; absent when it returned nothing (and on events written before results were kept). */
      data: { worker_id: string; attempt: number; duration_ms: number; completed_at: string; result?: unknown }
    }
  | {
      type: 'job_attempt_failed'
      data: {
        worker_id: string | null
        attempt: number
        error: JobError
        duration_ms: number
        retry_at: string
        failed_at: string
        reaped: boolean
      }
    }
  | {
      type: 'job_dead_lettered'
      data: {
        worker_id: string | null
        attempt: number
        error: JobError
        duration_ms: number
        completed_at: string
        reaped: boolean
      }
    }
  // `previous_state` says which state the job left, so a consumer of the log (the metrics
  // rollups, an analytics pipeline) can count transitions without holding every job's state.
  // From `processing` (a cancel of the running attempt, issue 28) it also names the attempt and
  // whether its worker acknowledged the cancel (false: the grace period ran out, or the worker was lost).
  | {
      type: 'job_cancelled'
      data: {
        reason: CancelReason
        previous_state: 'pending' | 'scheduled' | 'processing'
        cancelled_at: string
        attempt?: number
        acknowledged?: boolean
        /** The bulk operation (`op_…`, domain/job-bulk.ts) that cancelled it; absent otherwise. */
        operation_id?: string
      }
    }
  | { type: 'job_cancel_requested'; data: { worker_id: string | null; attempt: number; requested_at: string } }
  // The worker handed the attempt back: the next claim gets the same attempt number.
  | {
      type: 'job_released'
      /**
       * `reason` `rate_limited`: the worker's ack said so (issue 29); `limit_refused`: the claim was
       * appended beside its flow gate's take and the gate turned out full after all (another process
       * took the last slot), so the claim was handed back before any worker saw the job; absent for
       * a worker's plain release.
       */
      data: {
        worker_id: string
        attempt: number
        state: 'pending' | 'scheduled'
        run_at: string | null
        released_at: string
        reason?: ReleaseReason
      }
    }
  | {
      type: 'job_retried'
      /** `operation_id`: the bulk operation (`op_…`, domain/job-bulk.ts) that retried it; absent otherwise. */
      data: { attempt: number; max_attempts: number; previous_state: 'failed' | 'dead_letter'; retried_at: string; operation_id?: string }
    }
  // `operation_id`: the bulk operation that changed it, when one did.
  | {
      type: 'job_priority_changed'
      data: { priority: number; previous_priority: number; state: 'pending' | 'scheduled'; changed_at: string; operation_id?: string }
    }
  // A create with `dedup: {on_duplicate: "replace_payload"}` met this waiting job (issue 29): from
  // here on its payload is this one (the state's `payload_seq` names the message).
  // With `run_at` (a debounce's, issue 29): the scheduled job's due time moved too.
  | {
      type: 'job_payload_replaced'
      data: { payload: Record<string, unknown>; state: 'pending' | 'scheduled'; replaced_at: string; run_at?: string }
    }

export type JobEventType = JobEvent['type']

export type JobCommand =
  | {
      type: 'create_job'
      data: JobDefinition & {
        /** Decided on the parent first: true when the parent has yet to succeed (with `depends_on`: when `waiting_for` is not empty). */
        waits_for_parent: boolean
        /** With `depends_on` (issue 30), decided on the parents first: those that had yet to succeed. */
        waiting_for?: string[]
        /** A job of a graph batch (issue 30): its children of the batch, which exist already (job-graph.ts). */
        children?: string[]
        /** As the caller sent it, if at all; an invalid one is dropped, not refused (domain/trace-context.ts). */
        traceparent?: string | null
      }
      meta: CommandMeta
    }
  | { type: 'attach_child'; data: { child_job_id: string }; meta: CommandMeta }
  | { type: 'promote_job'; data: Record<string, never>; meta: CommandMeta }
  | { type: 'activate_child'; data: { parent_job_id: string }; meta: CommandMeta }
  /**
   * `parent_never_created`: the scheduler's orphan sweep names a parent of the job's graph batch
   * that the log does not hold; it cancels the job whatever its `on_parent_failure` (neverCreatedStep).
   */
  | { type: 'cancel_by_parent'; data: { reason: Exclude<CancelReason, 'requested' | 'expired'>; parent_job_id?: string }; meta: CommandMeta }
  /** Several parents of a graph job ended (issue 30): their settlements decided together, in order, as one append. */
  | { type: 'settle_parents'; data: { parents: Array<{ parent_job_id: string; outcome: ParentOutcome }> }; meta: CommandMeta }
  /**
   * `gates`: the flow gates the claimer took for the attempt (issue 29), by aggregate id; `hold`:
   * the claim's hold in them; `attempt`: the attempt they were taken for.
   */
  | { type: 'claim_job'; data: { worker_id: string; gates?: string[]; hold?: string; attempt?: number }; meta: CommandMeta }
  /** A claim was refused a gate: the waiting job records why, once per wait. */
  | { type: 'note_limit_wait'; data: { reason: LimitWait['reason']; key: string | null }; meta: CommandMeta }
  | {
      type: 'ack_job'
      data: {
        worker_id: string
        status: AckStatus
        duration_ms: number | null
        error: JobError | null
        /** What the handler returned (any JSON; absent or null: nothing), kept on a success only. */
        result?: unknown
        /** The project's retry settings (absent: the spec's), of which the job's queue picks its own. */
        retry_policies?: RetryPolicies
      }
      meta: CommandMeta
    }
  | { type: 'reap_job'; data: { attempt: number; error: JobError; retry_policies?: RetryPolicies }; meta: CommandMeta }
  /**
   * `include_running`: a processing job is asked to stop (job_cancel_requested) instead of refused.
   * `operation_id`: the bulk operation asking, recorded on the event.
   */
  | { type: 'cancel_job'; data: { include_running?: boolean; operation_id?: string; reason?: 'concurrency_limit' }; meta: CommandMeta }
  /** The end of a cancel's grace period: the attempt named ends cancelled if it is still running. */
  | { type: 'expire_cancel'; data: { attempt: number }; meta: CommandMeta }
  /** `run_at`: when the job may be claimed again (null: at once). */
  | { type: 'release_job'; data: { worker_id: string; run_at: string | null; reason?: ReleaseReason }; meta: CommandMeta }
  /** `operation_id`: the bulk operation asking, recorded on the event. */
  | { type: 'retry_job'; data: { operation_id?: string }; meta: CommandMeta }
  /** A waiting job's claim order offset; `operation_id`: the bulk operation asking, if any. */
  | { type: 'set_priority'; data: { priority: number; operation_id?: string }; meta: CommandMeta }
  /** The expiry sweep's: a job still waiting past its `expires_at` ends cancelled (reason `expired`). */
  | { type: 'expire_job'; data: Record<string, never>; meta: CommandMeta }
  /**
   * A dedup create's newer payload for a waiting job (InvalidState once it runs or has ended);
   * `run_at`, a debounce's: the scheduled job's new due time (InvalidState unless it is scheduled
   * and not waiting for its parent).
   */
  | { type: 'replace_payload'; data: { payload: Record<string, unknown>; run_at?: string }; meta: CommandMeta }

function addMs(iso: string, ms: number): string {
  return new Date(Date.parse(iso) + ms).toISOString()
}

function isDue(runAt: string | null, now: string): boolean {
  return runAt === null || Date.parse(runAt) <= Date.parse(now)
}

/**
 * A job's claim order offset, in seconds: an integer from −600 to 600, higher sooner. Claims take
 * due jobs by `due time − priority` (`claimRankAt`), so a priority moves a job ahead of jobs due
 * up to that many seconds before it, never ahead of its own due time, and an old low-priority job
 * still overtakes newer high-priority ones once it has waited 2 × 600 s longer.
 */
export const priorityRange = { min: -600, max: 600 } as const

export function isPriority(value: number): boolean {
  return Number.isInteger(value) && value >= priorityRange.min && value <= priorityRange.max
}

/** The job's priority, 0 when it has none. */
export function priorityOf(job: Pick<Job, 'priority'>): number {
  return job.priority ?? 0
}

/** When the job is due, in ms since the epoch: its `run_at`, or its creation when it has none (the read model's `available_at`). */
export function dueAtMs(job: Pick<Job, 'run_at' | 'created_at'>): number {
  return Date.parse(job.run_at ?? job.created_at)
}

/** Where the job stands in its queue's claim order, in ms since the epoch: due time − priority (the read model's `claim_rank_at`). */
export function claimRankAtMs(job: Pick<Job, 'run_at' | 'created_at' | 'priority'>): number {
  return dueAtMs(job) - priorityOf(job) * 1000
}

/**
 * True when the job's current wait has run out at `now` (it has a ttl, and was not claimed
 * within it of becoming due). Such a job is never claimed, even before the sweep records it.
 */
export function isExpired(job: Pick<Job, 'expires_at'>, now: string): boolean {
  return job.expires_at !== undefined && Date.parse(job.expires_at) <= Date.parse(now)
}

/** True when a worker may claim the job at `now`. */
export function isClaimable(job: Job, now: string): boolean {
  return job.state === 'pending' && isDue(job.run_at, now) && !isExpired(job, now)
}

/** True when the scheduler should move a scheduled job to pending at `now`. */
export function isDueForPromotion(job: Job, now: string): boolean {
  return job.state === 'scheduled' && !job.waiting_for_parent && isDue(job.run_at, now)
}

function elapsedMs(from: string | null, to: string): number {
  if (from === null) return 0
  return Math.max(0, Date.parse(to) - Date.parse(from))
}

function requireJob(state: JobAggregate): Job {
  if (state === null) throw new JobNotFound()
  return state
}

function requireProcessingBy(job: Job, workerId: string, what: string): void {
  if (job.state !== 'processing') throw new InvalidState(`cannot ${what} a job that is ${job.state}`)
  if (job.worker_id !== workerId) {
    throw new WorkerMismatch(`job ${job.id} is held by another worker, not ${workerId}`)
  }
}

/**
 * What a heartbeat may do: only the worker holding a processing job keeps it alive. Heartbeats
 * are liveness, not history, so this is a check and not a command.
 */
export function assertHeartbeatAllowed(job: Job, workerId: string): void {
  requireProcessingBy(job, workerId, 'heartbeat')
}

/**
 * The terms of the reaper's rule (isAttemptStale). The job list's query of reaper candidates
 * (projections/job-list.ts, `staleProcessing`) reads them too, so the two cannot drift apart.
 */
export const staleAttemptRule = { heartbeatsPerTimeout: 3, heartbeatFloorSeconds: 10, missedHeartbeats: 2 } as const

/**
 * The reaper's rule. A worker is expected to heartbeat every max(timeout/3, 10 s). An attempt
 * whose worker has heartbeated is stale after two missed heartbeats (never longer than the
 * timeout); one that never heartbeated gets its whole timeout. `graceMs` is added to both so a
 * slow network or a GC pause does not cost a worker its job.
 */
export function isAttemptStale(
  job: Pick<Job, 'state' | 'started_at' | 'timeout_seconds'>,
  lastHeartbeatAt: string | null,
  now: string,
  graceMs: number,
): boolean {
  if (job.state !== 'processing' || job.started_at === null) return false
  const { heartbeatsPerTimeout, heartbeatFloorSeconds, missedHeartbeats } = staleAttemptRule
  const timeoutMs = job.timeout_seconds * 1000
  const heartbeatIntervalMs = Math.max(timeoutMs / heartbeatsPerTimeout, heartbeatFloorSeconds * 1000)
  const lastSeen = Math.max(Date.parse(job.started_at), lastHeartbeatAt === null ? 0 : Date.parse(lastHeartbeatAt))
  const windowMs = lastHeartbeatAt === null ? timeoutMs : Math.min(timeoutMs, missedHeartbeats * heartbeatIntervalMs)
  return Date.parse(now) - lastSeen > windowMs + graceMs
}

export type CascadeStep = { kind: 'activate' } | { kind: 'cancel'; reason: Exclude<CancelReason, 'requested' | 'expired'> }

/**
 * A graph batch is created whole or not at all, so a job of it whose parent was never created
 * takes the rest of the batch waiting on it with it, whatever their `on_parent_failure`: under
 * `run` or `ignore` they would otherwise run as part of a graph that does not exist.
 */
const neverCreatedStep: CascadeStep = { kind: 'cancel', reason: 'parent_never_created' }

/** What a parent ending in each state does to the continuations still waiting on it. */
const cascadeByEndState: Partial<Record<JobState, CascadeStep>> = {
  succeeded: { kind: 'activate' },
  dead_letter: { kind: 'cancel', reason: 'parent_dead_lettered' },
  cancelled: { kind: 'cancel', reason: 'parent_cancelled' },
}

/** A running attempt ends cancelled: acknowledged by its worker or not. */
function cancelledAttempt(job: Job, now: string, acknowledged: boolean): JobEvent {
  return { type: 'job_cancelled', data: { reason: 'requested', previous_state: 'processing', cancelled_at: now, attempt: job.attempt, acknowledged } }
}

/** True when a cancel of the job's running attempt was asked for. */
export function isCancelRequested(job: Job): boolean {
  return job.state === 'processing' && job.cancel_requested_at !== undefined
}

const endStateOf: Partial<Record<JobEventType, JobState>> = {
  job_succeeded: 'succeeded',
  job_dead_lettered: 'dead_letter',
  job_cancelled: 'cancelled',
}

/**
 * What a parent's current state means for continuations still waiting on it: the view of the
 * scheduler's sweep, which finishes cascades a crash interrupted.
 */
export function cascadeOfState(job: Job): CascadeStep | null {
  if (job.state === 'cancelled' && job.cancel_reason === 'parent_never_created') return neverCreatedStep
  return cascadeByEndState[job.state] ?? null
}

/** What a terminal move of a parent does to its continuations, if anything. */
export function cascadeOf(event: JobEvent): CascadeStep | null {
  if (event.type === 'job_cancelled' && event.data.reason === 'parent_never_created') return neverCreatedStep
  const endState = endStateOf[event.type]
  return endState === undefined ? null : (cascadeByEndState[endState] ?? null)
}

/**
 * A parent of a graph job ended in `outcome`: it leaves the job's wait (a parent it no longer
 * waits for is a no-op: a repeat, or a second process's cascade), and the last one activates the
 * job. Each is an append at the job's expected sequence, so two parents ending at once settle one
 * after the other and the job is activated exactly once.
 */
function parentSettled(job: Job, parentId: string, outcome: ParentOutcome, now: string): JobEvent[] {
  const waitingFor = job.waiting_for ?? []
  if (!waitingFor.includes(parentId)) return []
  const waiting = waitingFor.length - 1
  const dropped = outcome !== 'succeeded' && job.on_parent_failure === 'ignore'
  const of = (job.depends_on?.length ?? 0) - (dropped ? 1 : 0)
  const settled: JobEvent = { type: 'job_parent_settled', data: { parent_job_id: parentId, outcome, dropped, waiting, of, settled_at: now } }
  if (waiting > 0) return [settled]
  const activated: JobEvent = {
    type: 'job_activated',
    data: { parent_job_id: parentId, state: isDue(job.run_at, now) ? 'pending' : 'scheduled', activated_at: now },
  }
  return [settled, activated]
}

function decide(command: JobCommand, state: JobAggregate): JobEvent[] {
  const { now } = command.meta
  switch (command.type) {
    case 'create_job': {
      if (state !== null) throw new InvalidState(`job ${state.id} already exists`)
      const d = command.data
      const isScheduled = d.waits_for_parent || !isDue(d.run_at, now)
      return [
        {
          type: 'job_created',
          data: {
            job_id: d.job_id,
            project_id: d.project_id,
            job_type: d.job_type,
            queue: d.queue,
            payload: d.payload,
            state: isScheduled ? 'scheduled' : 'pending',
            run_at: d.run_at,
            max_attempts: d.max_attempts,
            timeout_seconds: d.timeout_seconds,
            tags: d.tags,
            parent_job_id: d.parent_job_id,
            waiting_for_parent: d.waits_for_parent,
            idempotency_key: d.idempotency_key,
            traceparent: toTraceparent(d.traceparent),
            ...(d.priority === undefined || d.priority === 0 ? {} : { priority: d.priority }),
            // Only when given: a job without a ttl is created as before expiry existed.
            ...(d.ttl_seconds === undefined || d.ttl_seconds === null ? {} : { ttl_seconds: d.ttl_seconds }),
            ...(d.concurrency_key === undefined || d.concurrency_key === null ? {} : { concurrency_key: d.concurrency_key }),
            // Only for a job of a graph, so every other job is created as before graphs existed.
            ...(d.depends_on === undefined || d.depends_on === null
              ? {}
              : { depends_on: d.depends_on, waiting_for: d.waiting_for ?? [], on_parent_failure: d.on_parent_failure ?? 'cancel' }),
            ...(d.children === undefined || d.children.length === 0 ? {} : { children: d.children }),
            created_at: now,
          },
        },
      ]
    }
    case 'attach_child': {
      const parent = requireJob(state)
      if (parent.state === 'succeeded') return []
      if (parent.state === 'cancelled' || parent.state === 'dead_letter' || parent.state === 'failed') {
        throw new ParentTerminal(parent.id, parent.state)
      }
      if (parent.children.includes(command.data.child_job_id)) return []
      return [{ type: 'job_child_attached', data: { child_job_id: command.data.child_job_id, attached_at: now } }]
    }
    case 'promote_job': {
      // An expired job is left to the expiry sweep, which cancels it instead.
      if (state === null || !isDueForPromotion(state, now) || isExpired(state, now)) return []
      return [{ type: 'job_promoted', data: { promoted_at: now } }]
    }
    case 'activate_child': {
      if (state === null || state.state !== 'scheduled' || !state.waiting_for_parent) return []
      if (state.waiting_for !== undefined) return parentSettled(state, command.data.parent_job_id, 'succeeded', now)
      return [
        {
          type: 'job_activated',
          data: {
            parent_job_id: command.data.parent_job_id,
            state: isDue(state.run_at, now) ? 'pending' : 'scheduled',
            activated_at: now,
          },
        },
      ]
    }
    case 'settle_parents': {
      // Each in turn on the state the previous ones left; a settled or cancelled job takes no more.
      const events: JobEvent[] = []
      let job = state
      for (const { parent_job_id: parentId, outcome } of command.data.parents) {
        if (job === null || job.state !== 'scheduled' || !job.waiting_for_parent || !(job.waiting_for ?? []).includes(parentId)) continue
        const decided: JobEvent[] =
          outcome !== 'succeeded' && job.on_parent_failure === 'cancel'
            ? [
                {
                  type: 'job_cancelled',
                  data: {
                    reason: outcome === 'cancelled' ? 'parent_cancelled' : 'parent_dead_lettered',
                    previous_state: 'scheduled',
                    cancelled_at: now,
                  },
                },
              ]
            : parentSettled(job, parentId, outcome, now)
        for (const e of decided) {
          events.push(e)
          job = evolve(job, e)
        }
      }
      return events
    }
    case 'cancel_by_parent': {
      if (state === null || state.state !== 'scheduled' || !state.waiting_for_parent) return []
      const parentId = command.data.parent_job_id
      if (state.waiting_for !== undefined && parentId !== undefined) {
        if (!state.waiting_for.includes(parentId)) return []
        if (state.on_parent_failure !== 'cancel' && command.data.reason !== 'parent_never_created') {
          return parentSettled(state, parentId, command.data.reason === 'parent_cancelled' ? 'cancelled' : 'dead_letter', now)
        }
      }
      return [{ type: 'job_cancelled', data: { reason: command.data.reason, previous_state: 'scheduled', cancelled_at: now } }]
    }
    case 'claim_job': {
      const job = requireJob(state)
      if (!isClaimable(job, now)) throw new InvalidState(`job ${job.id} is ${job.state} and cannot be claimed now`)
      const gates = command.data.gates ?? []
      const { hold } = command.data
      // Slots taken for one attempt never cover another: a take names its attempt, and the next
      // take counts a slot whose job has moved past that attempt as ended (domain/flow-gate.ts).
      if (command.data.attempt !== undefined && command.data.attempt !== job.attempt + 1) {
        throw new InvalidState(`job ${job.id}'s gates were taken for attempt ${command.data.attempt}, but its next attempt is ${job.attempt + 1}`)
      }
      const held = gates.length === 0 ? {} : hold === undefined ? { gates } : { gates, hold }
      const waited = job.limit_waiting === undefined ? {} : { limit_wait_ms: elapsedMs(job.limit_waiting.since, now) }
      return [
        {
          type: 'job_claimed',
          data: { worker_id: command.data.worker_id, attempt: job.attempt + 1, started_at: now, ...held, ...waited },
        },
      ]
    }
    case 'note_limit_wait': {
      const job = requireJob(state)
      if (job.state !== 'pending' || job.limit_waiting !== undefined) return []
      return [{ type: 'job_limit_waiting', data: { reason: command.data.reason, key: command.data.key, since: now } }]
    }
    case 'ack_job': {
      const job = requireJob(state)
      requireProcessingBy(job, command.data.worker_id, 'acknowledge')
      const durationMs = command.data.duration_ms ?? elapsedMs(job.started_at, now)
      // A failure after a cancel was asked for is the worker stopping: the job ends, never retried.
      // A success still counts: the work was done before the worker heard of the cancel.
      if (command.data.status === 'failed' && isCancelRequested(job)) return [cancelledAttempt(job, now, true)]
      if (command.data.status === 'succeeded') {
        return [
          {
            type: 'job_succeeded',
            data: {
              worker_id: command.data.worker_id,
              attempt: job.attempt,
              duration_ms: durationMs,
              completed_at: now,
              ...(command.data.result === undefined || command.data.result === null ? {} : { result: command.data.result }),
            },
          },
        ]
      }
      const error = command.data.error ?? { type: 'Error', message: 'the worker reported a failure', stack_trace: '' }
      return [failedAttempt(job, command.data.worker_id, error, durationMs, now, retryAt(job, command), false)]
    }
    case 'reap_job': {
      if (state === null || state.state !== 'processing' || state.attempt !== command.data.attempt) return []
      if (isCancelRequested(state)) return [cancelledAttempt(state, now, false)]
      return [failedAttempt(state, state.worker_id, command.data.error, elapsedMs(state.started_at, now), now, retryAt(state, command), true)]
    }
    case 'cancel_job': {
      const job = requireJob(state)
      if (job.state === 'processing' && command.data.include_running === true) {
        if (isCancelRequested(job)) return []
        return [{ type: 'job_cancel_requested', data: { worker_id: job.worker_id, attempt: job.attempt, requested_at: now } }]
      }
      if (job.state !== 'pending' && job.state !== 'scheduled') {
        throw new InvalidState(`job ${job.id} is ${job.state}; only pending or scheduled jobs can be cancelled`)
      }
      const reason = command.data.reason ?? 'requested'
      return [{ type: 'job_cancelled', data: { reason, previous_state: job.state, cancelled_at: now, ...byOperation(command.data) } }]
    }
    case 'expire_cancel': {
      if (state === null || !isCancelRequested(state) || state.attempt !== command.data.attempt) return []
      return [cancelledAttempt(state, now, false)]
    }
    case 'release_job': {
      const job = requireJob(state)
      requireProcessingBy(job, command.data.worker_id, 'release')
      // Handing back a job whose cancel was asked for is the worker stopping it.
      if (isCancelRequested(job)) return [cancelledAttempt(job, now, true)]
      const runAt = command.data.run_at
      // A rate-limited job waits pending, as a retry's backoff does; a release to later is scheduled.
      const { reason } = command.data
      const rateLimited = reason === 'rate_limited'
      return [
        {
          type: 'job_released',
          data: {
            worker_id: command.data.worker_id,
            attempt: job.attempt,
            state: rateLimited || isDue(runAt, now) ? 'pending' : 'scheduled',
            run_at: runAt,
            released_at: now,
            ...(reason === undefined ? {} : { reason }),
          },
        },
      ]
    }
    case 'set_priority': {
      const job = requireJob(state)
      if (!isPriority(command.data.priority))
        throw new InvalidPriority(`priority must be an integer from ${priorityRange.min} to ${priorityRange.max}`)
      if (job.state !== 'pending' && job.state !== 'scheduled') {
        throw new InvalidState(`job ${job.id} is ${job.state}; only pending or scheduled jobs can change priority`)
      }
      if (job.priority === command.data.priority) return []
      const { operation_id: operationId } = command.data
      return [
        {
          type: 'job_priority_changed',
          data: {
            priority: command.data.priority,
            previous_priority: priorityOf(job),
            state: job.state,
            changed_at: now,
            ...(operationId === undefined ? {} : { operation_id: operationId }),
          },
        },
      ]
    }
    case 'replace_payload': {
      const job = requireJob(state)
      if (job.state !== 'pending' && job.state !== 'scheduled') {
        throw new InvalidState(`job ${job.id} is ${job.state}; only a pending or scheduled job's payload can be replaced`)
      }
      const { payload, run_at: runAt } = command.data
      if (runAt === undefined) return [{ type: 'job_payload_replaced', data: { payload, state: job.state, replaced_at: now } }]
      if (job.state !== 'scheduled' || job.waiting_for_parent) {
        throw new InvalidState(`job ${job.id} is ${job.state}; only a scheduled job's due time can move`)
      }
      return [{ type: 'job_payload_replaced', data: { payload, state: job.state, replaced_at: now, run_at: runAt } }]
    }
    case 'expire_job': {
      if (state === null || !isWaitingToExpire(state) || !isExpired(state, now)) return []
      return [{ type: 'job_cancelled', data: { reason: 'expired', previous_state: state.state as 'pending' | 'scheduled', cancelled_at: now } }]
    }
    case 'retry_job': {
      const job = requireJob(state)
      if (job.state !== 'failed' && job.state !== 'dead_letter') {
        throw new InvalidState(`job ${job.id} is ${job.state}; only failed or dead-lettered jobs can be retried`)
      }
      return [
        {
          type: 'job_retried',
          data: {
            attempt: job.attempt,
            max_attempts: job.attempt >= job.max_attempts ? job.attempt + 1 : job.max_attempts,
            previous_state: job.state,
            retried_at: now,
            ...byOperation(command.data),
          },
        },
      ]
    }
  }
}

/** A job whose wait for a claim can run out: due or to be due, with a deadline, not waiting for its parent. */
function isWaitingToExpire(job: Job): boolean {
  return (job.state === 'pending' || job.state === 'scheduled') && !job.waiting_for_parent && job.expires_at !== undefined
}

/**
 * The state with the deadline of a wait that starts now: the job is due at `runAt` (null, or
 * before `now`: at once) and must be claimed within its ttl of that. Each time a job becomes due
 * again (a retry's backoff, a release, a retry by hand) its wait starts over. Without a ttl, the
 * state as it was.
 */
function waitingFrom(job: Job, runAt: string | null, now: string): Job {
  if (job.ttl_seconds === undefined) return job
  const dueAt = Math.max(runAt === null ? 0 : Date.parse(runAt), Date.parse(now))
  return { ...job, expires_at: new Date(dueAt + job.ttl_seconds * 1000).toISOString() }
}

/** The state without a wait's deadline (the job runs, or waits for its parent). */
function notWaiting(job: Job): Job {
  if (job.expires_at === undefined) return job
  const { expires_at: _deadline, ...rest } = job
  return rest
}

/** The bulk operation a command names, for its event; nothing when it names none, so other events keep their shape. */
function byOperation(data: { operation_id?: string }): { operation_id?: string } {
  return data.operation_id === undefined ? {} : { operation_id: data.operation_id }
}

/** When the failed attempt's job is tried again, under the retry policy of its queue. */
function retryAt(job: Job, command: Extract<JobCommand, { type: 'ack_job' | 'reap_job' }>): string {
  const policy = retryPolicyFor(command.data.retry_policies, job.queue)
  return addMs(command.meta.now, retryDelayMs(job.attempt, command.meta.random ?? 0, policy))
}

function failedAttempt(
  job: Job,
  workerId: string | null,
  error: JobError,
  durationMs: number,
  now: string,
  retryAt: string,
  reaped: boolean,
): JobEvent {
  if (job.attempt < job.max_attempts) {
    return {
      type: 'job_attempt_failed',
      data: {
        worker_id: workerId,
        attempt: job.attempt,
        error,
        duration_ms: durationMs,
        retry_at: retryAt,
        failed_at: now,
        reaped,
      },
    }
  }
  return {
    type: 'job_dead_lettered',
    data: { worker_id: workerId, attempt: job.attempt, error, duration_ms: durationMs, completed_at: now, reaped },
  }
}

/** `error_seq` of the message whose own event records the error: its sequence is not known before it is stored. */
const recordedHere = 0

/** The references to "this message" (0) of a state stored at `seq`, made its sequence. */
function placedAt(job: Job, seq: number): Job {
  const errorHere = job.error_seq === recordedHere
  const payloadHere = job.payload_seq === recordedHere
  if (!errorHere && !payloadHere) return job
  return { ...job, ...(errorHere ? { error_seq: seq } : {}), ...(payloadHere ? { payload_seq: seq } : {}) }
}

/** The state without an error carried inline from an older log: a new error, or none, replaces it. */
function withoutInlineError(job: Job): Job {
  if (!('error' in job)) return job
  const { error: _inline, ...rest } = job
  return rest
}

/** The state once an attempt ends the job: it succeeded, or failed for the last time (`errorSeq`: the error is in this message). */
function ended(job: Job, state: 'succeeded' | 'dead_letter', data: { completed_at: string; duration_ms: number }, errorSeq: number | null): Job {
  return {
    ...withoutInlineError(job),
    state,
    completed_at: data.completed_at,
    duration_ms: data.duration_ms,
    error_seq: errorSeq,
    updated_at: data.completed_at,
  }
}

/** What a retry by hand clears of the attempts before: who ran the last, when, how long, how far it got, how it failed. */
const noAttemptTraces = { started_at: null, completed_at: null, duration_ms: null, progress: null, error_seq: null, worker_id: null } as const

function evolve(state: JobAggregate, event: JobEvent): JobAggregate {
  if (event.type === 'job_created') {
    const d = event.data
    const created: Job = {
      id: d.job_id,
      project_id: d.project_id,
      state: d.state,
      job_type: d.job_type,
      queue: d.queue,
      created_at: d.created_at,
      run_at: d.run_at,
      started_at: null,
      completed_at: null,
      attempt: 0,
      max_attempts: d.max_attempts,
      timeout_seconds: d.timeout_seconds,
      progress: null,
      duration_ms: null,
      error_seq: null,
      tags: d.tags,
      parent_job_id: d.parent_job_id,
      waiting_for_parent: d.waiting_for_parent,
      children: d.children ?? [],
      worker_id: null,
      idempotency_key: d.idempotency_key,
      traceparent: d.traceparent ?? null,
      updated_at: d.created_at,
      ...(d.priority === undefined ? {} : { priority: d.priority }),
      ...(d.concurrency_key === undefined || d.concurrency_key === null ? {} : { concurrency_key: d.concurrency_key }),
      ...(d.depends_on === undefined || d.depends_on === null
        ? {}
        : { depends_on: d.depends_on, waiting_for: d.waiting_for ?? [], on_parent_failure: d.on_parent_failure ?? 'cancel' }),
    }
    if (d.ttl_seconds === undefined || d.ttl_seconds === null) return created
    const withTtl = { ...created, ttl_seconds: d.ttl_seconds }
    // A continuation's wait starts when its parent activates it.
    return d.waiting_for_parent ? withTtl : waitingFrom(withTtl, d.run_at, d.created_at)
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'job_created')
  switch (event.type) {
    case 'job_child_attached':
      return { ...state, children: [...state.children, event.data.child_job_id], updated_at: event.data.attached_at }
    case 'job_promoted':
      return { ...state, state: 'pending', updated_at: event.data.promoted_at }
    case 'job_parent_settled': {
      const { parent_job_id: parentId, dropped, settled_at: at } = event.data
      return {
        ...state,
        waiting_for: (state.waiting_for ?? []).filter((id) => id !== parentId),
        ...(dropped ? { depends_on: (state.depends_on ?? []).filter((id) => id !== parentId) } : {}),
        updated_at: at,
      }
    }
    case 'job_activated':
      return waitingFrom(
        { ...state, state: event.data.state, waiting_for_parent: false, updated_at: event.data.activated_at },
        state.run_at,
        event.data.activated_at,
      )
    case 'job_claimed': {
      const { gates: _held, gate_hold: _hold, limit_waiting: _wait, ...unlimited } = notWaiting(state)
      return {
        ...unlimited,
        ...(event.data.gates === undefined ? {} : { gates: event.data.gates }),
        ...(event.data.hold === undefined ? {} : { gate_hold: event.data.hold }),
        state: 'processing',
        attempt: event.data.attempt,
        worker_id: event.data.worker_id,
        started_at: event.data.started_at,
        completed_at: null,
        duration_ms: null,
        // Each attempt reports its own progress from the start.
        progress: null,
        updated_at: event.data.started_at,
      }
    }
    case 'job_limit_waiting':
      return { ...state, limit_waiting: event.data }
    case 'job_progressed':
      return { ...state, progress: event.data.progress, updated_at: event.data.reported_at }
    case 'job_succeeded':
      return ended(state, 'succeeded', event.data, null)
    case 'job_attempt_failed':
      return waitingFrom(
        {
          ...withoutInlineError(state),
          state: 'pending',
          run_at: event.data.retry_at,
          worker_id: null,
          duration_ms: event.data.duration_ms,
          error_seq: recordedHere,
          updated_at: event.data.failed_at,
        },
        event.data.retry_at,
        event.data.failed_at,
      )
    case 'job_dead_lettered':
      return ended(state, 'dead_letter', event.data, recordedHere)
    case 'job_cancelled': {
      const cancelled: Job = { ...state, state: 'cancelled', waiting_for_parent: false, updated_at: event.data.cancelled_at }
      // An expired job keeps the deadline it missed; any other cancel ends the wait.
      if (event.data.reason === 'concurrency_limit' || event.data.reason === 'parent_never_created') {
        // Both shown with the job; `parent_never_created` also lets the sweep, re-running an
        // interrupted cascade from state, cancel the job's waiting children as the event did.
        return { ...notWaiting(cancelled), cancel_reason: event.data.reason }
      }
      return event.data.reason === 'expired' ? { ...cancelled, cancel_reason: 'expired' } : notWaiting(cancelled)
    }
    case 'job_cancel_requested':
      return { ...state, cancel_requested_at: event.data.requested_at, updated_at: event.data.requested_at }
    case 'job_released':
      // The attempt is not spent: the next claim numbers itself as this one was.
      return waitingFrom(
        {
          ...state,
          state: event.data.state,
          run_at: event.data.run_at,
          attempt: event.data.attempt - 1,
          started_at: null,
          duration_ms: null,
          progress: null,
          worker_id: null,
          updated_at: event.data.released_at,
        },
        event.data.run_at,
        event.data.released_at,
      )
    case 'job_retried': {
      return waitingFrom(
        {
          ...withoutInlineError(state),
          state: 'pending',
          run_at: null,
          ...noAttemptTraces,
          max_attempts: event.data.max_attempts,
          updated_at: event.data.retried_at,
        },
        null,
        event.data.retried_at,
      )
    }
    case 'job_priority_changed':
      return { ...state, priority: event.data.priority, updated_at: event.data.changed_at }
    case 'job_payload_replaced': {
      const replaced = { ...state, payload_seq: recordedHere, updated_at: event.data.replaced_at }
      const runAt = event.data.run_at
      return runAt === undefined ? replaced : waitingFrom({ ...replaced, run_at: runAt }, runAt, event.data.replaced_at)
    }
  }
}

export const jobDecider: Decider<JobCommand, JobEvent, JobAggregate> = {
  initialState: null,
  decide,
  evolve,
}

/** The result a message's events recorded (a `job_succeeded` with one), else null. */
export function resultOf(events: readonly { type: string; data: unknown }[]): unknown {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!
    if (e.type === 'job_succeeded') return (e.data as { result?: unknown }).result ?? null
  }
  return null
}

/**
 * The payload a message's events hold, if they hold one: its `job_payload_replaced` (the latest)
 * or its `job_created`. A job's payload is in the message its state's `payload_seq` names, or
 * else in its first.
 */
export function payloadInEvents(events: readonly { type: string; data: unknown }[]): Record<string, unknown> | null {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!
    if (e.type === 'job_payload_replaced' || e.type === 'job_created') return (e.data as { payload: Record<string, unknown> }).payload
  }
  return null
}

/** The error a message's events recorded, if they recorded one. */
export function errorOf(events: readonly { type: string; data: unknown }[]): JobError | null {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!
    if (e.type === 'job_attempt_failed' || e.type === 'job_dead_lettered') return (e.data as { error: JobError }).error
  }
  return null
}

/**
 * A job's state as any message stored it: today's, or one written before `traceparent` was kept
 * (absent) or before payloads, errors and progress were kept once (schema 1, with `payload` and
 * the last error inline).
 */
export type StoredJob = Omit<Job, 'traceparent' | 'waiting_for'> & {
  traceparent?: string | null
  payload?: unknown
  waiting_for?: string[]
  waiting_mask?: string
}

/**
 * The job's state as its messages carry it: a graph job's `waiting_for` as a mask over its
 * `depends_on` (hex, four parents a digit, in their order) rather than the ids again. Every
 * settlement of a 100-parent fan-in is a message of its own, and the ids twice made each about
 * 6 KB, twice what one holds. A `waiting_for` the mask cannot say exactly is kept as it is.
 */
export function toStoredJob(job: Job): StoredJob {
  const { depends_on: parents, waiting_for: waiting } = job
  if (parents === undefined || waiting === undefined || waiting.length === 0) return job
  const mask = waitingMaskOf(parents, waiting)
  if (!sameIds(waitingOfMask(parents, mask), waiting)) return job
  const { waiting_for: _ids, ...rest } = job
  return { ...rest, waiting_mask: mask }
}

function waitingMaskOf(parents: readonly string[], waiting: readonly string[]): string {
  const waits = new Set(waiting)
  let mask = ''
  for (let i = 0; i < parents.length; i += 4) {
    let digit = 0
    for (let bit = 0; bit < 4 && i + bit < parents.length; bit++) if (waits.has(parents[i + bit]!)) digit |= 1 << bit
    mask += digit.toString(16)
  }
  return mask
}

function waitingOfMask(parents: readonly string[], mask: string): string[] {
  return parents.filter((_, i) => ((parseInt(mask[i >> 2] ?? '0', 16) >> (i & 3)) & 1) === 1)
}

const sameIds = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((id, i) => id === b[i])

/**
 * The job's state as a message stored at `seq` carries it, in today's form (`seq` null: a message
 * seen without its sequence, a plain subscription's). The one upgrade of the job's stored state,
 * applied wherever a message is decoded and to a decision's state once it is stored:
 * - `error_seq` 0 (the error is in this very message) becomes `seq`, and so does `payload_seq` 0;
 * - a state written before trace context was kept gets `traceparent` null, as a job created
 *   without the header has;
 * - a state written before payloads, errors and progress were kept once (schema 1) holds the
 *   payload, which is dropped (it is in the job's `job_created`), and the last error inline, which
 *   becomes a reference when this message recorded it and otherwise stays inline (`error`);
 *   its `progress` keeps its meaning (the job's own messages set it then);
 * - a graph job's `waiting_mask` (toStoredJob) becomes the `waiting_for` ids again.
 */
export function upgradeJob(saved: StoredJob, seq: number | null, events: readonly { type: string; data: unknown }[]): Job {
  const stored: Job & { payload?: unknown } = withWaitingIds(saved.traceparent === undefined ? { ...saved, traceparent: null } : saved)
  if (!('payload' in stored)) return seq === null ? stored : placedAt(stored, seq)
  const { payload: _payload, error, ...rest } = stored
  if (error === null || error === undefined) return { ...rest, error_seq: null }
  if (seq !== null && errorOf(events) !== null) return { ...rest, error_seq: seq }
  return { ...rest, error_seq: null, error }
}

/** A stored state's `waiting_mask` read back as the `waiting_for` ids it stands for. */
function withWaitingIds(stored: StoredJob): Job & { payload?: unknown } {
  if (stored.waiting_mask === undefined) return stored as Job
  const { waiting_mask: mask, ...rest } = stored
  return { ...rest, waiting_for: waitingOfMask(rest.depends_on ?? [], mask) } as Job
}
