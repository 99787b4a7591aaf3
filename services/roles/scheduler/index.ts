import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { JobNotFound } from '../../../domain/errors.ts'
import { isAttemptStale } from '../../../domain/job.ts'
import { flowGates } from '../../../projections/flow-gates.ts'
import { jobList } from '../../../projections/job-list.ts'
import { reconcileGate, unclaimedSlotGraceMs } from '../../use-cases/jobs/flow-gates.ts'
import { projectDirectory } from '../../../projections/project-directory.ts'
import type { RetryPolicies } from '../../../domain/retry-policy.ts'
import { projectHandler } from '../../../streams/aggregates.ts'
import { JobService } from '../../use-cases/jobs/job-service.ts'
import { RecurringPass } from '../../use-cases/jobs/recurring-service.ts'
import { billingPeriodOf } from '../../use-cases/metering/allowance.ts'
import { BillingService } from '../../use-cases/metering/billing-service.ts'
import { pruneMinuteThroughput, Retention } from './retention.ts'
import { AuditCheckpoints } from '../../use-cases/audit/checkpoints.ts'
import { evaluateAlerts } from '../../use-cases/alerts/alert-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { IsolatedPass, isOutage } from '../../infrastructure/failing-items.ts'
import { commandProject } from '../../use-cases/projects/project-service.ts'

/** Rows handled per promotion or reaping pass; the next pass takes the rest. */
const passLimit = 500
const passConcurrency = 16

/** Overdue jobs of one project an expiry pass takes at most (the pass takes them round-robin across projects). */
const expiryPerProject = 50

/** Projects an audit checkpoint pass signs for at most before it yields to the other passes. */
const checkpointPage = 200
/** Projects whose queue pauses one pass records the end of, at most; a full page is followed at once. */
const endedPausesPage = 100

/**
 * The scheduler role: moves due scheduled jobs to pending, expires jobs not claimed within their ttl, fires recurring schedules, reaps attempts whose heartbeat went stale, finishes
 * continuation cascades that a crash interrupted, cancels graph jobs whose batch a crash cut short, starts billing periods and deletes terminal
 * jobs past their plan's retention, and signs the hourly checkpoints of the projects' audit logs. Every move is a command on the job aggregate, so several schedulers may run:
 * the expected-sequence append lets exactly one of them win each move.
 */
