import type { Plan } from '../../domain/project.ts'
import { eventsStreamName, eventSubject } from '../../streams/names.ts'
import type { Deps } from '../runtime.ts'

const terminalStates = ['succeeded', 'dead_letter', 'cancelled']
const dayMs = 24 * 60 * 60 * 1000

/**
 * Hard-deletes terminal jobs older than their plan's retention (spec, Retention: 30 days on free
 * and starter, 90 on pro, 180 on business; JOBSVC_CONFIG may change them): the job's subject is
 * purged from the log and its row deleted, in batches of `batchSize` per plan per pass so a
 * large backlog never stalls the service. Only what the row has seen is purged (messages below
 * its `last_seq + 1`): if the job changed meanwhile (a retry), the newer message survives and the
 * projector rebuilds the row from it.
 */
export async function purgeExpiredJobs(deps: Deps, batchSize = 200): Promise<number> {
  const now = deps.now().getTime()
  const stream = eventsStreamName(deps.config.namespace)
  let purged = 0
  for (const [plan, limits] of Object.entries(deps.config.plans) as Array<[Plan, { retention_days: number }]>) {
    const cutoff = new Date(now - limits.retention_days * dayMs)
    const expired = await deps.sql<{ project_id: string; id: string; last_seq: number }[]>`
      SELECT j.project_id, j.id, j.last_seq FROM jobs j JOIN projects p ON p.id = j.project_id
      WHERE p.plan = ${plan} AND j.state IN ${deps.sql(terminalStates)} AND coalesce(j.completed_at, j.updated_at) < ${cutoff}
      ORDER BY coalesce(j.completed_at, j.updated_at)
      LIMIT ${batchSize}`
    for (const job of expired) {
      const subject = eventSubject(deps.config.namespace, job.project_id, 'job', job.id)
      await deps.nats.jsm.streams.purge(stream, { filter: subject, seq: job.last_seq + 1 })
      // The state counts lose the job with its row (a replay, which no longer sees its
      // purged events, would not count it either).
      await deps.sql`
        WITH gone AS (DELETE FROM jobs WHERE id = ${job.id} AND last_seq = ${job.last_seq} RETURNING project_id, queue, state)
        UPDATE job_state_counts c SET count = c.count - 1 FROM gone
        WHERE c.project_id = gone.project_id AND c.queue = gone.queue AND c.state = gone.state`
      await deps.sql`DELETE FROM job_state_counts WHERE project_id = ${job.project_id} AND count = 0`
      await deps.heartbeats.delete(job.id).catch(() => undefined)
      purged++
    }
  }
  if (purged > 0) deps.log.info({ purged }, 'scheduler: expired terminal jobs deleted')
  return purged
}

/** Minute buckets serve windows of 12 hours at most (README, "Metrics"); a week of them is kept. */
export const minuteThroughputKeptMs = 7 * dayMs

/** Deletes throughput minute buckets older than a week; hours and days stay. */
export async function pruneMinuteThroughput(deps: Deps): Promise<number> {
  const cutoff = new Date(deps.now().getTime() - minuteThroughputKeptMs)
  const deleted = await deps.sql`DELETE FROM job_throughput WHERE resolution = 'minute' AND bucket_start < ${cutoff}`
  return deleted.count
}
