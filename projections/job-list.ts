import type { BulkPosition, JobBulkParams } from '../domain/job-bulk.ts'
import type { JobProgress } from '../domain/job-progress.ts'
import { claimRankAtMs, errorOf, staleAttemptRule, toJobView, type Job, type JobError, type JobEventType, type JobView } from '../domain/job.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable, Sql, Tx } from './database.ts'
import { isStorableCopyRow, removeStorableJobRow, writeStorableJobRow } from './job-list-copies.ts'
import { latestPerAggregate, pageOf, readModel, type Page, type PagePosition } from './projection.ts'

const handledTypes: readonly JobEventType[] = [
  'job_created',
  'job_child_attached',
  'job_promoted',
  'job_activated',
  'job_parent_settled',
  'job_claimed',
  'job_progressed',
  'job_succeeded',
  'job_attempt_failed',
  'job_dead_lettered',
  'job_cancelled',
  'job_retried',
  'job_cancel_requested',
  'job_released',
  'job_priority_changed',
  'job_payload_replaced',
]

/** Rows per statement, so one statement's document stays a few megabytes at most. */
const rowsPerStatement = 1000

const columns = [
  'id',
  'project_id',
  'state',
  'job_type',
  'queue',
  'payload',
  'result',
  'created_at',
  'run_at',
  'started_at',
  'completed_at',
  'attempt',
  'max_attempts',
  'timeout_seconds',
  'progress',
  'duration_ms',
  'error',
  'error_seq',
  'tags',
  'parent_job_id',
  'waiting_for_parent',
  'worker_id',
  'idempotency_key',
  'traceparent',
  'updated_at',
  'children',
  'last_seq',
  'cancel_requested_at',
  'priority',
  'claim_rank_at',
  'ttl_seconds',
  'expires_at',
  'cancel_reason',
  'payload_seq',
  'concurrency_key',
  'limit_waiting',
  'depends_on',
  'waiting_for',
  'on_parent_failure',
] as const

/** What a row holds that the job's state only refers to, as far as the batch that writes it knows. */
interface RowFacts {
  /** null: not in this batch (the row keeps its own). */
  payload: Record<string, unknown> | null
  /** null with `error_seq` set: not in this batch (the row keeps its own). */
  error: JobError | null
  /** Set only by a report on the job's own subject (logs written before reports had their own); null: see the upsert. */
  progress: number | null
  /** What its successful attempt returned; null: none, or not in this batch (the row keeps its own: a success is final). */
  result: unknown
}

function toRow(job: Job, seq: number, facts: RowFacts): Record<(typeof columns)[number], unknown> {
  return {
    id: job.id,
    project_id: job.project_id,
    state: job.state,
    job_type: job.job_type,
    queue: job.queue,
    payload: facts.payload,
    result: facts.result,
    created_at: job.created_at,
    run_at: job.run_at,
    started_at: job.started_at,
    completed_at: job.completed_at,
    attempt: job.attempt,
    max_attempts: job.max_attempts,
    timeout_seconds: job.timeout_seconds,
    progress: facts.progress,
    duration_ms: job.duration_ms,
    error: facts.error,
    error_seq: job.error_seq,
    tags: job.tags,
    parent_job_id: job.parent_job_id,
    waiting_for_parent: job.waiting_for_parent,
    worker_id: job.worker_id,
    idempotency_key: job.idempotency_key,
    traceparent: job.traceparent,
    updated_at: job.updated_at,
    children: job.children,
    last_seq: seq,
    cancel_requested_at: job.cancel_requested_at ?? null,
    priority: job.priority ?? null,
    claim_rank_at: new Date(claimRankAtMs(job)).toISOString(),
    ttl_seconds: job.ttl_seconds ?? null,
    expires_at: job.expires_at ?? null,
    cancel_reason: job.cancel_reason ?? null,
    payload_seq: job.payload_seq ?? null,
    concurrency_key: job.concurrency_key ?? null,
    limit_waiting: job.limit_waiting ?? null,
    depends_on: job.depends_on ?? null,
    waiting_for: job.waiting_for ?? null,
    on_parent_failure: job.on_parent_failure ?? null,
  }
}

/**
 * The row as the upsert's json document carries it: json_populate_recordset reads a column it
 * finds no key for as NULL, just as it reads a json null, so the null columns (most of a row's)
 * are left out — a replay writes every job's row once per batch it changed in, hundreds of MB.
 * Only the row's own keys: a null inside a payload or a result is kept.
 */
function withoutNulls(row: Record<string, unknown>): Record<string, unknown> {
  const kept: Record<string, unknown> = {}
  for (const key in row) if (row[key] !== null) kept[key] = row[key]
  return kept
}

function toIso(v: unknown): string | null {
  return v instanceof Date ? v.toISOString() : v === null || v === undefined ? null : String(v)
}

