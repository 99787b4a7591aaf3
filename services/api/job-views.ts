import type { Job } from '../../domain/job.ts'

/**
 * The job detail object of the spec, plus the fields a user of the list needs to make sense of
 * a job (run_at, timeout_seconds, parent_job_id, worker_id). Single reads (from the log) and
 * list items (from Postgres) both go through here, so they have one shape.
 */
export function toJobDetail(job: Job) {
  return {
    id: job.id,
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
    worker_id: job.worker_id,
  }
}

export type JobDetail = ReturnType<typeof toJobDetail>

type Row = Record<string, unknown>

function iso(v: unknown): string | null {
  return v instanceof Date ? v.toISOString() : v === null || v === undefined ? null : String(v)
}

/** A `jobs` row back into the aggregate's shape (the row is its snapshot). */
export function jobFromRow(r: Row): Job {
  return {
    id: r.id as string,
    project_id: r.project_id as string,
    state: r.state as Job['state'],
    job_type: r.job_type as string,
    queue: r.queue as string,
    payload: r.payload as Job['payload'],
    created_at: iso(r.created_at)!,
    run_at: iso(r.run_at),
    started_at: iso(r.started_at),
    completed_at: iso(r.completed_at),
    attempt: r.attempt as number,
    max_attempts: r.max_attempts as number,
    timeout_seconds: r.timeout_seconds as number,
    progress: (r.progress as number | null) ?? null,
    duration_ms: (r.duration_ms as number | null) ?? null,
    error: (r.error as Job['error']) ?? null,
    tags: (r.tags as Job['tags']) ?? null,
    parent_job_id: (r.parent_job_id as string | null) ?? null,
    waiting_for_parent: r.waiting_for_parent as boolean,
    children: [],
    worker_id: (r.worker_id as string | null) ?? null,
    idempotency_key: (r.idempotency_key as string | null) ?? null,
    updated_at: iso(r.updated_at)!,
  }
}
