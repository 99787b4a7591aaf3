import type { Job } from '../../domain/job.ts'
import { isClaimable } from '../../domain/job.ts'
import { applyBatchIsolatingFailures, projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { consumeBatches } from '../../streams/consume.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import {
  checkpointSubject,
  eventsStreamName,
  eventsSubjectFilter,
  projectorConsumerName,
  projectorYieldSubject,
  readySubject,
} from '../../streams/names.ts'
import type { Deps } from '../runtime.ts'
import { assertStillLeading, holdLeadership, LeadershipLost } from '../leadership.ts'

/** Messages applied per transaction at most; a busy log is applied in batches this large. */
const maxBatch = 1000

/**
 * The projector role: one durable consumer over the whole log feeds every read model. Only one
 * projector runs at a time across processes (a Postgres advisory lock); the others wait as
 * hot standbys, because checkpoints are per projection, not per process.
 */
export async function start(deps: Deps): Promise<() => Promise<void>> {
  const controller = new AbortController()
  const ns = deps.config.namespace
  let lead: AbortController | undefined
  const yieldRequests = deps.nats.nc.subscribe(projectorYieldSubject(ns), {
    callback: () => {
      if (lead && !lead.signal.aborted) deps.log.info('projector: stepping down for a replay')
      lead?.abort()
    },
  })
  const done = holdLeadership(deps.sql, 'jobsvc.projector:' + ns, controller.signal, async (leaderPid) => {
    deps.log.info('projector: leading')
    lead = new AbortController()
    const signal = AbortSignal.any([controller.signal, lead.signal])
    await consumeBatches(
      deps.nats,
      {
        stream: eventsStreamName(ns),
        durable: projectorConsumerName(ns),
        filterSubject: eventsSubjectFilter(ns),
        maxBatch,
        resumeFrom: async () => (await projectedThrough(deps.sql, projections)) + 1,
      },
      async (records) => {
        const seq = await applyBatchIsolatingFailures(
          deps.sql,
          projections,
          records,
          (record, err) =>
            deps.log.error({ err, seq: record.seq, subject: record.subject }, 'projector: a message the read models cannot hold was skipped (see projection_failures)'),
          { assertLeader: (tx) => assertStillLeading(tx, leaderPid) },
        )
        announce(deps, records, seq)
      },
      signal,
      (err) => {
        deps.log.error({ err }, 'projector: consumer failed; resuming from the checkpoint')
        if (err instanceof LeadershipLost) lead?.abort()
      },
    )
  }, (err) => deps.log.error({ err }, 'projector: leadership lost'))
  return async () => {
    yieldRequests.unsubscribe()
    controller.abort()
    await done
  }
}

/**
 * After a commit: tells API processes how far the read models are (read-your-writes waits) and
 * wakes pollers of every project and queue that just got a claimable job.
 */
function announce(deps: Deps, records: readonly EventRecord[], seq: number): void {
  const ns = deps.config.namespace
  const nc = deps.nats.nc
  nc.publish(checkpointSubject(ns), String(seq))
  const now = deps.now().toISOString()
  const ready = new Set<string>()
  for (const r of records) {
    if (r.message.aggregate !== 'job') continue
    const job = r.message.state as Job | null
    if (job !== null && isClaimable(job, now)) ready.add(readySubject(ns, job.project_id, job.queue))
  }
  for (const subject of ready) nc.publish(subject)
}