/**
 * A `jobs` row back into the aggregate state it is a snapshot of (the inverse of the upsert): a
 * claim decides on it without loading the job. A row projected before errors were kept once has
 * its error without `error_seq`: the state then carries it inline, as its messages did.
 */
export function jobFromRow(r: Record<string, unknown>): Job {
  const job: Job = {
    id: r.id as string,
    project_id: r.project_id as string,
    state: r.state as Job['state'],
    job_type: r.job_type as string,
    queue: r.queue as string,
    created_at: toIso(r.created_at)!,
    run_at: toIso(r.run_at),
    started_at: toIso(r.started_at),
    completed_at: toIso(r.completed_at),
    attempt: r.attempt as number,
    max_attempts: r.max_attempts as number,
    timeout_seconds: r.timeout_seconds as number,
    progress: (r.progress as number | null) ?? null,
    duration_ms: (r.duration_ms as number | null) ?? null,
    error_seq: (r.error_seq as number | null) ?? null,
    tags: (r.tags as Job['tags']) ?? null,
    parent_job_id: (r.parent_job_id as string | null) ?? null,
    waiting_for_parent: r.waiting_for_parent as boolean,
    children: (r.children as string[] | null) ?? [],
    worker_id: (r.worker_id as string | null) ?? null,
    idempotency_key: (r.idempotency_key as string | null) ?? null,
    traceparent: (r.traceparent as string | null) ?? null,
    updated_at: toIso(r.updated_at)!,
  }
  const cancelRequestedAt = toIso(r.cancel_requested_at)
  if (cancelRequestedAt !== null) job.cancel_requested_at = cancelRequestedAt
  if (r.priority !== null && r.priority !== undefined) job.priority = r.priority as number
  if (r.ttl_seconds !== null && r.ttl_seconds !== undefined) job.ttl_seconds = r.ttl_seconds as number
  const expiresAt = toIso(r.expires_at)
  if (expiresAt !== null) job.expires_at = expiresAt
  if (r.cancel_reason === 'expired') job.cancel_reason = 'expired'
  if (r.payload_seq !== null && r.payload_seq !== undefined) job.payload_seq = Number(r.payload_seq)
  if (r.cancel_reason === 'concurrency_limit' || r.cancel_reason === 'parent_never_created') job.cancel_reason = r.cancel_reason
  if (typeof r.concurrency_key === 'string') job.concurrency_key = r.concurrency_key
  if (r.limit_waiting !== null && r.limit_waiting !== undefined) job.limit_waiting = r.limit_waiting as Job['limit_waiting']
  if (Array.isArray(r.depends_on)) {
    job.depends_on = r.depends_on as string[]
    job.waiting_for = (r.waiting_for as string[] | null) ?? []
    job.on_parent_failure = (r.on_parent_failure as Job['on_parent_failure']) ?? 'cancel'
  }
  const error = (r.error as JobError | null) ?? null
  return job.error_seq === null && error !== null ? { ...job, error } : job
}

/** A `jobs` row as the API shows the job (lists): its state and the facts the row holds. */
export function jobViewFromRow(r: Record<string, unknown>): JobView {
  return toJobView(jobFromRow(r), {
    payload: (r.payload as JobView['payload'] | null) ?? {},
    error: (r.error as JobError | null) ?? null,
    progress: (r.progress as number | null) ?? null,
    result: r.result ?? null,
  })
}

/** The payloads, results, errors and reports on the job's own subject that a batch's job messages carry. */
function factsOfBatch(records: readonly EventRecord[]) {
  const payloads = new Map<string, Record<string, unknown>>()
  const results = new Map<string, unknown>()
  const errorsAt = new Map<number, JobError>()
  const reportedOnOwnSubject = new Set<string>()
  for (const r of records) {
    const error = errorOf(r.message.events)
    if (error !== null) errorsAt.set(r.seq, error)
    for (const e of r.message.events) {
      // In log order, so a replacement (a dedup create's) wins over the job_created and earlier replacements.
      if (e.type === 'job_created' || e.type === 'job_payload_replaced') {
        payloads.set(r.message.aggregate_id, (e.data as { payload: Record<string, unknown> }).payload)
      } else if (e.type === 'job_progressed') reportedOnOwnSubject.add(r.message.aggregate_id)
      else if (e.type === 'job_succeeded' && (e.data as { result?: unknown }).result !== undefined) {
        results.set(r.message.aggregate_id, (e.data as { result: unknown }).result)
      }
    }
  }
  return { payloads, results, errorsAt, reportedOnOwnSubject }
}