export async function start(deps: Deps): Promise<() => Promise<void>> {
  const controller = new AbortController()
  const { signal } = controller
  const jobs = new JobService(deps)
  const t = deps.config.tunables
  const billing = new BillingService(deps)
  const rolled = { period: '', projects: new Set<string>() }
  const retention = new Retention(deps)
  const recurring = new RecurringPass(deps, jobs, billing)
  const checkpoints = new AuditCheckpoints(deps)
  let lastThroughputPrune = Number.NEGATIVE_INFINITY
  // Each pass keeps its failing items apart for as long as the role runs (failing-items.ts).
  const promotion = new IsolatedPass(deps.log, 'promotion pass')
  const expiry = new IsolatedPass(deps.log, 'expiry sweep')
  const reaper = new IsolatedPass(deps.log, 'reaper pass')
  const cascades = new IsolatedPass(deps.log, 'cascade sweep')
  const orphans = new IsolatedPass(deps.log, 'orphaned graph jobs sweep')
  const gates = new IsolatedPass(deps.log, 'gate reconciliation')
  const alerts = new IsolatedPass(deps.log, 'alert pass')
  const billingPeriods = new IsolatedPass(deps.log, 'billing period pass')

  /**
   * A pass run every `ms` until the role stops; a failure is logged and the next pass runs as
   * usual. Through an outage of Postgres or NATS every pass fails alike: the first failure is
   * logged, and the first pass that succeeds again.
   */
  const loop = (ms: number, what: string, pass: () => Promise<boolean | void>) => {
    let waiting = false
    return every(
      ms,
      signal,
      async () => {
        const again = await pass()
        if (waiting) deps.log.info(`scheduler: ${what} runs again`)
        waiting = false
        return again
      },
      (err) => {
        const outage = isOutage(err)
        if (outage && !waiting) deps.log.warn({ err }, `scheduler: ${what} waits for a dependency; retrying every pass`)
        else if (!outage) deps.log.error({ err }, `scheduler: ${what} failed`)
        waiting = outage
      },
    )
  }
  const loops = [
    loop(t.scheduler_interval_ms, 'promotion pass', async () => void (await promoteDueJobs(deps, jobs, promotion))),
    // Back to back while passes come back full, so a backlog of overdue jobs drains at once.
    loop(t.scheduler_interval_ms, 'expiry sweep', async () => (await expireOverdueJobs(deps, jobs, expiry)) === passLimit),
    // Back to back while due schedules wait for room among the firings (RecurringPass).
    loop(t.scheduler_interval_ms, 'recurring pass', async () => (await recurring.run()).more),
    loop(t.reaper_interval_ms, 'reaper pass', async () => {
      await expireCancelGraces(deps, jobs, reaper)
      await reapStaleAttempts(deps, jobs, reaper)
      await reconcileGateSlots(deps, jobs, gates)
    }),
    loop(t.cascade_sweep_interval_ms, 'cascade sweep', async () => {
      await healInterruptedCascades(deps, jobs, cascades)
      await cancelOrphanedGraphJobs(deps, jobs, orphans)
    }),
    loop(t.alert_interval_ms, 'alert pass', async () => void (await evaluateAlerts(deps, alerts))),
    loop(t.retention_interval_ms, 'retention pass', async () => {
      // Back to back while passes come back full, so a backlog drains at the rate passes
      // sustain rather than a batch per interval; each pass is its own bounded transaction,
      // and the other loops run between passes.
      const pass = await retention.pass()
      if (performance.now() - lastThroughputPrune >= t.retention_interval_ms) {
        await pruneMinuteThroughput(deps)
        lastThroughputPrune = performance.now()
      }
      return pass.full
    }),
    // A page of projects per pass, back to back while pages come back full.
    loop(t.audit_checkpoint_interval_ms, 'audit checkpoint pass', async () => t.audit_log_enabled && (await checkpoints.issueDue(checkpointPage))),
    loop(t.scheduler_interval_ms, 'queue pause pass', async () => (await recordEndedQueuePauses(deps)) === endedPausesPage),
    loop(
      t.billing_period_check_interval_ms,
      'billing period pass',
      async () => void (await rollBillingPeriods(deps, billing, rolled, billingPeriods)),
    ),
  ]
  return async () => {
    controller.abort()
    await Promise.all(loops)
    await recurring.drain()
    retention.close()
    await billing.allowance.stop()
  }
}

/** Runs `pass` every `ms`; a pass that resolves to true (work left over) is followed at once. */
async function every(ms: number, signal: AbortSignal, pass: () => Promise<boolean | void>, onError: (err: unknown) => void): Promise<void> {
  while (!signal.aborted) {
    let again = false
    try {
      again = (await pass()) === true
    } catch (err) {
      if (!signal.aborted) onError(err)
    }
    // node:timers/promises removes its abort listener when the timer fires: one left behind per
    // pass would pile up on the role's signal (a leak, and MaxListenersExceededWarning). A zero
    // delay still yields to the timers phase, so the other loops run between passes.
    await sleep(again ? 0 : ms, undefined, { signal }).catch(() => undefined)
  }
}

/**
 * Scheduled jobs whose run_at has come become pending. Their rows are written here rather than
 * left to the projector, so that the next pass does not pick them again. Polls learn of the
 * promotion from the log (each API process's ready index), not from here.
 */
