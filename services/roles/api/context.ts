import type { Deps } from '../../infrastructure/runtime.ts'
import type { AuditCheckpoints } from '../../use-cases/audit/checkpoints.ts'
import type { EventFeed } from '../../use-cases/events/event-feed.ts'
import type { ClaimLine } from '../../use-cases/jobs/claim-line.ts'
import type { ClaimedJob } from '../../use-cases/jobs/claimer.ts'
import type { JobService } from '../../use-cases/jobs/job-service.ts'
import type { ReadyIndex } from '../../use-cases/jobs/ready-index/index.ts'
import type { BillingService } from '../../use-cases/metering/billing-service.ts'
import type { IdempotencyStore } from './idempotency-store.ts'
import type { PromoCodes } from '../../use-cases/metering/promo-codes.ts'
import type { StaffService } from '../../use-cases/staff/staff-service.ts'
import type { RequestRateLimiter } from '../../use-cases/metering/request-rate.ts'
import type { AccountLifecycle } from '../../use-cases/platform/account-lifecycle.ts'
import type { AccountService } from '../../use-cases/platform/accounts.ts'
import type { TeamService } from '../../use-cases/platform/team-service.ts'
import type { WorkerPresence } from '../../use-cases/workers/worker-presence.ts'
import type { ApiKeyDirectory } from './api-key-directory.ts'
import type { LogHead } from './log-head.ts'
import type { PausedQueues } from './paused-queues.ts'
import type { FlowControl } from '../../use-cases/jobs/flow-control.ts'
import type { ProjectSlots } from './project-slots.ts'
import type { ProjectionWatcher } from './projection-watcher.ts'

/** What routes are handed: the runtime plus the per-process helpers built on it. */
export interface ApiContext {
  deps: Deps
  jobs: JobService
  keys: ApiKeyDirectory
  /** The queues paused now, as the project's events say, for the polls (paused-queues.ts). */
  pauses: PausedQueues
  /** The queues' flow limits and the gates this process's claims found full (issue 29, flow-control.ts). */
  flow: FlowControl
  /** The claimable jobs of this process's polls, followed from the log: where claims come from. */
  ready: ReadyIndex
  watcher: ProjectionWatcher
  accounts: AccountService
  team: TeamService
  accountExports: AccountLifecycle
  requestRate: RequestRateLimiter
  /** The workers this process saw (polls, heartbeats, acks, registrations), written every second. */
  presence: WorkerPresence
  billing: BillingService
  promoCodes: PromoCodes
  /** What `is_admin` users do through `/platform/v1/admin`. */
  staff: StaffService
  /** Idempotency keys and the answers stored under them (header keys, and batch items' body keys). */
  idempotency: IdempotencyStore
  /** Worker polls in flight per project (docs/api-notes.md, "Poll"). */
  polls: ProjectSlots
  /** Progress streams open per project. */
  streams: ProjectSlots
  /** Where polls take turns to run their read-model claim transactions (the index's fallback). */
  claims: ClaimLine<ClaimedJob>
  /** How far the log reaches, for `min_seq`. */
  logHead: LogHead
  /** The projects' event feeds, and the readers kept between their pages (services/use-cases/events/). */
  feed: EventFeed
  /** Signed checkpoints of the projects' Merkle logs, and the keys that sign them (docs/audit.md). */
  audit: AuditCheckpoints
  /** Aborted when the process begins to stop: waiting long polls answer 503 then. */
  stopping: AbortSignal
}