/**
 * Upserts the job rows carried by `records`, each only if it is newer than the row (its own
 * `last_seq`), then applies the batch's progress reports. Shared by the projector and by the
 * scheduler, which writes the rows of the jobs it promotes or reaps: both write the same snapshot
 * for the same sequence, so the read model ends the same whichever writes first.
 *
 * A row keeps what the job's state only refers to: the payload (taken from the job's
 * `job_created`, or its latest `job_payload_replaced`), the result (from its `job_succeeded`), the last error (taken from the message that recorded it; a row whose error is
 * in no message at hand is not moved past it, and the projector brings it in order) and the
 * progress (reset when a new attempt starts or the job is retried, set by the reports of the
 * row's current attempt).
 */
export async function upsertJobRows(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  const jobRecords = records.filter((r) => r.message.aggregate === 'job')
  const { payloads, results, errorsAt, reportedOnOwnSubject } = factsOfBatch(jobRecords)
  const rows = latestPerAggregate(jobRecords)
    .filter((r) => r.message.state !== null)
    .map((r) => {
      const job = r.message.state as Job
      const error = job.error ?? (job.error_seq === null ? null : (errorsAt.get(job.error_seq) ?? null))
      const progress = reportedOnOwnSubject.has(job.id) ? job.progress : null
      return withoutNulls(toRow(job, r.seq, { payload: payloads.get(job.id) ?? null, error, progress, result: results.get(job.id) ?? null }))
    })
  for (let i = 0; i < rows.length; i += rowsPerStatement) {
    const chunk = rows.slice(i, i + rowsPerStatement)
    // One json document instead of 25 parameters per row: serializing thousands of parameters
    // one by one cost the projector more than Postgres's parse of one document. It is sent as
    // text and cast, not as jsonb, which would reorder the keys of payloads.
    await db`
      INSERT INTO jobs (${db(columns as unknown as string[])})
      SELECT ${db(columns as unknown as string[])} FROM json_populate_recordset(null::jobs, ${JSON.stringify(chunk)}::text::json)
      ON CONFLICT (id) DO UPDATE SET
        state = excluded.state, job_type = excluded.job_type, queue = excluded.queue,
        payload = coalesce(excluded.payload, jobs.payload), result = coalesce(excluded.result, jobs.result),
        sanitised_seq = CASE WHEN excluded.payload IS NULL THEN jobs.sanitised_seq END, created_at = excluded.created_at, run_at = excluded.run_at,
        started_at = excluded.started_at, completed_at = excluded.completed_at,
        attempt = excluded.attempt, max_attempts = excluded.max_attempts,
        timeout_seconds = excluded.timeout_seconds,
        progress = CASE WHEN excluded.progress IS NOT NULL THEN excluded.progress
          WHEN excluded.attempt <> jobs.attempt OR excluded.started_at IS NULL THEN NULL ELSE jobs.progress END,
        duration_ms = excluded.duration_ms,
        error = CASE WHEN excluded.error IS NULL AND excluded.error_seq IS NOT NULL THEN jobs.error ELSE excluded.error END,
        error_seq = excluded.error_seq, tags = excluded.tags,
        parent_job_id = excluded.parent_job_id, waiting_for_parent = excluded.waiting_for_parent,
        worker_id = excluded.worker_id, idempotency_key = excluded.idempotency_key, traceparent = excluded.traceparent,
        updated_at = excluded.updated_at, children = excluded.children, last_seq = excluded.last_seq,
        cancel_requested_at = excluded.cancel_requested_at, priority = excluded.priority, claim_rank_at = excluded.claim_rank_at,
        ttl_seconds = excluded.ttl_seconds, expires_at = excluded.expires_at, cancel_reason = excluded.cancel_reason,
        payload_seq = excluded.payload_seq, concurrency_key = excluded.concurrency_key, limit_waiting = excluded.limit_waiting,
        depends_on = excluded.depends_on, waiting_for = excluded.waiting_for, on_parent_failure = excluded.on_parent_failure
      WHERE jobs.last_seq < excluded.last_seq
        AND (excluded.error IS NOT NULL OR excluded.error_seq IS NULL OR excluded.error_seq = jobs.error_seq)`
  }
  await applyProgressReports(db, records)
}

/**
 * The batch's last progress report of each job, on its row: shown while the row is at the
 * report's attempt (a report that lost a race with its attempt's end changes nothing), and
 * remembered as the job's last progress message, for retention.
 */
async function applyProgressReports(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  const reports = latestPerAggregate(records.filter((r) => r.message.aggregate === 'progress'))
    .filter((r) => r.message.state !== null)
    .map((r) => ({ id: r.message.aggregate_id, ...(r.message.state as JobProgress), seq: r.seq }))
  if (reports.length === 0) return
  await db`
    UPDATE jobs j SET
      progress = CASE WHEN j.attempt = p.attempt AND j.started_at IS NOT NULL THEN p.progress ELSE j.progress END,
      progress_seq = greatest(j.progress_seq, p.seq)
    FROM json_to_recordset(${JSON.stringify(reports)}::text::json) AS p(id text, attempt integer, progress double precision, seq bigint)
    WHERE j.id = p.id`
}