export async function promoteDueJobs(deps: Deps, jobs: JobService, pass = new IsolatedPass(deps.log, 'promotion pass')): Promise<number> {
  const due = await jobList.dueScheduled(deps.sql, deps.now(), pass.heldBack(), passLimit)
  let promoted = 0
  await pass.each(due, passConcurrency, async (row) => {
    const result = await jobs.promote(row.project_id, row.id)
    // A row the log holds no job for is held back like a failing item (see reapStaleAttempts).
    if (result.state === null) throw new JobNotFound(row.id)
    await jobs.writeRows([result.record])
    if (result.appended) promoted++
  })
  return promoted
}

/**
 * Jobs that waited past their ttl to be claimed end cancelled (reason `expired`), their waiting
 * continuations with them. Claims refuse such a job already (the claim's decision compares
 * `expires_at` with its own clock); this records the end, for the job's state, its webhook and the
 * activity feed. Rows are taken round-robin across projects (`expiredWaiting`), so one project's
 * backlog never holds back another's, and an item that fails is held back (IsolatedPass).
 * Resolves to the rows looked at.
 */
export async function expireOverdueJobs(deps: Deps, jobs: JobService, pass = new IsolatedPass(deps.log, 'expiry sweep')): Promise<number> {
  const overdue = await jobList.expiredWaiting(deps.sql, deps.now(), pass.heldBack(), passLimit, expiryPerProject)
  await pass.each(overdue, passConcurrency, async (row) => {
    const result = await jobs.expire(row.project_id, row.id)
    if (result.state === null) throw new JobNotFound(row.id)
    await jobs.writeRows([result.record])
  })
  return overdue.length
}

/**
 * Processing attempts past the shortest window they could have (see isAttemptStale) are checked
 * against their last heartbeat in KV; stale ones are retried or dead-lettered through the
 * aggregate. The reap names the attempt, so an ack that landed first turns it into a no-op.
 */
export async function reapStaleAttempts(deps: Deps, jobs: JobService, pass = new IsolatedPass(deps.log, 'reaper pass')): Promise<number> {
  const graceMs = deps.config.tunables.reaper_grace_ms
  const now = deps.now()
  const candidates = await jobList.staleProcessing(deps.sql, now, graceMs, pass.heldBack(), passLimit)
  let reaped = 0
  // A retry follows the policy of the job's project, read once per project and pass: reaping is
  // rare, and the next pass sees a policy changed since.
  const policies = new Map<string, Promise<RetryPolicies | undefined>>()
  const policiesOf = (projectId: string) => {
    let loaded = policies.get(projectId)
    if (loaded === undefined) {
      loaded = projectHandler.load(deps.store, projectHandler.ref(projectId)).then((p) => p.state?.retry_policies)
      policies.set(projectId, loaded)
    }
    return loaded
  }
  await pass.each(candidates, passConcurrency, async (c) => {
    const beat = await jobs.lastHeartbeat(c.id, c.attempt)
    const view = { state: 'processing' as const, started_at: c.started_at.toISOString(), timeout_seconds: c.timeout_seconds }
    if (!isAttemptStale(view, beat?.at ?? null, now.toISOString(), graceMs)) return
    const silentFor = Math.round((now.getTime() - Date.parse(beat?.at ?? view.started_at)) / 1000)
    const error = {
      type: 'HeartbeatTimeout',
      message: `no heartbeat for ${silentFor} s on attempt ${c.attempt}; the worker is presumed lost`,
      stack_trace: '',
    }
    const result = await jobs.reap(c.project_id, c.id, c.attempt, error, await policiesOf(c.project_id))
    // A row the log holds no job for (its messages lost with a store restored from an older
    // backup, say) cannot be reaped: it fails like any bad item, so it is held back instead of
    // heading every pass.
    if (result.state === null) throw new JobNotFound(c.id)
    await jobs.writeRows([result.record])
    if (result.appended) {
      reaped++
      deps.log.warn({ job_id: c.id, attempt: c.attempt, state: result.state?.state }, 'scheduler: reaped a stale attempt')
    }
  })
  return reaped
}

