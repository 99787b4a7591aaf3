import { createHash } from 'node:crypto'
import { ulid } from 'ulid'
import type { z } from 'zod'
import type { Actor } from '../../../domain/decider.ts'
import {
  BillingStateBlocked,
  CronIntervalTooShort,
  DomainError,
  InvalidCronExpression,
  InvalidState,
  InvalidTimezone,
  MonthlyAllowanceExceeded,
  RecurringLimitReached,
  SpendCapReached,
} from '../../../domain/errors.ts'
import { isCronExpression, isIanaTimezone, latestOccurrence, nextOccurrence, shortestCronGapSeconds } from '../../../domain/cron.ts'
import { jobDefaults } from '../../../domain/job-options.ts'
import {
  isActiveSchedule,
  recurringIdFor,
  type RecurringJob,
  type RecurringJobCommand,
  type RecurringJobEvent,
} from '../../../domain/recurring-job.ts'
import type { Queryable } from '../../../projections/database.ts'
import { applyRecurringRows, recurringJobs, type FailingSchedule } from '../../../projections/recurring-jobs.ts'
import { LogBudgetExceeded } from '../../../streams/errors.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { commandWithRows } from '../../infrastructure/command-with-rows.ts'
import type { BillingService } from '../metering/billing-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { createJobs, type Creation } from './create-jobs.ts'
import type { JobService } from './job-service.ts'
import type { Project } from '../../../domain/project/index.ts'
import { projectHandler, recurringHandler } from '../../../streams/aggregates.ts'

/**
 * The id of the job an occurrence creates: a ULID whose time is the occurrence and whose random
 * part is a digest of project, schedule and occurrence. Every scheduler computes the same id, so
 * the log's expected-sequence append lets exactly one of them create it.
 */
export function occurrenceJobId(projectId: string, recurringId: string, occurrence: Date): string {
  const digest = createHash('sha256').update(`${projectId}/${recurringId}/${occurrence.toISOString()}`).digest()
  let at = 0
  return `job_${ulid(occurrence.getTime(), () => digest[at++ % digest.length]! / 256)}`
}

export interface ScheduleInput {
  job_type: string
  cron_expression: string
  queue?: string | null | undefined
  timezone?: string | null | undefined
  max_attempts?: number | null | undefined
  timeout_seconds?: number | null | undefined
  payload?: Record<string, unknown> | null | undefined
  priority?: number | null | undefined
  ttl_seconds?: number | null | undefined
}

async function onSchedule(
  deps: Deps,
  projectId: string,
  id: string,
  command: RecurringJobCommand,
  db?: Queryable,
): Promise<CommandResult<RecurringJobEvent, RecurringJob>> {
  // Written at once as well as by the projector, so the scheduler sees the new next_run_at.
  return commandWithRows(deps, recurringHandler, recurringHandler.ref(projectId, id), command, applyRecurringRows, db)
}

/**
 * Creates or updates the schedule `id`, the job type's `rjob_` slug (see `recurringIdFor`), within
 * the bounds of the project's plan: a 6-field expression may not fire more often than
 * `min_cron_interval_seconds`, and a new schedule may not take the project past
 * `max_recurring_schedules` live ones. The count and the create run under a per-project advisory
 * lock, with the new row written in the same transaction, so concurrent creates (in any process)
 * cannot both take the last place. An existing schedule may always be changed, even past a cap
 * its project's plan lowered since.
 */
