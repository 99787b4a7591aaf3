import { jobList, type ExpiredJob } from '../../../projections/job-list.ts'
import { jobMetrics } from '../../../projections/job-metrics.ts'
import { heartbeatMaxAgeMs } from '../../../streams/definitions.ts'
import { LogPruner } from '../../../streams/log-pruner.ts'
import { auditExpiryHandler, projectHandler } from '../../../streams/aggregates.ts'
import { auditLog } from '../../../projections/audit-log.ts'
import type { Tx } from '../../../projections/database.ts'
import { eventSubject } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { eachIsolated, IsolatedPass } from '../../infrastructure/failing-items.ts'

const dayMs = 24 * 60 * 60 * 1000

/** Jobs per pass: one transaction, one statement that picks and deletes them, one for the counts. */
export const retentionBatchSize = 1000

/**
 * Jobs whose messages are removed at once. Each job is a chain of requests (a direct get per
 * message, then the deletes), so this many chains keep the server busy without a long queue
 * behind a pass; measured here, 64 reached the server's rate and more gained nothing.
 */
const pruneConcurrency = 64

/**
 * A heartbeat entry is written while its attempt runs, so it is older than the job's end and the
 * bucket's TTL has removed it once the job ended that long ago (plus an hour for clocks that
 * disagree). Only a plan keeping terminal jobs less than that (`retention_days` of 1 or 2) can
 * find one left, and only then is a delete worth a KV write (a delete marker, itself kept until
 * the TTL).
 */
const heartbeatOutlivesJobMs = heartbeatMaxAgeMs + 60 * 60 * 1000

export interface RetentionPass {
  /** Jobs deleted: their rows, their state counts and their messages. */
  jobs: number
  /** Messages removed from the log. */
  messages: number
  /** Jobs whose subject was purged whole because their chain could not be walked (see LogPruner). */
  purgedBySubject: number
  /** The pass took a whole batch: more may be waiting, so the next pass should follow at once. */
  full: boolean
}

/**
 * Hard-deletes terminal jobs older than their plan's retention (spec, Retention: 30 days on free
 * and starter, 90 on pro, 180 on business; JOBSVC_CONFIG may change them), a batch per pass: the
 * job's messages leave the log, its row and its place in the state counts leave the read
 * models, together.
 *
 * One pass is one transaction. Its first statement picks the batch and locks the rows; their
 * messages are then removed from the log while the transaction is open, and the rows whose
 * messages are gone are deleted and the counts adjusted before it commits. So:
 * - a crash or a NATS outage mid-pass rolls the deletes back, and the next pass picks the rows
 *   again (removing messages is idempotent): a row is never gone while its messages stay;
 * - a job whose messages cannot be removed (anything but an outage) keeps its row, is logged and
 *   held back from the next passes (failing-items.ts), and the rest of the batch goes on;
 * - several schedulers share the backlog: rows one has picked are locked, and the others skip
 *   them (SKIP LOCKED), so no job is removed or subtracted twice;
 * - only what the row has seen leaves the log (messages up to its `last_seq`). A job retried
 *   after the pick keeps its new message, and the projector rebuilds its row from it. Live and a
 *   replay agree on it, since both apply that message to a job with no earlier history; the
 *   price is that the state it left (dead_letter, cancelled) stays subtracted once in the counts
 *   of its queue. The window is one pass (a retry the projector applied before the pick leaves a
 *   row that is not terminal, which is not picked), for a job past its retention.
 *
 * Fairness: projects are taken in id order starting after the last project the previous pass of
 * this process served, each giving its oldest expired jobs, so every project of every plan gets
 * its turn however large another's backlog is.
 */
export class Retention {
  readonly #deps: Deps
  readonly #pruner: LogPruner
  readonly #pass: IsolatedPass
  #afterProject = ''

  constructor(deps: Deps) {
    this.#deps = deps
    this.#pruner = new LogPruner(deps.nats.nc, deps.config.namespace)
    this.#pass = new IsolatedPass(deps.log, 'retention pass')
  }