/**
 * Frees the flow-gate slots (issue 29) held by attempts that are not running: the ended attempts
 * of a gate that went idle (a take frees them only when it needs their room), and what a crash
 * between a gate's append and the job's left behind (services/use-cases/jobs/flow-gates.ts,
 * reconcileGate). The gates come from their read model, the least recently changed first, only
 * those with a slot older than the grace that the jobs read model does not show running; each
 * holder is checked against the job's state on the log, and each gate costs one append.
 */
export async function reconcileGateSlots(deps: Deps, jobs: JobService, pass = new IsolatedPass(deps.log, 'gate reconciliation')): Promise<number> {
  const takenBefore = new Date(deps.now().getTime() - unclaimedSlotGraceMs)
  const held = await flowGates.heldSlots(deps.sql, pass.heldBack(), takenBefore, passLimit)
  let freed = 0
  await pass.each(held, passConcurrency, async (gate) => {
    const jobOf = async (jobId: string) =>
      (await jobs.load(gate.project_id, jobId).catch((err) => (err instanceof JobNotFound ? null : Promise.reject(err))))?.job ?? null
    const { ended, unclaimed } = await reconcileGate(deps, gate.project_id, gate.gate_id, gate.holders, jobOf)
    // Ended attempts are an idle gate's routine; a slot held by an attempt that never ran (or was released) is a crash's leftover.
    if (unclaimed > 0)
      deps.log.warn(
        { project_id: gate.project_id, gate_id: gate.gate_id, freed: unclaimed },
        'scheduler: freed flow-gate slots held by attempts that are not running',
      )
    freed += ended + unclaimed
  })
  return freed
}

/**
 * Running jobs whose cancel was asked for (`include_running`) and whose worker did not ack within
 * `cancel_grace_ms` end cancelled. The command names the attempt, so an ack that landed first
 * turns it into a no-op, and an ack that comes after it is refused (409).
 */
export async function expireCancelGraces(deps: Deps, jobs: JobService, pass = new IsolatedPass(deps.log, 'reaper pass')): Promise<number> {
  const before = new Date(deps.now().getTime() - deps.config.tunables.cancel_grace_ms)
  const due = await jobList.cancelsPastGrace(deps.sql, before, pass.heldBack(), passLimit)
  let cancelled = 0
  await pass.each(due, passConcurrency, async (c) => {
    const result = await jobs.expireCancel(c.project_id, c.id, c.attempt)
    if (result.state === null) throw new JobNotFound(c.id)
    await jobs.writeRows([result.record])
    if (result.appended) {
      cancelled++
      deps.log.info({ job_id: c.id, attempt: c.attempt }, 'scheduler: a cancelled job was not acknowledged within its grace period')
    }
  })
  return cancelled
}

/**
 * Finishes continuation cascades a crash interrupted. The API moves a parent's children right
 * after the parent's own append; if the process died in between, the read model shows children
 * still waiting on a parent that has ended. Each such parent is loaded from the log and its
 * cascade run again: a child already moved is a no-op in the domain, so repeating is harmless.
 * A sweep of the read model rather than a consumer of the log, because only crashed requests
 * need it and reading every job event to find them cost a third of the scheduler's CPU.
 */
export async function healInterruptedCascades(deps: Deps, jobs: JobService, pass = new IsolatedPass(deps.log, 'cascade sweep')): Promise<number> {
  const parents = await jobList.parentsOfWaitingChildren(deps.sql, pass.heldBack(), passLimit)
  let moved = 0
  await pass.each(parents, passConcurrency, async (p) => {
    const { job } = await jobs.load(p.project_id, p.id)
    moved += await jobs.cascadeFromState(p.project_id, job)
  })
  if (moved > 0) deps.log.warn({ moved }, 'scheduler: finished interrupted continuation cascades')
  return moved
}