export async function upsertSchedule(
  deps: Deps,
  project: Pick<Project, 'id' | 'plan'>,
  id: string,
  input: ScheduleInput,
  actor?: Actor,
): Promise<CommandResult<RecurringJobEvent, RecurringJob>> {
  const timezone = input.timezone ?? 'UTC'
  if (!isIanaTimezone(timezone)) throw new InvalidTimezone(`${JSON.stringify(timezone)} is not an IANA timezone`)
  const expression = input.cron_expression.trim().replace(/\s+/g, ' ')
  if (!isCronExpression(expression, timezone))
    throw new InvalidCronExpression(`${JSON.stringify(input.cron_expression)} is not a 5- or 6-field cron expression`)
  const limits = deps.config.plans[project.plan]
  const gap = shortestCronGapSeconds(expression)
  if (gap !== null && gap < limits.min_cron_interval_seconds) {
    throw new CronIntervalTooShort(
      `${JSON.stringify(input.cron_expression)} fires ${gap} s apart at its closest; on the ${project.plan} plan occurrences must be at least ${limits.min_cron_interval_seconds} s apart`,
    )
  }
  const now = deps.now()
  const command: RecurringJobCommand = {
    type: 'upsert_recurring',
    data: {
      recurring_id: id,
      project_id: project.id,
      job_type: input.job_type,
      cron_expression: expression,
      queue: input.queue ?? jobDefaults.queue,
      timezone,
      max_attempts: input.max_attempts ?? jobDefaults.max_attempts,
      timeout_seconds: input.timeout_seconds ?? jobDefaults.timeout_seconds,
      payload: input.payload ?? {},
      ...(input.priority === undefined || input.priority === null || input.priority === 0 ? {} : { priority: input.priority }),
      // Only when given, so a schedule without one keeps the shape of every older upsert.
      ...(input.ttl_seconds === undefined || input.ttl_seconds === null ? {} : { ttl_seconds: input.ttl_seconds }),
      next_run_at: nextOccurrence(expression, timezone, now)?.toISOString() ?? null,
    },
    meta: { now: now.toISOString(), actor },
  }
  return deps.sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`recurring:${project.id}`}, 0))`
    const { others, live } = await recurringJobs.liveSchedulesBeside(tx, project.id, id)
    if (!live && others >= limits.max_recurring_schedules) {
      throw new RecurringLimitReached(
        `a project on the ${project.plan} plan can have at most ${limits.max_recurring_schedules} recurring schedules; delete one to add another`,
      )
    }
    return onSchedule(deps, project.id, id, command, tx)
  })
}

export async function deleteSchedule(
  deps: Deps,
  projectId: string,
  id: string,
  actor?: Actor,
): Promise<CommandResult<RecurringJobEvent, RecurringJob>> {
  return onSchedule(deps, projectId, id, { type: 'delete_recurring', data: { recurring_id: id }, meta: { now: deps.now().toISOString(), actor } })
}

export type RegistrationResult = { ok: true; id: string } | { ok: false; input: unknown; reason: string }

/**
 * Upserts each schedule a worker registers (`rjob_` + slug of the job type). A bad schedule is
 * reported back for logging and does not stop the others.
 */
export async function registerRecurringSchedules(
  deps: Deps,
  project: Pick<Project, 'id' | 'plan'>,
  items: readonly unknown[],
  schema: z.ZodType<ScheduleInput>,
  actor?: Actor,
): Promise<RegistrationResult[]> {
  const results: RegistrationResult[] = []
  for (const input of items) {
    const parsed = schema.safeParse(input)
    if (!parsed.success) {
      results.push({ ok: false, input, reason: parsed.error.issues[0]?.message ?? 'invalid schedule' })
      continue
    }
    const id = recurringIdFor(parsed.data.job_type)
    try {
      await upsertSchedule(deps, project, id, parsed.data, actor)
      results.push({ ok: true, id })
    } catch (err) {
      if (!(err instanceof DomainError) && !(err instanceof LogBudgetExceeded)) throw err
      results.push({ ok: false, input, reason: `${err.code}: ${err.message}` })
    }
  }
  return results
}

/** Firings of one project in flight at once in one scheduler: its other due schedules wait for one to end. */
const recurringFiringsPerProject = 8
/** Firings in flight at once in one scheduler, all projects together. */
const recurringFiringsInFlight = 32
/** A schedule that failed waits this long before it is tried again, doubling with each failure in a row, */
const retryFailedAfterMs = 1_000
/** up to this. */
const retryFailedAtMostMs = 5 * 60_000
/** Failing schedules remembered at most; past it the longest-remembered are forgotten (and tried again). */
const maxFailingSchedules = 10_000

interface Failure extends FailingSchedule {
  failures: number
}

/**
 * The scheduler's recurring pass. Each pass reads the due schedules that are not firing already,
 * per project in turns (each project's earliest first, then each one's second, and so on), and
 * starts as many as there is room for: `recurringFiringsPerProject` of one project and
 * `recurringFiringsInFlight` in all at once. A pass does not wait for its firings; while a
 * project has more due than its room, the next pass follows as soon as half the firings in flight
 * have ended. One
 * project's hundreds of due schedules therefore hold at most its own share of the firings, and
 * another project's schedule starts in the next pass, never behind that backlog.
 *
 * Each schedule fires on its own: one that throws is logged and skipped. A schedule that failed
 * is left out of the passes for a while (1 s, doubling with each failure in a row, up to 5 min)
 * and, when it is tried again, comes after its project's other due schedules, so a schedule that
 * keeps failing never heads the queue. What failed is remembered by this process only: another
 * scheduler, or a restart, tries it again once.
 */
export class RecurringPass {
  readonly #deps: Deps
  readonly #jobs: JobService
  readonly #billing: BillingService
  readonly #failing = new Map<string, Failure>()
  /** Firings in flight, by schedule. */
  readonly #firing = new Map<string, { projectId: string; id: string; done: Promise<void> }>()
  readonly #firingPerProject = new Map<string, number>()
  #fired = 0

  constructor(deps: Deps, jobs: JobService, billing: BillingService) {
    this.#deps = deps
    this.#jobs = jobs
    this.#billing = billing
  }

  /**
   * Starts the due schedules there is room for. `more`: due schedules were left for want of room;
   * the pass then resolves once half the firings in flight have ended, so the next one, which
   * should follow at once, finds room.
   */
  async run(): Promise<{ more: boolean }> {
    const deps = this.#deps
    const now = deps.now()
    // Entries that could have been tried again for a while and were not are of schedules no
    // longer due (deleted, or moved on by another scheduler): forgotten.
    for (const [key, f] of this.#failing) if (now.getTime() - f.retryAt.getTime() > retryFailedAtMostMs) this.#failing.delete(key)
    const due = await recurringJobs.dueSchedulesInTurns(deps.sql, now, {
      turns: recurringFiringsPerProject,
      limit: 2 * recurringFiringsInFlight,
      failing: [...this.#failing.values()],
      firing: [...this.#firing.values()],
    })
    let more = due.length === 2 * recurringFiringsInFlight
    for (const { project_id: projectId, id } of due) {
      if (this.#firing.size >= recurringFiringsInFlight || (this.#firingPerProject.get(projectId) ?? 0) >= recurringFiringsPerProject) more = true
      else this.#start(projectId, id, now)
    }
    if (more) await this.#halfEnded()
    return { more }
  }

  /** Until half the firings in flight (at least one) have ended: the next pass has room, and passes do not run one per firing. */
  async #halfEnded(): Promise<void> {
    const ends = [...this.#firing.values()].map((f) => f.done)
    const wanted = Math.ceil(ends.length / 2)
    let ended = 0
    if (wanted > 0) await new Promise<void>((resolve) => ends.forEach((end) => void end.then(() => ++ended === wanted && resolve())))
  }

  /** Waits for every firing in flight; resolves to the jobs fired since this pass was made. */
  async drain(): Promise<number> {
    while (this.#firing.size > 0) await Promise.all([...this.#firing.values()].map((f) => f.done))
    return this.#fired
  }

  #start(projectId: string, id: string, now: Date): void {
    const key = failureKey(projectId, id)
    this.#firingPerProject.set(projectId, (this.#firingPerProject.get(projectId) ?? 0) + 1)
    const done = fireOne(this.#deps, this.#jobs, this.#billing, projectId, id, now).then(
      (fired) => {
        if (fired) this.#fired++
        this.#failing.delete(key)
      },
      (err: unknown) => this.#failed(projectId, id, err),
    )
    this.#firing.set(key, {
      projectId,
      id,
      done: done.finally(() => {
        this.#firing.delete(key)
        const left = this.#firingPerProject.get(projectId)! - 1
        if (left === 0) this.#firingPerProject.delete(projectId)
        else this.#firingPerProject.set(projectId, left)
      }),
    })
  }

  #failed(projectId: string, id: string, err: unknown): void {
    const key = failureKey(projectId, id)
    const failures = (this.#failing.get(key)?.failures ?? 0) + 1
    const retryInMs = Math.min(retryFailedAfterMs * 2 ** (failures - 1), retryFailedAtMostMs)
    this.#failing.delete(key)
    if (this.#failing.size >= maxFailingSchedules) this.#failing.delete(this.#failing.keys().next().value!)
    this.#failing.set(key, { projectId, id, failures, retryAt: new Date(this.#deps.now().getTime() + retryInMs) })
    this.#deps.log.error(
      { err, project_id: projectId, recurring_id: id, failures, retry_in_ms: retryInMs },
      'scheduler: a recurring schedule could not fire; the pass goes on without it',
    )
  }
}

const failureKey = (projectId: string, id: string) => `${projectId}/${id}`

/**
 * Fires everything due, pass after pass until none is left for want of room (see RecurringPass;
 * the scheduler keeps one, and with it what failed). Catch-up rule: after downtime, a schedule
 * fires once, for its latest missed occurrence; earlier missed occurrences are skipped (a cron job
 * is "the state as of now", not a queue of every tick). An occurrence before the schedule existed
 * never fires.
 */
export async function fireDueSchedules(deps: Deps, jobs: JobService, billing: BillingService): Promise<number> {
  const pass = new RecurringPass(deps, jobs, billing)
  while ((await pass.run()).more);
  return pass.drain()
}

async function fireOne(deps: Deps, jobs: JobService, billing: BillingService, projectId: string, id: string, now: Date): Promise<boolean> {
  const ref = recurringHandler.ref(projectId, id)
  const loaded = await recurringHandler.load(deps.store, ref)
  const schedule = loaded.state
  if (!isActiveSchedule(schedule)) {
    // The row says active, the log does not: a write of the row was lost. It is written again
    // from the log, so the schedule leaves the due rows; a row the log knows nothing of is a failure.
    if (schedule === null) throw new Error(`recurring schedule ${id} has a row in the read model but no events in the log`)
    await applyRecurringRows(deps.sql, [deps.store.recordOf(ref, loaded.seq, [], schedule)])
    return false
  }
  const occurrence = latestOccurrence(schedule.cron_expression, schedule.timezone, now)
  const floor = Date.parse(schedule.last_occurrence_at ?? schedule.created_at)
  const next = nextOccurrence(schedule.cron_expression, schedule.timezone, now)?.toISOString() ?? null
  if (occurrence === null || occurrence.getTime() <= floor) {
    // Nothing new is due (the row was stale): move next_run_at on without firing.
    await onSchedule(deps, projectId, id, { type: 'reschedule', data: { next_run_at: next }, meta: { now: now.toISOString() } })
    return false
  }
  const jobId = occurrenceJobId(projectId, id, occurrence)
  const skippedReason = await createOccurrenceJob(deps, jobs, billing, projectId, schedule, jobId)
  const result = await onSchedule(deps, projectId, id, {
    type: 'record_fire',
    data: {
      occurrence_at: occurrence.toISOString(),
      job_id: skippedReason === null ? jobId : null,
      skipped_reason: skippedReason,
      next_run_at: next,
    },
    meta: { now: now.toISOString() },
  })
  return result.appended && skippedReason === null
}

/** Creates the occurrence's job like any creation (billing state, allowance, log budget); a refusal's code, or null. */
async function createOccurrenceJob(
  deps: Deps,
  jobs: JobService,
  billing: BillingService,
  projectId: string,
  schedule: RecurringJob,
  jobId: string,
): Promise<string | null> {
  const project = (await projectHandler.load(deps.store, projectHandler.ref(projectId))).state
  if (project === null || project.status !== 'active') return 'project_not_found'
  const request = {
    job_type: schedule.job_type,
    payload: schedule.payload,
    queue: schedule.queue,
    max_attempts: schedule.max_attempts,
    timeout_seconds: schedule.timeout_seconds,
    ttl_seconds: schedule.ttl_seconds ?? null,
    tags: { recurring_id: schedule.id },
    priority: schedule.priority ?? null,
  }
  let creation: Creation
  try {
    creation = await createJobs({ deps, jobs, billing }, project, [{ request, jobId }])
  } catch (err) {
    if (err instanceof BillingStateBlocked) return err.code
    throw err
  }
  const result = creation.results[0]!
  if (result.ok) return null
  // Another scheduler created this occurrence's job first: it fired, once.
  if (result.error instanceof InvalidState) return null
  if (result.error instanceof MonthlyAllowanceExceeded || result.error instanceof SpendCapReached) return result.error.code
  // Past the project's log budget the occurrence is skipped like one past the allowance: the
  // schedule moves on, and `recurring_fired` records why (counted, never refused).
  if (result.error instanceof LogBudgetExceeded) return result.error.code
  throw result.error
}
