import type { JobView } from '../../../domain/job.ts'

/**
 * The job detail object of the spec, plus the fields a user of the list needs to make sense of
 * a job (run_at, timeout_seconds, parent_job_id, worker_id, traceparent, result). Single reads (from the log) and
 * list items (from Postgres) both go through here, so they have one shape. Fields of the extensions
 * appear only on jobs that used them, so the spec's answer for every other job stays as it says.
 */
export function toJobDetail(job: JobView) {
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
    traceparent: job.traceparent,
    result: job.result ?? null,
    // A cancel of the running attempt was asked for (issue 28): the job is stopping.
    ...(job.cancel_requested_at !== undefined ? { cancel_requested_at: job.cancel_requested_at } : {}),
    // Extension (issue 28): only a job that uses priorities shows one.
    ...(job.priority === undefined ? {} : { priority: job.priority }),
    // Extension (issue 28, expiry): only for a job with a ttl, so every other job keeps the spec's shape.
    ...(job.ttl_seconds === undefined ? {} : { ttl_seconds: job.ttl_seconds, expires_at: job.expires_at ?? null }),
    ...(job.cancel_reason === undefined ? {} : { cancel_reason: job.cancel_reason }),
    ...(job.concurrency_key === undefined ? {} : { concurrency_key: job.concurrency_key }),
    // Extension (issue 30): only a job of a graph shows its parents.
    ...(job.depends_on === undefined
      ? {}
      : { depends_on: job.depends_on, waiting_for: job.waiting_for ?? [], on_parent_failure: job.on_parent_failure ?? 'cancel' }),
  }
}

export type JobDetail = ReturnType<typeof toJobDetail>
