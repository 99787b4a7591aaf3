import { setTimeout as sleep } from 'node:timers/promises'
import { jobBulkKind } from '../../../domain/job-bulk.ts'
import type { Operation } from '../../../domain/operation.ts'
import { webhookReplayKind } from '../../../domain/webhook-replay.ts'
import { operationList } from '../../../projections/operations.ts'
import { operationHandler } from '../../../streams/aggregates.ts'
import { holdLeadership, LeadershipLost } from '../../infrastructure/leadership.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { runJobBulk } from '../../use-cases/jobs/bulk-run.ts'
import { runWebhookReplay, type ReplayPace } from '../../use-cases/webhooks/replay-run.ts'
import { EndpointPace } from './endpoint-pace.ts'

/** How often the leader looks for running operations it does not run yet (new ones, or another leader's). */
const pickUpEveryMs = 500
/** Running operations read at once; more are picked up as these end. */
const maxRunning = 100
/** After a run failed (an outage), how long before it is tried again. */
const retryAfterMs = 2_000

/** How each kind of operation is run; a kind this version does not know is left to one that does. */
const runners: Record<string, (deps: Deps, op: Operation, pace: ReplayPace, signal: AbortSignal) => Promise<void>> = {
  [webhookReplayKind]: runWebhookReplay,
  // Paced per operation by its own tunables (bulk_jobs_per_second), not per endpoint.
  [jobBulkKind]: (deps, op, _pace, signal) => runJobBulk(deps, op, signal),
}

/**
 * Runs the install's operations (domain/operation.ts), in the dispatcher role. One dispatcher
 * leads at a time (a Postgres advisory lock, as the projector's), so each operation has one run
 * and the replays' pace per endpoint holds for the whole install; another dispatcher takes over
 * within a second of the leader's end. The leader picks up every operation still running from the
 * operations read model, when it starts to lead and every half second after, and runs each from
 * the cursor its progress was recorded at: a restart resumes an operation, it does not start it
 * again. A run stopped by the role's end leaves its operation running for the next leader.
 */
export function runOperations(deps: Deps, signal: AbortSignal): Promise<void> {
  const pace = new EndpointPace(deps.config.tunables.webhook_replay_requests_per_second)
  return holdLeadership(
    deps.config.databaseUrl,
    'jobsvc.operations:' + deps.config.namespace,
    signal,
    (leadership) => lead(deps, pace, AbortSignal.any([signal, leadership.lost])),
    (err) =>
      err instanceof LeadershipLost
        ? deps.log.warn({ err }, 'dispatcher: operations leadership lost; taking it again')
        : deps.log.error({ err }, 'dispatcher: cannot take the operations leadership lock; retrying every second'),
    { applicationName: deps.name },
  )
}

async function lead(deps: Deps, pace: ReplayPace, signal: AbortSignal): Promise<void> {
  const runs = new Map<string, Promise<void>>()
  const resting = new Map<string, number>()
  const unknownKinds = new Set<string>()
  while (!signal.aborted) {
    try {
      for (const row of await operationList.running(deps.sql, maxRunning)) {
        if (runs.has(row.id) || (resting.get(row.id) ?? 0) > Date.now()) continue
        const runner = runners[row.kind]
        if (runner === undefined) {
          if (!unknownKinds.has(row.kind))
            deps.log.warn({ kind: row.kind }, 'dispatcher: an operation of a kind this version does not run is left running')
          unknownKinds.add(row.kind)
          continue
        }
        const op = (await operationHandler.load(deps.store, operationHandler.ref(row.project_id, row.id))).state
        if (op === null || op.status !== 'running') continue
        const run = runner(deps, op, pace, signal)
          .catch((err: unknown) => {
            deps.log.error({ err, project_id: op.project_id, operation_id: op.id }, 'dispatcher: an operation run failed; it resumes shortly')
            resting.set(op.id, Date.now() + retryAfterMs)
          })
          .finally(() => runs.delete(op.id))
        runs.set(op.id, run)
      }
    } catch (err) {
      if (!signal.aborted) deps.log.error({ err }, 'dispatcher: cannot read the running operations; trying again')
    }
    await sleep(pickUpEveryMs, undefined, { signal }).catch(() => undefined)
  }
  await Promise.all(runs.values())
}