/** A pending job as the read model has it: what a claim needs, and its whole state within the reader's allowance. */
export interface PendingRow {
  id: string
  jobType: string
  /** available_at: when the job may be claimed. */
  dueAt: Date
  /** claim_rank_at: where the job stands in its queue's claim order (due time − priority). */
  rankAt: Date
  /** The stream sequence the row is at. */
  seq: number
  /** The job at `seq` and its payload, or both null past the payload allowance (the row was read without its payload) or for a storable copy (job-list-copies.ts). */
  job: Job | null
  payload: Record<string, unknown> | null
  /** The payload's size as JSON text, in bytes. */
  payloadBytes: number
}

const columnsButPayload = columns.filter((c) => c !== 'payload')

/**
 * The pending jobs of one project and queue in claim order (due time − priority), at most `limit`, and the stream
 * sequence the job list had been applied through when they were read. Both come from one
 * snapshot (repeatable read), so every job pending at `through` is in `rows` unless `complete`
 * is false (more than `limit` were pending). Payloads are read only while their running total
 * stays within `payloadBytes` (Postgres measures them; the others never leave it).
 */
async function readPendingQueue(
  sql: Sql,
  projectId: string,
  queue: string,
  limit: number,
  payloadBytes: number,
): Promise<{ through: number; rows: PendingRow[]; complete: boolean }> {
  return sql.begin('isolation level repeatable read read only', async (tx) => {
    const [checkpoint] = await tx<{ last_seq: number }[]>`SELECT last_seq FROM projection_checkpoints WHERE name = ${jobList.name}`
    const rows = await tx`
      SELECT ${tx(columnsButPayload as string[])}, available_at, payload_bytes, sanitised_seq,
        CASE WHEN sum(payload_bytes) OVER (ORDER BY claim_rank_at, id) <= ${payloadBytes} THEN payload END AS payload
      FROM (
        SELECT *, coalesce(octet_length(payload::text), 0) AS payload_bytes FROM jobs
        WHERE project_id = ${projectId} AND queue = ${queue} AND state = 'pending'
        ORDER BY claim_rank_at, id
        LIMIT ${limit + 1}
      ) pending
      ORDER BY claim_rank_at, id`
    return {
      through: checkpoint?.last_seq ?? 0,
      rows: rows.slice(0, limit).map((r) => ({
        id: r.id as string,
        jobType: r.job_type as string,
        dueAt: r.available_at as Date,
        rankAt: r.claim_rank_at as Date,
        seq: r.last_seq as number,
        job: r.payload === null || isStorableCopyRow(r) ? null : jobFromRow(r),
        payload: isStorableCopyRow(r) ? null : ((r.payload as Record<string, unknown> | null) ?? null),
        payloadBytes: r.payload_bytes as number,
      })),
      complete: rows.length <= limit,
    }
  }) as Promise<{ through: number; rows: PendingRow[]; complete: boolean }>
}

/** Filters of a project's job list; an absent or empty one does not filter. */
export interface JobListFilter {
  state?: string | undefined
  queue?: string | undefined
  job_type?: string | undefined
  created_after?: string | undefined
  created_before?: string | undefined
}

/** A project's jobs, newest first, after `after` (the last job of the previous page). */
async function page(db: Queryable, projectId: string, filter: JobListFilter, after: PagePosition | null, limit: number): Promise<Page<JobView>> {
  const rows = await db`
    SELECT * FROM jobs
    WHERE project_id = ${projectId}
      ${filter.state ? db`AND state = ${filter.state}` : db``}
      ${filter.queue ? db`AND queue = ${filter.queue}` : db``}
      ${filter.job_type ? db`AND job_type = ${filter.job_type}` : db``}
      ${filter.created_after ? db`AND created_at > ${filter.created_after}` : db``}
      ${filter.created_before ? db`AND created_at < ${filter.created_before}` : db``}
      ${after ? db`AND (created_at, id) < (${after.created_at}, ${after.id})` : db``}
    ORDER BY created_at DESC, id DESC
    LIMIT ${limit + 1}`
  return pageOf(rows, limit, jobViewFromRow)
}

/** A job a bulk walk takes: where it stands, and its state as the row has it. */
export interface BulkJobRow extends BulkPosition {
  state: string
}

/**
 * A bulk filter's conditions on one state's jobs (domain/job-bulk.ts), after `after` and up to
 * `through` (both in (created_at, id) order; null: no bound). One state at a time, so that every
 * walk is a range of jobs_by_project_state_newest, read backwards: no index of its own to keep up
 * on every job write.
 */
