import type { Decider } from './decider.ts'
import type { CommandMeta } from './job.ts'
import { RecurringJobTypeConflict } from './errors.ts'

/**
 * A recurring schedule, registered by workers or (later) through the recurring routes. Its id is
 * derived from the job type, so registering the same type again updates the same schedule.
 */

export interface RecurringSchedule {
  job_type: string
  cron_expression: string
  queue: string
  timezone: string
  max_attempts: number
  timeout_seconds: number
}

export interface RecurringJob extends RecurringSchedule {
  id: string
  project_id: string
  created_at: string
  updated_at: string
}

export type RecurringJobAggregate = RecurringJob | null

export type RecurringJobEvent = {
  type: 'recurring_upserted'
  data: RecurringSchedule & { recurring_id: string; project_id: string; upserted_at: string }
}

export type RecurringJobCommand = {
  type: 'upsert_recurring'
  data: RecurringSchedule & { recurring_id: string; project_id: string }
  meta: CommandMeta
}

/** `rjob_` followed by the job type lowercased, with every run of other characters made one `-`. */
export function recurringIdFor(jobType: string): string {
  const slug = jobType
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
  return `rjob_${slug || 'job'}`
}

function isSameSchedule(a: RecurringSchedule, b: RecurringSchedule): boolean {
  return (
    a.job_type === b.job_type &&
    a.cron_expression === b.cron_expression &&
    a.queue === b.queue &&
    a.timezone === b.timezone &&
    a.max_attempts === b.max_attempts &&
    a.timeout_seconds === b.timeout_seconds
  )
}

function decide(command: RecurringJobCommand, state: RecurringJobAggregate): RecurringJobEvent[] {
  const d = command.data
  if (state !== null && state.job_type !== d.job_type) throw new RecurringJobTypeConflict(state.id, state.job_type)
  if (state !== null && isSameSchedule(state, d)) return []
  return [{ type: 'recurring_upserted', data: { ...d, upserted_at: command.meta.now } }]
}

function evolve(state: RecurringJobAggregate, event: RecurringJobEvent): RecurringJobAggregate {
  const { recurring_id, project_id, upserted_at, ...schedule } = event.data
  return {
    ...schedule,
    id: recurring_id,
    project_id,
    created_at: state?.created_at ?? upserted_at,
    updated_at: upserted_at,
  }
}

export const recurringJobDecider: Decider<RecurringJobCommand, RecurringJobEvent, RecurringJobAggregate> = {
  initialState: null,
  decide,
  evolve,
}
