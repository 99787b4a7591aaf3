import { createHash } from 'node:crypto'
import { CronExpressionParser } from 'cron-parser'
import { ulid } from 'ulid'
import type { z } from 'zod'
import type { Actor } from '../../../domain/decider.ts'
import {
  BillingStateBlocked,
  DomainError,
  InvalidCronExpression,
  InvalidState,
  InvalidTimezone,
  MonthlyAllowanceExceeded,
  SpendCapReached,
} from '../../../domain/errors.ts'
import { jobDefaults } from '../../../domain/job-options.ts'
import {
  isActiveSchedule,
  recurringIdFor,
  recurringJobDecider,
  type RecurringJob,
  type RecurringJobCommand,
  type RecurringJobEvent,
} from '../../../domain/recurring-job.ts'
import { applyRecurringRows } from '../../../projections/recurring-jobs.ts'
import { LogBudgetExceeded } from '../../../streams/errors.ts'
import type { AggregateRef } from '../../../streams/event-store.ts'
import type { CommandResult } from '../../../streams/handle-command.ts'
import { commandWithRows } from '../../infrastructure/command-with-rows.ts'
import type { BillingService } from '../metering/billing-service.ts'
import { projectRef } from '../projects/project-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { createJobs, type Creation } from './create-jobs.ts'
import type { JobService } from './job-service.ts'
import type { Project } from '../../../domain/project.ts'

/** True for standard 5-field or 6-field (leading seconds) cron expressions cron-parser accepts. */
export function isCronExpression(expression: string, timezone: string): boolean {
  const fields = expression.trim().split(/\s+/)
  if (fields.length !== 5 && fields.length !== 6) return false
  try {
    CronExpressionParser.parse(expression, { tz: timezone })
    return true
  } catch {
    return false
  }
}

/** True for a timezone name the runtime's tz database knows (IANA names; kept as given). */
export function isIanaTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz })
    return tz.length > 0
  } catch {
    return false
  }
}

/**
 * The first occurrence strictly after `after`, in the schedule's timezone. cron-parser resolves
 * daylight-saving changes the way people expect: a daily local time skipped by a spring-forward
 * fires shifted by the gap (02:30 → 03:30), a daily local time repeated by a fall-back fires once
 * (the first); an hourly schedule fires every real hour, both repeated ones included.
 */
export function nextOccurrence(expression: string, timezone: string, after: Date): Date | null {
  try {
    return CronExpressionParser.parse(expression, { tz: timezone, currentDate: after }).next().toDate()
  } catch {
    return null
  }
}

/**
 * The latest occurrence at or before `at`. cron-parser's `prev()` does not mirror `next()`
 * across a spring-forward gap (it skips the shifted occurrence), so its answer is walked
 * forward with `next()` for as long as that stays at or before `at`.
 */
export function latestOccurrence(expression: string, timezone: string, at: Date): Date | null {
  try {
    let latest = CronExpressionParser.parse(expression, { tz: timezone, currentDate: new Date(at.getTime() + 1) })
      .prev()
      .toDate()
    for (let step = 0; step < 10; step++) {
      const following = nextOccurrence(expression, timezone, latest)
      if (following === null || following.getTime() > at.getTime()) break
      latest = following
    }
    return latest
  } catch {
    return null
  }
}

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
}

export function recurringRef(projectId: string, id: string): AggregateRef {
  return { aggregate: 'recurring', projectId, id }
}

async function onSchedule(
  deps: Deps,
  projectId: string,
  id: string,
  command: RecurringJobCommand,
): Promise<CommandResult<RecurringJobEvent, RecurringJob>> {
  // Written at once as well as by the projector, so the scheduler sees the new next_run_at.
  const ref = recurringRef(projectId, id)
  return commandWithRows<RecurringJobCommand, RecurringJobEvent, RecurringJob>(deps, recurringJobDecider, ref, command, applyRecurringRows)
}

/** Creates or updates the schedule `id`, the job type's `rjob_` slug (see `recurringIdFor`). */
export async function upsertSchedule(
  deps: Deps,
  projectId: string,
  id: string,
  input: ScheduleInput,
  actor?: Actor,
): Promise<CommandResult<RecurringJobEvent, RecurringJob>> {
  const timezone = input.timezone ?? 'UTC'
  if (!isIanaTimezone(timezone)) throw new InvalidTimezone(`${JSON.stringify(timezone)} is not an IANA timezone`)
  const expression = input.cron_expression.trim().replace(/\s+/g, ' ')
  if (!isCronExpression(expression, timezone))
    throw new InvalidCronExpression(`${JSON.stringify(input.cron_expression)} is not a 5- or 6-field cron expression`)
  const now = deps.now()
  return onSchedule(deps, projectId, id, {
    type: 'upsert_recurring',
    data: {
      recurring_id: id,
      project_id: projectId,
      job_type: input.job_type,
      cron_expression: expression,
      queue: input.queue ?? jobDefaults.queue,
      timezone,
      max_attempts: input.max_attempts ?? jobDefaults.max_attempts,
      timeout_seconds: input.timeout_seconds ?? jobDefaults.timeout_seconds,
      payload: input.payload ?? {},
      next_run_at: nextOccurrence(expression, timezone, now)?.toISOString() ?? null,
    },
    meta: { now: now.toISOString(), actor },
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
  projectId: string,
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
      await upsertSchedule(deps, projectId, id, parsed.data, actor)
      results.push({ ok: true, id })
    } catch (err) {
      if (!(err instanceof DomainError) && !(err instanceof LogBudgetExceeded)) throw err
      results.push({ ok: false, input, reason: `${err.code}: ${err.message}` })
    }
  }
  return results
}

/**
 * Fires what is due. Catch-up rule: after downtime, a schedule fires once, for its latest missed
 * occurrence; earlier missed occurrences are skipped (a cron job is "the state as of now", not a
 * queue of every tick). An occurrence before the schedule existed never fires.
 */
export async function fireDueSchedules(deps: Deps, jobs: JobService, billing: BillingService, limit = 500): Promise<number> {
  const now = deps.now()
  const due = await deps.sql<{ project_id: string; id: string }[]>`
    SELECT project_id, id FROM recurring_jobs WHERE status = 'active' AND next_run_at <= ${now} ORDER BY next_run_at LIMIT ${limit}`
  let fired = 0
  for (const row of due) {
    try {
      if (await fireOne(deps, jobs, billing, row.project_id, row.id, now)) fired++
    } catch (err) {
      deps.log.error({ err, project_id: row.project_id, recurring_id: row.id }, 'scheduler: a recurring schedule could not fire')
    }
  }
  return fired
}

async function fireOne(deps: Deps, jobs: JobService, billing: BillingService, projectId: string, id: string, now: Date): Promise<boolean> {
  const schedule = (await deps.store.load<RecurringJob>(recurringRef(projectId, id))).state
  if (!isActiveSchedule(schedule)) return false
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
  const project = (await deps.store.load<Project>(projectRef(projectId))).state
  if (project === null || project.status !== 'active') return 'project_not_found'
  const request = {
    job_type: schedule.job_type,
    payload: schedule.payload ?? {},
    queue: schedule.queue,
    max_attempts: schedule.max_attempts,
    timeout_seconds: schedule.timeout_seconds,
    tags: { recurring_id: schedule.id },
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
