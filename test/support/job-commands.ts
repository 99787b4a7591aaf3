import type { Job, JobCommand, JobError } from '../../domain/job.ts'
import type { NewJob } from '../../services/use-cases/jobs/job-service.ts'

export type CreateJobData = Extract<JobCommand, { type: 'create_job' }>['data']

/**
 * A `create_job` command's data for a job that runs at once, with no parent, no tags and no
 * idempotency key; a test names the ids and overrides only the fields it is about.
 */
export function createJobData(data: Pick<CreateJobData, 'job_id' | 'project_id'> & Partial<CreateJobData>): CreateJobData {
  return {
    job_type: 'email',
    queue: 'default',
    payload: {},
    run_at: null,
    max_attempts: 3,
    timeout_seconds: 60,
    tags: null,
    parent_job_id: null,
    waits_for_parent: false,
    idempotency_key: null,
    ...data,
  }
}

/** `JobService.create`'s input for a job that runs at once, with nothing optional; a test overrides what it is about. */
export function newJobInput(input: Pick<NewJob, 'job_type' | 'queue'> & Partial<NewJob>): NewJob {
  return { payload: {}, run_at: null, max_attempts: 3, timeout_seconds: 60, tags: null, parent_job_id: null, idempotency_key: null, ...input }
}

/**
 * A job in `failed`: no command leads there (spec rule 7), so tests build the state directly.
 * `startedAt` and `completedAt` are ISO instants of the failed attempt.
 */
export function failedJobState(f: {
  attempt: number
  maxAttempts: number
  error: JobError
  createdAt: string
  startedAt: string
  completedAt: string
}): Job {
  return {
    id: 'job_1',
    project_id: 'prj_1',
    state: 'failed',
    job_type: 'email',
    queue: 'default',
    created_at: f.createdAt,
    run_at: null,
    started_at: f.startedAt,
    completed_at: f.completedAt,
    attempt: f.attempt,
    max_attempts: f.maxAttempts,
    timeout_seconds: 300,
    progress: 0.5,
    duration_ms: 1000,
    // Inline, as a state read from a log written before errors were kept once carries it.
    error_seq: null,
    error: f.error,
    tags: null,
    parent_job_id: null,
    waiting_for_parent: false,
    children: [],
    worker_id: 'w1',
    idempotency_key: null,
    traceparent: null,
    updated_at: f.completedAt,
  }
}
