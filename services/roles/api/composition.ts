import type { Deps } from '../../infrastructure/runtime.ts'
import { AuditCheckpoints } from '../../use-cases/audit/checkpoints.ts'
import { EventFeed } from '../../use-cases/events/event-feed.ts'
import { ClaimLine } from '../../use-cases/jobs/claim-line.ts'
import { claimForPolls } from '../../use-cases/jobs/claimer.ts'
import { JobService } from '../../use-cases/jobs/job-service.ts'
import { ReadyIndex } from '../../use-cases/jobs/ready-index/index.ts'
import { BillingService } from '../../use-cases/metering/billing-service.ts'
import { PromoCodes } from '../../use-cases/metering/promo-codes.ts'
import { RequestRateLimiter } from '../../use-cases/metering/request-rate.ts'
import { WorkerPresence } from '../../use-cases/workers/worker-presence.ts'
import { AccountLifecycle } from '../../use-cases/platform/account-lifecycle.ts'
import { AccountService } from '../../use-cases/platform/accounts.ts'
import { TeamService } from '../../use-cases/platform/team-service.ts'
import { StaffService } from '../../use-cases/staff/staff-service.ts'
import { ApiKeyDirectory } from './api-key-directory.ts'
import { PausedQueues } from './paused-queues.ts'
import { FlowControl } from '../../use-cases/jobs/flow-control.ts'
import type { ApiContext } from './context.ts'
import { openIdempotencyStore } from './idempotency-hooks.ts'
import { LogHead } from './log-head.ts'
import { ProjectSlots } from './project-slots.ts'
import { ProjectionWatcher } from './projection-watcher.ts'

/** Two polls of the largest capacity (50): a transaction's appends stay a modest burst. */
const maxJobsPerClaimTransaction = 100

/**
 * Job state the ready index keeps in memory, payloads included (as encoded in the log). Past it,
 * candidates are held without their state and a claim loads the job first (one direct get).
 */
const readyIndexStateBytes = 32 * 1024 * 1024

/**
 * The API process's use cases and per-process helpers, built on the runtime and started: the key
 * directory and the projection watcher follow the log, the ready index is warm.
 */
export async function composeContext(deps: Deps, stopping: AbortSignal): Promise<ApiContext> {
  const accounts = new AccountService(deps)
  const team = new TeamService(deps, accounts)
  const jobs = new JobService(deps)
  const billing = new BillingService(deps)
  const t = deps.config.tunables
  const watcher = new ProjectionWatcher(deps)
  const ready = new ReadyIndex(
    deps,
    watcher,
    { jobsPerProject: t.ready_index_jobs_per_project, jobs: t.ready_index_jobs, stateBytes: readyIndexStateBytes },
    (projectId) => jobs.lastPendingSeq.get(projectId) ?? 0,
  )
  jobs.observer = ready.observer
  const keys = new ApiKeyDirectory(deps)
  // Flow limits (issue 29): the queues' limits from the projects this process follows, and the
  // gates its claims found full, freed again by this process's acks and by the log's.
  const flow = new FlowControl(
    (projectId) => keys.current(projectId),
    (projectId, queue) => ready.wakeQueue(projectId, queue),
  )
  jobs.gateFreed = (projectId, gates) => flow.freed(projectId, gates)
  ready.onAttemptEnded = (projectId, decode) => flow.attemptEnded(projectId, decode)
  const context: ApiContext = {
    deps,
    jobs,
    keys,
    pauses: new PausedQueues(keys, ready, deps.now),
    flow,
    ready,
    watcher,
    accounts,
    team,
    accountExports: new AccountLifecycle(deps, accounts, team),
    requestRate: new RequestRateLimiter(deps.meteringSql),
    presence: new WorkerPresence(deps.meteringSql),
    billing,
    promoCodes: new PromoCodes(deps),
    staff: new StaffService(deps, { accounts, billing }),
    idempotency: openIdempotencyStore(deps),
    polls: new ProjectSlots(t.max_polls_per_project),
    streams: new ProjectSlots(t.max_event_streams_per_project),
    claims: new ClaimLine((target, polls) => claimForPolls(deps, jobs, target, polls, (jobId, seq) => ready.isStale(jobId, seq), flow), {
      perProject: t.claim_transactions_per_project,
      total: t.claim_transactions,
      jobsPerTransaction: maxJobsPerClaimTransaction,
    }),
    logHead: new LogHead(() => deps.store.lastSequence()),
    feed: new EventFeed(deps, (seq, maxWaitMs) => watcher.waitFor(seq, maxWaitMs)),
    audit: new AuditCheckpoints(deps),
    stopping,
  }
  context.keys.start()
  context.watcher.start()
  await context.ready.start()
  return context
}

/** Stops what `composeContext` started, when the app closes. */
export async function stopContext(context: ApiContext): Promise<void> {
  context.keys.stop()
  context.pauses.stop()
  context.feed.close()
  await context.ready.stop()
  context.watcher.stop()
  await context.requestRate.stop()
  await context.presence.stop()
  await context.billing.allowance.stop()
}