/**
 * Cancels the leaves of graph batches a crash cut short. createGraph (create-jobs.ts) appends a
 * batch's jobs leaves first, each naming parents of the batch not appended yet; a process that
 * died on the way left them waiting for ids that will never exist. A job waits past
 * `graph_orphan_grace_ms` (a batch still being created must not be touched), and its parent is
 * missing from the log too (the read model alone may simply lag), before it is cancelled with
 * reason `parent_never_created`, and the jobs of its batch waiting on it with it. Resolves to the
 * number of jobs cancelled here (their cascades not counted).
 */
export async function cancelOrphanedGraphJobs(
  deps: Deps,
  jobs: JobService,
  pass = new IsolatedPass(deps.log, 'orphaned graph jobs sweep'),
): Promise<number> {
  const createdBefore = new Date(deps.now().getTime() - deps.config.tunables.graph_orphan_grace_ms)
  const waiting = await jobList.graphJobsWaitingForMissingParents(deps.sql, createdBefore, pass.heldBack(), passLimit)
  let cancelled = 0
  await pass.each(waiting, passConcurrency, async (c) => {
    const onLog = await jobs.load(c.project_id, c.parent_id).then(
      () => true,
      (err: unknown) => (err instanceof JobNotFound ? false : Promise.reject(err)),
    )
    if (onLog) return
    const result = await jobs.cancelForNeverCreatedParent(c.project_id, c.id, c.parent_id)
    if (result.appended) {
      cancelled++
      deps.log.warn(
        { project_id: c.project_id, job_id: c.id, parent_job_id: c.parent_id },
        'scheduler: cancelled a graph job whose parent was never created',
      )
    }
  })
  return cancelled
}

/**
 * At the start of each billing period (UTC month), moves every active project into it: the
 * previous period's overage is charged and the allowance starts again (one `billing_period_reset`
 * per project and period, decided by the aggregate). Projects already moved this period are
 * remembered, so later passes read nothing but the project list.
 */
export async function rollBillingPeriods(
  deps: Deps,
  billing: BillingService,
  rolled: { period: string; projects: Set<string> },
  pass = new IsolatedPass(deps.log, 'billing period pass'),
): Promise<number> {
  const { start } = billingPeriodOf(deps.now())
  if (rolled.period !== start) {
    rolled.period = start
    rolled.projects.clear()
  }
  const ids = await projectDirectory.activeProjectIds(deps.sql)
  let moved = 0
  const due = ids.filter((id) => !rolled.projects.has(id)).map((id) => ({ project_id: id, id }))
  await pass.each(
    due.filter((item) => !pass.isHeldBack(item)),
    passConcurrency,
    async ({ id }) => {
      const project = (await projectHandler.load(deps.store, projectHandler.ref(id))).state
      if (project !== null && project.status === 'active' && (await billing.rollPeriod(project))) moved++
      rolled.projects.add(id)
    },
  )
  return moved
}

/**
 * Records the end of the queue pauses whose `until` has passed (an automatic `queue_resumed` at
 * that instant), for the activity feed and the webhooks: the pauses stopped holding at `until`
 * already, since every poll compares `until` with the clock. Resolves to how many projects it
 * looked at; a project that fails is logged and tried again on the next pass.
 */
async function recordEndedQueuePauses(deps: Deps): Promise<number> {
  const now = deps.now()
  const projectIds = await projectDirectory.projectsWithEndedPauses(deps.sql, now, endedPausesPage)
  for (const projectId of projectIds) {
    try {
      await commandProject(deps, projectId, { type: 'end_queue_pauses', data: {}, meta: { now: now.toISOString() } })
    } catch (err) {
      if (isOutage(err)) throw err
      deps.log.error({ err, project_id: projectId }, 'scheduler: recording the end of queue pauses failed')
    }
  }
  return projectIds.length
}