function bulkMatch(
  db: Queryable,
  projectId: string,
  state: string,
  filter: JobBulkParams['filter'],
  after: BulkPosition | null,
  through: BulkPosition | null,
) {
  const f = filter
  return db`project_id = ${projectId} AND state = ${state}
    ${after === null ? db`` : db`AND (created_at, id) > (${after.created_at}, ${after.id})`}
    ${through === null ? db`` : db`AND (created_at, id) <= (${through.created_at}, ${through.id})`}
    ${f.ids === undefined ? db`` : db`AND id = ANY(${f.ids}::text[])`}
    ${f.queues === undefined ? db`` : db`AND queue = ANY(${f.queues}::text[])`}
    ${f.job_types === undefined ? db`` : db`AND job_type = ANY(${f.job_types}::text[])`}
    ${f.tags === undefined ? db`` : db`AND tags::jsonb @> ${JSON.stringify(f.tags)}::text::jsonb`}
    ${f.error_type === undefined ? db`` : db`AND error->>'type' = ${f.error_type}`}
    ${f.created_from === undefined ? db`` : db`AND created_at >= ${f.created_from}`}
    ${f.created_until === undefined ? db`` : db`AND created_at <= ${f.created_until}`}
    ${f.finished_from === undefined ? db`` : db`AND completed_at >= ${f.finished_from}`}
    ${f.finished_until === undefined ? db`` : db`AND completed_at <= ${f.finished_until}`}`
}

/** How many jobs match a bulk filter up to `through`, counted up to `atMost` (a count past it is `atMost`). */
async function bulkCount(db: Queryable, projectId: string, filter: JobBulkParams['filter'], through: BulkPosition, atMost: number): Promise<number> {
  let total = 0
  for (const state of filter.states) {
    const [row] = await db<{ n: number }[]>`
      SELECT count(*)::int AS n FROM (SELECT 1 FROM jobs WHERE ${bulkMatch(db, projectId, state, filter, null, through)} LIMIT ${atMost - total}) m`
    total += row!.n
    if (total >= atMost) break
  }
  return total
}

/** The last job (in the walk's order) matching a bulk filter now; null when none does. */
async function bulkLast(db: Queryable, projectId: string, filter: JobBulkParams['filter']): Promise<BulkPosition | null> {
  let last: BulkPosition | null = null
  for (const state of filter.states) {
    const [row] = await db<{ created_at: Date; id: string }[]>`
      SELECT created_at, id FROM jobs WHERE ${bulkMatch(db, projectId, state, filter, null, null)} ORDER BY created_at DESC, id DESC LIMIT 1`
    if (row === undefined) continue
    const at = { created_at: row.created_at.toISOString(), id: row.id }
    if (last === null || isAfter(at, last)) last = at
  }
  return last
}

function isAfter(a: BulkPosition, b: BulkPosition): boolean {
  return a.created_at > b.created_at || (a.created_at === b.created_at && a.id > b.id)
}

/**
 * The next `limit` jobs of a bulk walk after `after`, up to `through`, oldest first: each state's
 * own range, merged. A job the walk changed (a retried job is pending now) is behind it and
 * never met again; a job that left the filter meanwhile is not met at all.
 */
async function bulkPage(
  db: Queryable,
  projectId: string,
  filter: JobBulkParams['filter'],
  after: BulkPosition | null,
  through: BulkPosition | null,
  limit: number,
): Promise<BulkJobRow[]> {
  const rows: BulkJobRow[] = []
  for (const state of filter.states) {
    const found = await db<{ created_at: Date; id: string; state: string }[]>`
      SELECT created_at, id, state FROM jobs WHERE ${bulkMatch(db, projectId, state, filter, after, through)}
      ORDER BY created_at, id LIMIT ${limit}`
    for (const r of found) rows.push({ created_at: r.created_at.toISOString(), id: r.id, state: r.state })
  }
  return rows.sort((a, b) => (isAfter(a, b) ? 1 : isAfter(b, a) ? -1 : 0)).slice(0, limit)
}

/** Keys of a queue whose jobs a claim passes over (their gate is full, out of tokens or held). */
export interface KeyPassOver {
  queue: string
  by: 'concurrency_key' | 'job_type' | `tag:${string}`
  keys: string[]
}

/** What a claim asks the job list for: a project's due pending jobs of some queues (and job types). */
export interface ClaimTarget {
  projectId: string
  queues: string[]
  /** null: any type. */
  jobTypes: string[] | null
}

/**
 * Due pending jobs of `target` in claim order (due time − priority, as the ready index takes them), at most `limit`, locked for the transaction
 * `tx` (`FOR UPDATE SKIP LOCKED`: rows another claim holds are passed over, not waited for).
 * `seen` are left out: rows an earlier round of the same claim already had.
 */
