import type { Actor } from '../../../domain/decider.ts'
import { BulkLimitExceeded } from '../../../domain/errors.ts'
import { bulkSampleSize, jobBulkKind, type JobBulkParams } from '../../../domain/job-bulk.ts'
import { jobList } from '../../../projections/job-list.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { OperationService } from '../operations/operation-service.ts'

/**
 * Bulk actions on a project's jobs by filter (domain/job-bulk.ts; docs/api-notes.md, "Bulk
 * actions by filter"): counted here from the job list when asked, then run as an operation by the
 * dispatcher role (bulk-run.ts).
 */

/** What a bulk action counted before it runs: its params, how many jobs match, and the first of them. */
export interface BulkPlan {
  params: JobBulkParams
  matched: number
  sampleIds: string[]
}

export class JobBulkActions {
  readonly #deps: Deps
  readonly #operations: OperationService

  constructor(deps: Deps, operations: OperationService) {
    this.#deps = deps
    this.#operations = operations
  }

  /**
   * The jobs `params` (without its `through`) match now, from the job list: counted up to the
   * project's cap (`maxJobs`; past it BulkLimitExceeded, so a dry run predicts the refusal too),
   * the last of them, which bounds the run, and a sample of the first ones the run takes.
   */
  async plan(projectId: string, params: Omit<JobBulkParams, 'through'>, maxJobs: number): Promise<BulkPlan> {
    const sql = this.#deps.sql
    const through = await jobList.bulkLast(sql, projectId, params.filter)
    if (through === null) return { params: { ...params, through }, matched: 0, sampleIds: [] }
    const matched = await jobList.bulkCount(sql, projectId, params.filter, through, maxJobs + 1)
    if (matched > maxJobs) {
      throw new BulkLimitExceeded(
        `the filter matches more than ${maxJobs} jobs, the most one bulk action of this project's plan may change: narrow it (by time, queue or job type) and run several`,
      )
    }
    const sample = await jobList.bulkPage(sql, projectId, params.filter, null, through, bulkSampleSize)
    return { params: { ...params, through }, matched, sampleIds: sample.map((r) => r.id) }
  }

  /** Starts the action `plan` counted as an operation; the dispatcher role runs it. */
  start(projectId: string, plan: BulkPlan, actor?: Actor) {
    return this.#operations.start(projectId, jobBulkKind, { ...plan.params }, plan.matched, actor)
  }
}
