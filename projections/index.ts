import { activityFeed } from './activity.ts'
import { alertSettings } from './alerts.ts'
import { auditLog } from './audit-log.ts'
import { webhookSubscriptions } from './webhooks.ts'
import { webhookDeliveries } from './deliveries.ts'
import { eventConsumers } from './event-consumers.ts'
import { flowGates } from './flow-gates.ts'
import { jobList } from './job-list.ts'
import { jobMetrics } from './job-metrics.ts'
import { operationList } from './operations.ts'
import { projectDirectory } from './project-directory.ts'
import type { Projection } from './projection.ts'
import { recurringJobs } from './recurring-jobs.ts'

/** Every read model the projector maintains, in the order they are applied within a batch. */
export const projections: readonly Projection[] = [
  projectDirectory,
  jobList,
  jobMetrics,
  recurringJobs,
  alertSettings,
  webhookSubscriptions,
  webhookDeliveries,
  operationList,
  eventConsumers,
  flowGates,
  activityFeed,
  auditLog,
]

/**
 * The read models an install keeps: every one, less the projects' Merkle logs where the
 * `audit_log_enabled` tunable is off (what the benchmark compares its cost against). Turned on
 * again, the Merkle log catches up from its own checkpoint.
 */
export function keptProjections(options: { auditLog: boolean }): readonly Projection[] {
  return options.auditLog ? projections : projections.filter((p) => p !== auditLog)
}

/**
 * How a replay splits the read models into lanes rebuilt side by side (services/roles/projector/
 * rebuild.ts): the jobs' rows alone, a third of a replay's time and nearly all of it in Postgres,
 * and every other read model together. Each projection writes only its own tables, so the lanes
 * never touch the same rows.
 */
export function replayLanes(kept: readonly Projection[]): Array<readonly Projection[]> {
  return [kept.filter((p) => p === jobList), kept.filter((p) => p !== jobList)].filter((lane) => lane.length > 0)
}