async function claimCandidates(
  tx: Tx,
  target: ClaimTarget,
  now: Date,
  seen: readonly string[],
  limit: number,
  passOver: readonly KeyPassOver[] = [],
) {
  // A key at its limit (issue 29) is passed over, so its waiting jobs never fill the page ahead of other keys'.
  const keyColumn = (by: KeyPassOver['by']) =>
    by === 'concurrency_key' ? tx`concurrency_key` : by === 'job_type' ? tx`job_type` : tx`(tags ->> ${by.slice('tag:'.length)})`
  const passed = passOver.map((p) => tx`AND NOT (queue = ${p.queue} AND ${keyColumn(p.by)} = ANY(${p.keys}))`)
  return tx`
    SELECT * FROM jobs
    WHERE project_id = ${target.projectId} AND state = 'pending' AND queue = ANY(${target.queues})
      AND available_at <= ${now} AND (expires_at IS NULL OR expires_at > ${now})
      ${target.jobTypes === null ? tx`` : tx`AND job_type = ANY(${target.jobTypes})`}
      ${seen.length === 0 ? tx`` : tx`AND id <> ALL(${seen as string[]})`}
      ${passed.reduce((all, p) => tx`${all} ${p}`, tx``)}
    ORDER BY claim_rank_at, id
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED`
}

/** Scheduled jobs due at `now` and not waiting for a parent, earliest due first, except `heldBack`. */
async function dueScheduled(db: Queryable, now: Date, heldBack: readonly string[], limit: number) {
  return db<{ project_id: string; id: string }[]>`
    SELECT project_id, id FROM jobs
    WHERE state = 'scheduled' AND NOT waiting_for_parent AND available_at <= ${now} AND id <> ALL(${heldBack as string[]}::text[])
      AND (expires_at IS NULL OR expires_at > ${now})
    ORDER BY available_at LIMIT ${limit}`
}

/**
 * Processing attempts that would be stale at `now` had their worker heartbeated as they started
 * (`isAttemptStale` with a heartbeat at `started_at`): the shortest window an attempt can have,
 * so every stale attempt is among them, oldest first, except `heldBack`. The window's terms come
 * from the domain's rule (`staleAttemptRule`); the reaper decides on each with its real heartbeat.
 */
async function staleProcessing(db: Queryable, now: Date, graceMs: number, heldBack: readonly string[], limit: number) {
  const { heartbeatsPerTimeout, heartbeatFloorSeconds, missedHeartbeats } = staleAttemptRule
  return db<{ project_id: string; id: string; attempt: number; started_at: Date; timeout_seconds: number }[]>`
    SELECT project_id, id, attempt, started_at, timeout_seconds FROM jobs
    WHERE state = 'processing'
      AND started_at + make_interval(secs => (least(timeout_seconds,
        ${missedHeartbeats}::int * greatest(timeout_seconds / ${heartbeatsPerTimeout}::numeric, ${heartbeatFloorSeconds}::int))
        + ${graceMs}::double precision / 1000)::double precision) < ${now}
      AND id <> ALL(${heldBack as string[]}::text[])
    ORDER BY started_at LIMIT ${limit}`
}

/** Running jobs whose cancel was asked for before `before` (the grace period has passed), except `heldBack`. */
async function cancelsPastGrace(db: Queryable, before: Date, heldBack: readonly string[], limit: number) {
  return db<{ project_id: string; id: string; attempt: number }[]>`
    SELECT project_id, id, attempt FROM jobs
    WHERE state = 'processing' AND cancel_requested_at < ${before}
      AND id <> ALL(${heldBack as string[]}::text[])
    ORDER BY cancel_requested_at LIMIT ${limit}`
}

/**
 * Jobs still waiting to be claimed past their `expires_at` (not waiting for a parent), at most
 * `limit`, except `heldBack`, taken round-robin across projects so that no project's backlog can
 * hold back another's: each project's earliest first, at most `perProject` of each, and a
 * project's n-th only after every other project's (n−1)-th. The projects are found by a loose
 * scan of the `jobs_waiting_expiry` index (one probe per project holding waiting jobs with a ttl),
 * each project's overdue jobs by a range of it.
 */
