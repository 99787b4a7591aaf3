import { InvalidState } from '../../domain/errors.ts'
import type { Job } from '../../domain/job.ts'
import { jobFromRow, upsertJobRows } from '../../projections/job-list.ts'
import type { EventRecord, Loaded } from '../../streams/event-store.ts'
import type { Deps } from '../runtime.ts'
import type { JobService } from './job-service.ts'

export interface ClaimRequest {
  projectId: string
  workerId: string
  queues: string[]
  jobTypes: string[] | null
  capacity: number
}

/**
 * Finds candidates in the job list and claims them through the log, deciding on the row itself
 * (a row is the job's whole state at its last_seq), so a claim is one append and no load. `FOR UPDATE SKIP LOCKED`
 * keeps concurrent pollers (in any process) off each other's rows; the claim's append at the
 * job's last sequence is the real guard, so a row that lags the log can cost a skipped
 * candidate but never a double claim. The claimed rows are written in the same transaction,
 * before the locks are released, so the next poller already sees them as processing.
 */
export async function claimJobs(deps: Deps, jobs: JobService, req: ClaimRequest): Promise<Job[]> {
  const now = deps.now()
  return deps.sql.begin(async (tx) => {
    const candidates = await tx`
      SELECT * FROM jobs
      WHERE project_id = ${req.projectId} AND state = 'pending' AND queue = ANY(${req.queues})
        AND available_at <= ${now}
        ${req.jobTypes === null ? tx`` : tx`AND job_type = ANY(${req.jobTypes})`}
      ORDER BY available_at, id
      LIMIT ${req.capacity}
      FOR UPDATE SKIP LOCKED`
    if (candidates.length === 0) return []
    const outcomes = await Promise.all(
      candidates.map((row) => claimOne(deps, jobs, req, row.id as string, { state: jobFromRow(row), seq: row.last_seq as number })),
    )
    const records = outcomes.filter((o): o is EventRecord => o !== null)
    await upsertJobRows(tx, records)
    return records
      .filter((r) => r.message.events.some((e) => e.type === 'job_claimed'))
      .map((r) => r.message.state as Job)
  })
}

/** Claims one job; on refusal returns the log's newer state instead, so the stale row heals. */
async function claimOne(deps: Deps, jobs: JobService, req: ClaimRequest, jobId: string, row: Loaded<Job>): Promise<EventRecord | null> {
  try {
    return (await jobs.claim(req.projectId, jobId, req.workerId, row)).record
  } catch (err) {
    if (!(err instanceof InvalidState)) throw err
    const ref = jobs.ref(req.projectId, jobId)
    const loaded = await deps.store.load<Job>(ref)
    return loaded.state === null ? null : deps.store.recordOf(ref, loaded.seq, [], loaded.state)
  }
}
