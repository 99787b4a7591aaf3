import { InvalidState } from '../../domain/errors.ts'
import type { Job } from '../../domain/job.ts'
import { jobFromRow, upsertJobRows } from '../../projections/job-list.ts'
import type { EventRecord, Loaded } from '../../streams/event-store.ts'
import type { Deps } from '../runtime.ts'
import type { JobService } from './job-service.ts'

/** Where polls look for work: one project, its queues, optionally only some job types. */
export interface ClaimTarget {
  projectId: string
  queues: string[]
  jobTypes: string[] | null
}

/** One poll's share of a claim: the worker the jobs go to, and how many it takes. */
export interface PollDemand {
  workerId: string
  capacity: number
}

export type ClaimRequest = ClaimTarget & PollDemand

/**
 * Claims for several polls of one target in one transaction: one candidate query for all of them
 * (`LIMIT` the sum of their capacities), the candidates dealt out in order, each poll taking up to
 * its capacity. Resolves to each poll's jobs, in the order of `polls`.
 *
 * Candidates come from the job list and are claimed through the log, deciding on the row itself
 * (a row is the job's whole state at its last_seq), so a claim is one append and no load.
 * `FOR UPDATE SKIP LOCKED` keeps concurrent pollers (in any process) off each other's rows; the
 * claim's append at the job's last sequence is the real guard, so a row that lags the log can
 * cost a skipped candidate but never a double claim. The claimed rows are written in the same
 * transaction, before the locks are released, so the next poller already sees them as processing.
 */
export async function claimForPolls(deps: Deps, jobs: JobService, target: ClaimTarget, polls: readonly PollDemand[]): Promise<Job[][]> {
  const now = deps.now()
  const wanted = polls.reduce((sum, p) => sum + p.capacity, 0)
  return deps.sql.begin(async (tx) => {
    const candidates = await tx`
      SELECT * FROM jobs
      WHERE project_id = ${target.projectId} AND state = 'pending' AND queue = ANY(${target.queues})
        AND available_at <= ${now}
        ${target.jobTypes === null ? tx`` : tx`AND job_type = ANY(${target.jobTypes})`}
      ORDER BY available_at, id
      LIMIT ${wanted}
      FOR UPDATE SKIP LOCKED`
    const dealt: Array<{ poll: number; row: (typeof candidates)[number] }> = []
    for (let poll = 0, next = 0; poll < polls.length && next < candidates.length; poll++) {
      for (let n = 0; n < polls[poll]!.capacity && next < candidates.length; n++) dealt.push({ poll, row: candidates[next++]! })
    }
    const outcomes = await Promise.all(
      dealt.map(({ poll, row }) =>
        claimOne(deps, jobs, target.projectId, polls[poll]!.workerId, row.id as string, { state: jobFromRow(row), seq: row.last_seq as number }),
      ),
    )
    await upsertJobRows(tx, outcomes.filter((o): o is EventRecord => o !== null))
    const claimed: Job[][] = polls.map(() => [])
    outcomes.forEach((record, i) => {
      if (record !== null && record.message.events.some((e) => e.type === 'job_claimed')) claimed[dealt[i]!.poll]!.push(record.message.state as Job)
    })
    return claimed
  })
}

/** Claims one job; on refusal returns the log's newer state instead, so the stale row heals. */
async function claimOne(deps: Deps, jobs: JobService, projectId: string, workerId: string, jobId: string, row: Loaded<Job>): Promise<EventRecord | null> {
  try {
    return (await jobs.claim(projectId, jobId, workerId, row)).record
  } catch (err) {
    if (!(err instanceof InvalidState)) throw err
    const ref = jobs.ref(projectId, jobId)
    const loaded = await deps.store.load<Job>(ref)
    return loaded.state === null ? null : deps.store.recordOf(ref, loaded.seq, [], loaded.state)
  }
}