async function expiredWaiting(db: Queryable, now: Date, heldBack: readonly string[], limit: number, perProject: number) {
  return db<{ project_id: string; id: string }[]>`
    WITH RECURSIVE projects AS (
      (SELECT project_id FROM jobs
        WHERE state IN ('pending', 'scheduled') AND expires_at IS NOT NULL AND NOT waiting_for_parent
        ORDER BY project_id LIMIT 1)
      UNION ALL
      SELECT (SELECT j.project_id FROM jobs j
        WHERE j.state IN ('pending', 'scheduled') AND j.expires_at IS NOT NULL AND NOT j.waiting_for_parent AND j.project_id > p.project_id
        ORDER BY j.project_id LIMIT 1)
      FROM projects p WHERE p.project_id IS NOT NULL
    )
    SELECT overdue.project_id, overdue.id FROM projects p CROSS JOIN LATERAL (
      SELECT j.project_id, j.id, j.expires_at, row_number() OVER (ORDER BY j.expires_at, j.id) AS turn FROM jobs j
      WHERE j.project_id = p.project_id AND j.state IN ('pending', 'scheduled') AND j.expires_at IS NOT NULL
        AND NOT j.waiting_for_parent AND j.expires_at <= ${now} AND j.id <> ALL(${heldBack as string[]}::text[])
      ORDER BY j.expires_at, j.id LIMIT ${perProject}
    ) overdue
    ORDER BY overdue.turn, overdue.expires_at LIMIT ${limit}`
}

/** Parents that have ended while children still wait on them (a continuation cascade a crash interrupted), except `heldBack`. */
async function parentsOfWaitingChildren(db: Queryable, heldBack: readonly string[], limit: number) {
  return db<{ project_id: string; id: string }[]>`
    SELECT DISTINCT p.project_id, p.id FROM jobs c JOIN jobs p ON p.id = c.parent_job_id
    WHERE c.state = 'scheduled' AND c.waiting_for_parent AND p.state IN ('succeeded', 'dead_letter', 'cancelled')
      AND p.id <> ALL(${heldBack as string[]}::text[])
    UNION
    SELECT DISTINCT p.project_id, p.id FROM jobs c JOIN jobs p ON p.id = ANY(c.waiting_for) AND p.project_id = c.project_id
    WHERE c.state = 'scheduled' AND c.waiting_for_parent AND c.waiting_for IS NOT NULL
      AND p.state IN ('succeeded', 'dead_letter', 'cancelled') AND p.id <> ALL(${heldBack as string[]}::text[])
    LIMIT ${limit}`
}

/**
 * Graph jobs created before `createdBefore` and still waiting for a parent that this read model
 * does not hold, one parent each (the first such), except `heldBack`: the leaves of a graph batch
 * whose process died before it appended their parents (create-jobs.ts, createGraph), or parents
 * the projector has yet to reach, which the caller tells apart on the log.
 */
async function graphJobsWaitingForMissingParents(db: Queryable, createdBefore: Date, heldBack: readonly string[], limit: number) {
  return db<{ project_id: string; id: string; parent_id: string }[]>`
    SELECT DISTINCT ON (c.id) c.project_id, c.id, missing.id AS parent_id
    FROM jobs c CROSS JOIN LATERAL unnest(c.waiting_for) AS missing(id)
    WHERE c.state = 'scheduled' AND c.waiting_for_parent AND c.waiting_for IS NOT NULL AND c.created_at < ${createdBefore}
      AND c.id <> ALL(${heldBack as string[]}::text[])
      AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.id = missing.id AND p.project_id = c.project_id)
    ORDER BY c.id, missing.id LIMIT ${limit}`
}

/** A job as the jobs export writes it: the row's columns, JSON ones as their text. */
export interface ExportedJobRow {
  id: string
  created_at: Date
  job_type: string
  queue: string
  state: string
  attempt: number
  max_attempts: number
  timeout_seconds: number
  run_at: Date | null
  started_at: Date | null
  completed_at: Date | null
  duration_ms: number | null
  worker_id: string | null
  progress: number | null
  parent_job_id: string | null
  idempotency_key: string | null
  tags: string | null
  error: string | null
  payload: string
  /** JSON text; null: no result. */
  result: string | null
  /** The sequence of the message the row holds (an attested export reads its event). */
  last_seq: string
}

/** A project's jobs created within `window` (both ends included), oldest first: a query to stream with a cursor. */
function exportRows(db: Queryable, projectId: string, window: { from: Date; until: Date }) {
  return db<ExportedJobRow[]>`
    SELECT id, created_at, job_type, queue, state, attempt, max_attempts, timeout_seconds, run_at, started_at, completed_at,
      duration_ms, worker_id, progress, parent_job_id, idempotency_key, tags::text AS tags, error::text AS error, payload::text AS payload,
      result::text AS result, last_seq
    FROM jobs WHERE project_id = ${projectId} AND created_at >= ${window.from} AND created_at <= ${window.until}
    ORDER BY created_at, id`
}

/** Which of a project's jobs an alert counts: those of one queue, or (null) of every queue. */
function inQueue(db: Queryable, queue: string | null) {
  return queue === null ? db`` : db`AND queue = ${queue}`
}

