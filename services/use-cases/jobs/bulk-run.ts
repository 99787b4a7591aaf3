import { setImmediate as yieldToOthers, setTimeout as sleep } from 'node:timers/promises'
import { DomainError, InvalidState, JobNotFound } from '../../../domain/errors.ts'
import { fromBulkCursorText, toBulkCursorText, type BulkAction, type BulkPosition, type JobBulkParams } from '../../../domain/job-bulk.ts'
import { jobStates } from '../../../domain/job.ts'
import type { Operation, OperationCommand } from '../../../domain/operation.ts'
import { jobList, type BulkJobRow } from '../../../projections/job-list.ts'
import { applyOperationRows } from '../../../projections/operations.ts'
import { jobHandler, operationHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { JobService } from './job-service.ts'

/** Jobs a run reads and records at once at most: one record of progress on the operation per page. */
const maxPageSize = 500

/** A page is a tenth of a second's work at the operation's pace, so a stop or a restart lands within one. */
function pageSizeFor(jobsPerSecond: number): number {
  return Math.max(1, Math.min(maxPageSize, Math.ceil(jobsPerSecond / 10)))
}

/** How one action changes one job, named by its operation; it throws the job's refusal where the action does not apply. */
type BulkApplier = (jobs: JobService, projectId: string, jobId: string, params: JobBulkParams, operationId: string) => Promise<unknown>

/** How each action changes one job: the single-job route's own command, naming the operation. */
const bulkAppliers: Record<BulkAction, BulkApplier> = {
  retry: (jobs, projectId, jobId, _params, operationId) => jobs.retry(projectId, jobId, undefined, operationId),
  cancel: (jobs, projectId, jobId, _params, operationId) => jobs.cancel(projectId, jobId, undefined, false, operationId),
  // The same priority again records nothing; the job still counts as done (succeeded).
  set_priority: (jobs, projectId, jobId, params, operationId) => jobs.setPriority(projectId, jobId, params.priority!, { operationId }),
}

/** What a page did: jobs changed, jobs skipped (their state no longer allowed the action, or they were gone). */
interface Outcomes {
  succeeded: number
  failed: number
}

/**
 * Runs a bulk job action (domain/job-bulk.ts) from where it stands until it ends, is stopped
 * (cancelled: the next record of progress is refused) or `signal` aborts (the role stops; the
 * operation stays running and the next run resumes it).
 *
 * The run walks the matching jobs in the job list's order up to the last one counted, a page at a
 * time: each page is first counted on the operation (`processed`, the cursor naming the page),
 * then acted on, job by job, with a bounded number of appends in flight and at a bounded pace.
 * Each job changed is one event carrying the operation's id; a job whose state no longer allows
 * the action (the read model lagged, or someone else moved it) is counted as `failed` (skipped),
 * never an error of the operation. A run resuming acts again on the page its cursor names: a job
 * whose log holds this operation's event since that page was recorded is counted, not changed
 * twice.
 */
export async function runJobBulk(deps: Deps, operation: Operation, signal: AbortSignal): Promise<void> {
  await new BulkRun(deps, operation, signal).run()
}

class BulkRun {
  readonly #deps: Deps
  readonly #signal: AbortSignal
  readonly #params: JobBulkParams
  readonly #projectId: string
  readonly #jobs: JobService
  readonly #apply: BulkApplier
  readonly #pageSize: number
  #op: Operation
  #opSeq = 0
  #outcomes: Outcomes

  constructor(deps: Deps, operation: Operation, signal: AbortSignal) {
    this.#deps = deps
    this.#signal = signal
    this.#op = operation
    this.#params = operation.params as unknown as JobBulkParams
    this.#projectId = operation.project_id
    this.#jobs = new JobService(deps)
    this.#apply = bulkAppliers[this.#params.action]
    this.#pageSize = pageSizeFor(deps.config.tunables.bulk_jobs_per_second)
    this.#outcomes = { succeeded: operation.succeeded, failed: operation.failed }
  }

  async run(): Promise<void> {
    const loaded = await operationHandler.load(this.#deps.store, this.#ref())
    if (loaded.state === null || loaded.state.status !== 'running') return
    this.#op = loaded.state
    this.#opSeq = loaded.seq
    this.#outcomes = { succeeded: this.#op.succeeded, failed: this.#op.failed }
    const cursor = fromBulkCursorText(this.#op.cursor)
    if (cursor !== null && !(await this.#redo(cursor.from, cursor.to))) return
    let after = cursor?.to ?? null
    const through = this.#params.through
    for (;;) {
      if (this.#signal.aborted) return
      const rows =
        through === null ? [] : await jobList.bulkPage(this.#deps.sql, this.#projectId, this.#params.filter, after, through, this.#pageSize)
      if (rows.length === 0) {
        await this.#record({ type: 'finish_operation', data: { matched: this.#op.processed, ...this.#outcomes }, meta: this.#meta() })
        return
      }
      const to = positionOf(rows.at(-1)!)
      const recorded = await this.#record({
        type: 'record_progress',
        data: { cursor: toBulkCursorText({ from: after, to }), processed: this.#op.processed + rows.length, ...this.#outcomes },
        meta: this.#meta(),
      })
      if (!recorded) return void (await this.#settleStopped())
      const page = await this.#actOn(rows.map((r) => r.id))
      if (page === null) return
      this.#outcomes = { succeeded: this.#outcomes.succeeded + page.succeeded, failed: this.#outcomes.failed + page.failed }
      after = to
      // Between pages, other work of this process (other operations, other tenants') runs first.
      await yieldToOthers()
    }
  }

  /**
   * The page a stopped run had counted (after `from`, through `to`), acted on again: its jobs are
   * those of the range that this operation changed since the page was recorded (counted, not
   * changed again) and those the action still applies to; the rest of what the page counted were
   * skipped. False when the run must stop.
   */
  async #redo(from: BulkPosition | null, to: BulkPosition): Promise<boolean> {
    const counted = this.#op.processed - this.#op.succeeded - this.#op.failed
    const anyState = { ...this.#params.filter, states: [...jobStates] }
    const recordedAt = this.#opSeq
    const ids: string[] = []
    for (let after = from; ;) {
      const rows = await jobList.bulkPage(this.#deps.sql, this.#projectId, anyState, after, to, this.#pageSize)
      ids.push(...rows.map((r) => r.id))
      if (rows.length < this.#pageSize) break
      after = positionOf(rows.at(-1)!)
    }
    const changedBefore = await this.#changedSince(ids, recordedAt)
    const page = await this.#actOn(ids.filter((id) => !changedBefore.has(id)))
    if (page === null) return false
    const succeeded = changedBefore.size + page.succeeded
    const processed = this.#op.processed + Math.max(0, succeeded - counted)
    this.#outcomes = { succeeded: this.#outcomes.succeeded + succeeded, failed: this.#outcomes.failed + Math.max(0, counted - succeeded) }
    if (processed === this.#op.processed) return true
    const recorded = await this.#record({
      type: 'record_progress',
      data: { cursor: this.#op.cursor, processed, ...this.#outcomes },
      meta: this.#meta(),
    })
    if (!recorded) await this.#settleStopped()
    return recorded
  }

  /** Those of `ids` whose log holds an event of this operation after the stream sequence `seq`. */
  async #changedSince(ids: readonly string[], seq: number): Promise<Set<string>> {
    const changed = new Set<string>()
    await this.#inFlight(ids, async (id) => {
      const ref = jobHandler.ref(this.#projectId, id)
      for (let record = await jobHandler.next(this.#deps.store, ref, seq + 1); record !== null;) {
        if (record.message.events.some((e) => (e.data as { operation_id?: string }).operation_id === this.#op.id)) return void changed.add(id)
        record = await jobHandler.next(this.#deps.store, ref, record.seq + 1)
      }
    })
    return changed
  }

  /**
   * Applies the action to each job, `bulk_jobs_in_flight` at a time and at most
   * `bulk_jobs_per_second`; null when `signal` aborted part-way (the page is acted on again by the
   * next run).
   */
  async #actOn(ids: readonly string[]): Promise<Outcomes | null> {
    const apply = this.#apply
    const started = Date.now()
    const outcomes: Outcomes = { succeeded: 0, failed: 0 }
    await this.#inFlight(ids, async (id) => {
      try {
        await apply(this.#jobs, this.#projectId, id, this.#params, this.#op.id)
        outcomes.succeeded++
      } catch (err) {
        if (!(err instanceof InvalidState || err instanceof JobNotFound)) throw err
        outcomes.failed++
      }
    })
    if (this.#signal.aborted) return null
    const paceMs = (ids.length / this.#deps.config.tunables.bulk_jobs_per_second) * 1000 - (Date.now() - started)
    if (paceMs > 0 && !(await pause(paceMs, this.#signal))) return null
    return outcomes
  }

  /** Runs `each` over `ids` with at most `bulk_jobs_in_flight` at once, taking no more once `signal` aborted. */
  async #inFlight(ids: readonly string[], each: (id: string) => Promise<void>): Promise<void> {
    let next = 0
    const lane = async () => {
      while (next < ids.length && !this.#signal.aborted) await each(ids[next++]!)
    }
    await Promise.all(Array.from({ length: Math.min(this.#deps.config.tunables.bulk_jobs_in_flight, ids.length) }, lane))
  }

  /**
   * The operation refused a record: it was stopped meanwhile. The page acted on before the stop
   * is recorded with its outcomes, so that a cancelled operation's counts add up.
   */
  async #settleStopped(): Promise<void> {
    await this.#record({ type: 'record_outcomes', data: this.#outcomes, meta: this.#meta() })
  }

  /**
   * Decides `command` on the operation from the state this run holds (a load only when another
   * writer came between). False when the operation refuses it (it was stopped or has ended) or
   * decides nothing (another run is ahead of this one).
   */
  async #record(command: OperationCommand): Promise<boolean> {
    try {
      const result = await operationHandler.decide(this.#deps, this.#ref(), command, { hint: { state: this.#op, seq: this.#opSeq } })
      if (result.state === null) return false
      this.#op = result.state
      this.#opSeq = result.seq
      if (!result.appended) return false
      // The list's row at once, as the API writes it on a start or a stop (the projector writes it too).
      await applyOperationRows(this.#deps.sql, [result.record])
      return true
    } catch (err) {
      if (err instanceof DomainError) return false
      throw err
    }
  }

  #meta() {
    return { now: this.#deps.now().toISOString() }
  }

  #ref() {
    return operationHandler.ref(this.#projectId, this.#op.id)
  }
}

function positionOf(row: BulkJobRow): BulkPosition {
  return { created_at: row.created_at, id: row.id }
}

/** Waits `ms`; false when `signal` aborted first. */
async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal })
    return true
  } catch {
    return false
  }
}