  async pass(): Promise<RetentionPass> {
    const deps = this.#deps
    const now = deps.now().getTime()
    const cutoffs = Object.entries(deps.config.plans).map(([plan, limits]) => ({
      plan,
      cutoff: new Date(now - limits.retention_days * dayMs).toISOString(),
    }))
    let messages = 0
    let purgedBySubject = 0
    let picked = 0
    const deleted = await deps.sql.begin(async (tx) => {
      // The projects are ordered before the lateral join so that it stops probing them once the
      // batch is full; each probe is one range scan of jobs_terminal_by_project_end. Jobs held
      // back after failing (failing-items.ts) are left for a later pass.
      const rows = await jobList.expiredTerminal(tx, cutoffs, this.#afterProject, this.#pass.heldBack(), retentionBatchSize)
      picked = rows.length
      if (rows.length === 0) return rows
      // Each project records first how far its history is about to go (domain/project/lifecycle.ts,
      // `history_expired`): its event feed then refuses a cursor that the removal would jump over.
      // Recorded even if this pass rolls back: the next one removes the same messages.
      await this.#recordExpiry(rows)
      // And the hashes of the leaves those messages are in each project's Merkle log, so that a
      // tree rebuilt from the log keeps them in their places (domain/audit-expiry.ts).
      await this.#recordExpiredLeaves(tx, rows)
      // A job whose messages cannot be removed keeps its row (its messages, some perhaps removed
      // already, are removed again by a later pass) and does not stop the others.
      const pruned: ExpiredJob[] = []
      // A job's progress reports are on a subject of their own, removed with it.
      await this.#pass.each(rows, pruneConcurrency, async (job) => {
        const subjects: Array<{ kind: 'job' | 'progress'; through: number }> = [{ kind: 'job', through: job.last_seq }]
        if (job.progress_seq !== null) subjects.push({ kind: 'progress', through: job.progress_seq })
        for (const { kind, through } of subjects) {
          const result = await this.#pruner.removeThrough(eventSubject(deps.config.namespace, job.project_id, kind, job.id), through)
          messages += result.messages
          if (result.purgedBySubject) purgedBySubject++
        }
        pruned.push(job)
      })
      if (pruned.length === 0) return pruned
      await jobList.deleteRows(
        tx,
        pruned.map((j) => j.id),
      )
      await jobMetrics.subtractStateCounts(tx, pruned)
      for (const [projectId, jobs] of byProject(pruned)) await auditLog.forgetPositions(tx, projectId, jobs)
      return pruned
    })
    if (deleted.length > 0) {
      this.#afterProject = nextProjectCursor(deleted, this.#afterProject)
      const maybeBeating = deleted.filter((job) => now - job.ended_at.getTime() < heartbeatOutlivesJobMs)
      await eachIsolated(
        maybeBeating,
        pruneConcurrency,
        async (job) => void (await deps.heartbeats.delete(job.id).catch(() => undefined)),
        () => undefined,
      )
      deps.log.info({ jobs: deleted.length, messages, purged_by_subject: purgedBySubject }, 'scheduler: expired terminal jobs deleted')
    }
    return { jobs: deleted.length, messages, purgedBySubject, full: picked === retentionBatchSize }
  }

  close(): void {
    this.#pruner.close()
  }

  /** Appends, per project, the leaves of the messages the pass may remove (several records for many). */
  async #recordExpiredLeaves(tx: Tx, rows: readonly ExpiredJob[]): Promise<void> {
    const now = this.#deps.now().toISOString()
    for (const [projectId, jobs] of byProject(rows)) {
      for (const runs of await auditLog.expiringLeaves(tx, projectId, jobs)) {
        await auditExpiryHandler.decide(this.#deps, auditExpiryHandler.ref(projectId), {
          type: 'record_expired_leaves',
          data: { project_id: projectId, runs },
          meta: { now },
        })
      }
    }
  }

  /** Appends each project's `history_expired` through the last message the pass may remove of it. */
  async #recordExpiry(rows: readonly ExpiredJob[]): Promise<void> {
    const byProject = new Map<string, { through: number; jobs: number }>()
    for (const job of rows) {
      const p = byProject.get(job.project_id) ?? { through: 0, jobs: 0 }
      p.through = Math.max(p.through, job.last_seq, job.progress_seq ?? 0)
      p.jobs++
      byProject.set(job.project_id, p)
    }
    const now = this.#deps.now().toISOString()
    await Promise.all(
      [...byProject].map(([projectId, { through, jobs }]) =>
        projectHandler.decide(this.#deps, projectHandler.ref(projectId), {
          type: 'record_history_expired',
          data: { through_seq: through, jobs },
          meta: { now },
        }),
      ),
    )
  }
}

/** The jobs' ids by project. */
function byProject(rows: readonly ExpiredJob[]): Map<string, string[]> {
  const out = new Map<string, string[]>()
  for (const job of rows) out.set(job.project_id, [...(out.get(job.project_id) ?? []), job.id])
  return out
}

/** The project the next pass starts after: the last one this pass reached in its order. */
function nextProjectCursor(rows: readonly ExpiredJob[], after: string): string {
  const ids = rows.map((r) => r.project_id)
  const wrapped = ids.filter((id) => id <= after)
  const list = wrapped.length > 0 ? wrapped : ids
  return list.reduce((a, b) => (b > a ? b : a))
}

/**
 * Deletes expired terminal jobs until none is left (or a pass finds only jobs another scheduler
 * holds), and resolves to how many this call deleted. The scheduler runs passes itself, one at a
 * time between its other duties; this is for tools and tests.
 */
export async function purgeExpiredJobs(deps: Deps): Promise<number> {
  const retention = new Retention(deps)
  try {
    let total = 0
    for (;;) {
      const pass = await retention.pass()
      total += pass.jobs
      if (!pass.full) return total
    }
  } finally {
    retention.close()
  }
}

/** Minute buckets serve windows of 12 hours at most (docs/api-notes.md, "Metrics"); a week of them is kept. */
export const minuteThroughputKeptMs = 7 * dayMs

/** Deletes throughput minute buckets older than a week; hours and days stay. */
export async function pruneMinuteThroughput(deps: Deps): Promise<number> {
  const cutoff = new Date(deps.now().getTime() - minuteThroughputKeptMs)
  return jobMetrics.pruneMinuteThroughput(deps.sql, cutoff)
}