/** The project's jobs dead-lettered after `since`. */
async function deadLetteredSince(db: Queryable, projectId: string, queue: string | null, since: Date): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    SELECT count(*)::int AS n FROM jobs WHERE project_id = ${projectId} AND state = 'dead_letter' AND completed_at > ${since} ${inQueue(db, queue)}`
  return row!.n
}

/** The project's pending jobs, due or waiting out a backoff. */
async function pendingCount(db: Queryable, projectId: string, queue: string | null): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    SELECT count(*)::int AS n FROM jobs WHERE project_id = ${projectId} AND state = 'pending' ${inQueue(db, queue)}`
  return row!.n
}

/** When the project's oldest pending job that is due at `now` became due; null when none is. */
async function oldestDueAt(db: Queryable, projectId: string, queue: string | null, now: Date): Promise<Date | null> {
  const [row] = await db<{ oldest: Date | null }[]>`
    SELECT min(available_at) AS oldest FROM jobs
    WHERE project_id = ${projectId} AND state = 'pending' AND available_at <= ${now} ${inQueue(db, queue)}`
  return row!.oldest
}

/** A terminal job past its project's retention, as retention deletes it. */
export interface ExpiredJob {
  id: string
  project_id: string
  queue: string
  state: string
  last_seq: number
  /** The last progress report the job list applied (its progress subject), or null. */
  progress_seq: number | null
  ended_at: Date
}

/**
 * Terminal jobs that ended before their project plan's cut-off, locked for `tx` (rows another
 * scheduler holds are passed over), at most `limit`. Projects are taken in id order starting
 * after `afterProject` (then wrapping), and ordered before the lateral join so that it stops
 * probing them once the batch is full; each probe is one range scan of
 * jobs_terminal_by_project_end. `heldBack` are left out.
 */
async function expiredTerminal(
  tx: Tx,
  cutoffs: ReadonlyArray<{ plan: string; cutoff: string }>,
  afterProject: string,
  heldBack: readonly string[],
  limit: number,
): Promise<ExpiredJob[]> {
  return tx<ExpiredJob[]>`
    SELECT e.* FROM (
      SELECT p.id, c.cutoff FROM projects p
      JOIN json_to_recordset(${JSON.stringify(cutoffs)}::text::json) AS c(plan text, cutoff timestamptz) ON c.plan = p.plan
      ORDER BY p.id <= ${afterProject}, p.id
    ) p
    CROSS JOIN LATERAL (
      SELECT j.id, j.project_id, j.queue, j.state, j.last_seq, j.progress_seq, coalesce(j.completed_at, j.updated_at) AS ended_at FROM jobs j
      WHERE j.project_id = p.id AND j.state IN ('succeeded', 'dead_letter', 'cancelled') AND coalesce(j.completed_at, j.updated_at) < p.cutoff
        AND j.id <> ALL(${heldBack as string[]}::text[])
      ORDER BY coalesce(j.completed_at, j.updated_at)
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    ) e
    LIMIT ${limit}`
}

/** Deletes the rows of `ids` (retention: jobs whose messages are gone from the log). */
/** The jobs `workerIds` are running now (processing under their id), oldest first, at most `limit`. */
async function runningOf(db: Queryable, projectId: string, workerIds: readonly string[], limit: number) {
  return db<{ id: string; worker_id: string; job_type: string; queue: string; attempt: number; started_at: Date; timeout_seconds: number }[]>`
    SELECT id, worker_id, job_type, queue, attempt, started_at, timeout_seconds FROM jobs
    WHERE project_id = ${projectId} AND state = 'processing' AND worker_id = ANY(${workerIds as string[]}::text[])
    ORDER BY started_at LIMIT ${limit}`
}

async function deleteRows(db: Queryable, ids: readonly string[]): Promise<void> {
  await db`DELETE FROM jobs WHERE id = ANY(${ids as string[]}::text[])`
}

/**
 * The jobs read model: one row per job, the snapshot its newest message carries. Besides the
 * projection, the queries that read it (and the few writes of services: retention's delete).
 */
export const jobList = readModel(
  {
    name: 'job-list',
    handles: handledTypes,
    tables: ['jobs'],
    apply: (tx, records) => upsertJobRows(tx, records),
    applyStorableCopy: (tx, record) => writeStorableJobRow(tx, record, upsertJobRows),
    removeStorableCopy: removeStorableJobRow,
  },
  {
    page,
    bulkCount,
    bulkLast,
    bulkPage,
    pendingQueue: readPendingQueue,
    claimCandidates,
    dueScheduled,
    staleProcessing,
    cancelsPastGrace,
    expiredWaiting,
    runningOf,
    parentsOfWaitingChildren,
    graphJobsWaitingForMissingParents,
    exportRows,
    deadLetteredSince,
    pendingCount,
    oldestDueAt,
    expiredTerminal,
    deleteRows,
  },
)
