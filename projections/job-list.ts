import type { Job, JobEventType } from '../domain/job.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable, Sql, Tx } from './database.ts'
import { isStorableCopyRow, removeStorableJobRow, writeStorableJobRow } from './job-list-copies.ts'
import { latestPerAggregate, type Projection } from './projection.ts'

const handledTypes: readonly JobEventType[] = [
  'job_created',
  'job_child_attached',
  'job_promoted',
  'job_activated',
  'job_claimed',
  'job_progressed',
  'job_succeeded',
  'job_attempt_failed',
  'job_dead_lettered',
  'job_cancelled',
  'job_retried',
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
  'tags',
  'parent_job_id',
  'waiting_for_parent',
  'worker_id',
  'idempotency_key',
  'traceparent',
  'updated_at',
  'children',
  'last_seq',
] as const

function toRow(job: Job, seq: number): Record<(typeof columns)[number], unknown> {
  return {
    id: job.id,
    project_id: job.project_id,
    state: job.state,
    job_type: job.job_type,
    queue: job.queue,
    payload: job.payload,
    created_at: job.created_at,
    run_at: job.run_at,
    started_at: job.started_at,
    completed_at: job.completed_at,
    attempt: job.attempt,
    max_attempts: job.max_attempts,
    timeout_seconds: job.timeout_seconds,
    progress: job.progress,
    duration_ms: job.duration_ms,
    error: job.error,
    tags: job.tags,
    parent_job_id: job.parent_job_id,
    waiting_for_parent: job.waiting_for_parent,
    worker_id: job.worker_id,
    idempotency_key: job.idempotency_key,
    traceparent: job.traceparent ?? null,
    updated_at: job.updated_at,
    children: job.children,
    last_seq: seq,
  }
}

function toIso(v: unknown): string | null {
  return v instanceof Date ? v.toISOString() : v === null || v === undefined ? null : String(v)
}

/** A `jobs` row back into the aggregate state it is a snapshot of (the inverse of the upsert). */
export function jobFromRow(r: Record<string, unknown>): Job {
  return {
    id: r.id as string,
    project_id: r.project_id as string,
    state: r.state as Job['state'],
    job_type: r.job_type as string,
    queue: r.queue as string,
    payload: r.payload as Job['payload'],
    created_at: toIso(r.created_at)!,
    run_at: toIso(r.run_at),
    started_at: toIso(r.started_at),
    completed_at: toIso(r.completed_at),
    attempt: r.attempt as number,
    max_attempts: r.max_attempts as number,
    timeout_seconds: r.timeout_seconds as number,
    progress: (r.progress as number | null) ?? null,
    duration_ms: (r.duration_ms as number | null) ?? null,
    error: (r.error as Job['error']) ?? null,
    tags: (r.tags as Job['tags']) ?? null,
    parent_job_id: (r.parent_job_id as string | null) ?? null,
    waiting_for_parent: r.waiting_for_parent as boolean,
    children: (r.children as string[] | null) ?? [],
    worker_id: (r.worker_id as string | null) ?? null,
    idempotency_key: (r.idempotency_key as string | null) ?? null,
    traceparent: (r.traceparent as string | null) ?? null,
    updated_at: toIso(r.updated_at)!,
  }
}

/**
 * Upserts the job rows carried by `records`, each only if it is newer than the row (its own
 * `last_seq`). Shared by the projector and by the scheduler, which writes the rows of the jobs it
 * promotes or reaps: both write the same snapshot for the same sequence, so the read model ends
 * the same whichever writes first.
 */
export async function upsertJobRows(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  const rows = latestPerAggregate(records.filter((r) => r.message.aggregate === 'job'))
    .filter((r) => r.message.state !== null)
    .map((r) => toRow(r.message.state as Job, r.seq))
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
        payload = excluded.payload, created_at = excluded.created_at, run_at = excluded.run_at,
        started_at = excluded.started_at, completed_at = excluded.completed_at,
        attempt = excluded.attempt, max_attempts = excluded.max_attempts,
        timeout_seconds = excluded.timeout_seconds, progress = excluded.progress,
        duration_ms = excluded.duration_ms, error = excluded.error, tags = excluded.tags,
        parent_job_id = excluded.parent_job_id, waiting_for_parent = excluded.waiting_for_parent,
        worker_id = excluded.worker_id, idempotency_key = excluded.idempotency_key, traceparent = excluded.traceparent,
        updated_at = excluded.updated_at, children = excluded.children, last_seq = excluded.last_seq
      WHERE jobs.last_seq < excluded.last_seq`
  }
}

/** A pending job as the read model has it: what a claim needs, and its whole state within the reader's allowance. */
export interface PendingRow {
  id: string
  jobType: string
  /** available_at: when the job may be claimed. */
  dueAt: Date
  /** The stream sequence the row is at. */
  seq: number
  /** The job at `seq`, or null past the payload allowance (the row was read without its payload) or for a storable copy (job-list-copies.ts). */
  job: Job | null
  /** The payload's size as JSON text, in bytes. */
  payloadBytes: number
}

const columnsButPayload = columns.filter((c) => c !== 'payload')

/**
 * The pending jobs of one project and queue, earliest due first, at most `limit`, and the stream
 * sequence the job list had been applied through when they were read. Both come from one
 * snapshot (repeatable read), so every job pending at `through` is in `rows` unless `complete`
 * is false (more than `limit` were pending). Payloads are read only while their running total
 * stays within `payloadBytes` (Postgres measures them; the others never leave it).
 */
export async function readPendingQueue(
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
        CASE WHEN sum(payload_bytes) OVER (ORDER BY available_at, id) <= ${payloadBytes} THEN payload END AS payload
      FROM (
        SELECT *, octet_length(payload::text) AS payload_bytes FROM jobs
        WHERE project_id = ${projectId} AND queue = ${queue} AND state = 'pending'
        ORDER BY available_at, id
        LIMIT ${limit + 1}
      ) pending
      ORDER BY available_at, id`
    return {
      through: checkpoint?.last_seq ?? 0,
      rows: rows.slice(0, limit).map((r) => ({
        id: r.id as string,
        jobType: r.job_type as string,
        dueAt: r.available_at as Date,
        seq: r.last_seq as number,
        job: r.payload === null || isStorableCopyRow(r) ? null : jobFromRow(r),
        payloadBytes: r.payload_bytes as number,
      })),
      complete: rows.length <= limit,
    }
  }) as Promise<{ through: number; rows: PendingRow[]; complete: boolean }>
}

export const jobList: Projection = {
  name: 'job-list',
  handles: handledTypes,
  tables: ['jobs'],
  apply: (tx: Tx, records) => upsertJobRows(tx, records),
  applyStorableCopy: (tx, record) => writeStorableJobRow(tx, record, upsertJobRows),
  removeStorableCopy: removeStorableJobRow,
}
