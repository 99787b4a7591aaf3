/**
 * Refusals of the domain. Each carries the spec's error code and nothing about HTTP; the API's
 * error registry maps the class to a status.
 */
export class DomainError extends Error {
  readonly code: string
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

export class InvalidState extends DomainError {
  constructor(message: string) {
    super('invalid_state', message)
  }
}

export class WorkerMismatch extends DomainError {
  constructor(message: string) {
    super('worker_mismatch', message)
  }
}

export class JobNotFound extends DomainError {
  constructor(jobId?: string) {
    super('job_not_found', jobId ? `job ${jobId} was not found` : 'the job was not found')
  }
}

export class ParentNotFound extends DomainError {
  constructor(parentJobId: string) {
    super('parent_not_found', `parent job ${parentJobId} was not found`)
  }
}

export class ParentTerminal extends DomainError {
  constructor(parentJobId: string, state: string) {
    super('parent_terminal', `parent job ${parentJobId} is ${state} and will never succeed`)
  }
}

export class ProjectNotFound extends DomainError {
  constructor(projectId: string) {
    super('project_not_found', `project ${projectId} was not found`)
  }
}

export class ProjectAlreadyExists extends DomainError {
  constructor(projectId: string) {
    super('invalid_state', `project ${projectId} already exists`)
  }
}

export class RecurringJobTypeConflict extends DomainError {
  constructor(id: string, existingJobType: string) {
    super('recurring_job_type_conflict', `recurring job ${id} already schedules job type ${JSON.stringify(existingJobType)}`)
  }
}
