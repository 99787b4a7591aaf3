import { applyBatchIsolatingFailures, projectedThrough, readCheckpoints } from '../../../projections/checkpoints.ts'
import { auditLog } from '../../../projections/audit-log.ts'
import { restoreExpiredLeaves } from './rebuild.ts'
import { keptProjections } from '../../../projections/index.ts'
import { consumeBatches } from '../../../streams/consume.ts'
import { checkpointSubject, eventsStreamName, eventsSubjectFilter, projectorConsumerName, projectorYieldSubject } from '../../../streams/names.ts'
import type { ProjectionFailure } from '../../../projections/projection-failures.ts'
import { projectionFailures, projectionLag } from '../../infrastructure/metrics.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { holdLeadership, LeadershipLost } from '../../infrastructure/leadership.ts'

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
  const kept = keptProjections({ auditLog: deps.config.tunables.audit_log_enabled })
  let lead: AbortController | undefined
  const yieldRequests = deps.nats.nc.subscribe(projectorYieldSubject(ns), {
    callback: () => {
      if (lead && !lead.signal.aborted) deps.log.info('projector: stepping down for a replay')
      lead?.abort()
    },
  })
  const done = holdLeadership(
    deps.config.databaseUrl,
    'jobsvc.projector:' + ns,
    controller.signal,
    async (leadership) => {
      deps.log.info('projector: leading')
      lead = new AbortController()
      // A lock lost with its session (a Postgres restart) ends this lead at once; the next one
      // resumes from the checkpoints once the lock is taken again.
      const signal = AbortSignal.any([controller.signal, lead.signal, leadership.lost])
      await consumeBatches(
        deps.nats,
        {
          stream: eventsStreamName(ns),
          durable: projectorConsumerName(ns),
          filterSubject: eventsSubjectFilter(ns),
          maxBatch,
          lingerMs: deps.config.tunables.projector_linger_ms,
          resumeFrom: async () => {
            // An audit log built from nothing (a new database on an old log) needs retention's records first.
            if (kept.includes(auditLog) && ((await readCheckpoints(deps.sql, [auditLog])).get(auditLog.name) ?? 0) === 0)
              await restoreExpiredLeaves(deps)
            return (await projectedThrough(deps.sql, kept)) + 1
          },
        },
        async (records) => {
          const seq = await applyBatchIsolatingFailures(deps.sql, kept, records, (failure) => reportFailure(deps, failure), {
            assertLeader: leadership.assert,
          })
          announce(deps, seq)
          const committedAt = Date.now()
          for (const record of records) {
            const decidedAt = record.message.events[0]?.time
            if (decidedAt !== undefined) projectionLag.observe(Math.max(0, committedAt - Date.parse(decidedAt)) / 1000)
          }
        },
        signal,
        (err) => {
          deps.log.error({ err }, 'projector: consumer failed; resuming from the checkpoint')
          if (err instanceof LeadershipLost) lead?.abort()
        },
      )
    },
    (err) =>
      err instanceof LeadershipLost
        ? deps.log.warn({ err }, 'projector: leadership lost; taking it again')
        : deps.log.error({ err }, 'projector: cannot take the leadership lock; retrying every second'),
    { applicationName: deps.name },
  )
  return async () => {
    yieldRequests.unsubscribe()
    controller.abort()
    await done
  }
}

/** A message a read model refused: logged with its project and subject, and counted. */
function reportFailure(deps: Deps, failure: ProjectionFailure): void {
  const { record, projection, projected, err } = failure
  projectionFailures.inc({ projection, projected })
  deps.log.error(
    { err, seq: record.seq, subject: record.subject, project_id: record.message.project_id, projection, projected },
    projected === 'sanitised'
      ? `projector: ${projection} could not hold a message; its row was written from a storable copy (see projection_failures, npm run replay -- --subject)`
      : `projector: ${projection} could not hold a message and skipped it (see projection_failures, npm run replay -- --subject)`,
  )
}

/**
 * After a commit: tells API processes how far the read models are (read-your-writes waits, and
 * the ready index's warm-ups). Polls are not woken from here: each API process's ready index
 * follows the log itself and wakes its own polls.
 */
function announce(deps: Deps, seq: number): void {
  deps.nats.nc.publish(checkpointSubject(deps.config.namespace), String(seq))
}
