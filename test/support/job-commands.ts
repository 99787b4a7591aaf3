import type { JobCommand } from '../../domain/job.ts'

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
