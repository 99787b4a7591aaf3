import { canonicalJson } from './canonical-json.ts'
import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { RecurringJobNotFound, RecurringJobTypeConflict } from './errors.ts'

/**
 * A recurring schedule, registered by workers or through the recurring routes. Its id is derived
 * from the job type, so registering the same type again updates the same schedule. Occurrences
 * are computed by the caller (cron.ts) and passed in on the commands; the aggregate records which
 * occurrence fired last, so each fires at most once whoever fires it.
 */

export interface RecurringSchedule {
  job_type: string
  cron_expression: string
  queue: string
  timezone: string
  max_attempts: number
  timeout_seconds: number
  /** Payload of every job the schedule creates (absent in schedules registered before it existed). */
  payload?: Record<string, unknown>
  /** The priority of every job it creates (issue 28); absent for none (0). */
  priority?: number
  /** The ttl every occurrence is created with (issue 28, expiry); absent: none given (the queue's default applies). */
  ttl_seconds?: number
}

export interface RecurringJob extends RecurringSchedule {
  id: string
  project_id: string
  payload: Record<string, unknown>
  created_at: string
  updated_at: string
  status: 'active' | 'deleted'
  /** The next occurrence due (ISO instant), as computed when the schedule last changed or fired. */
  next_run_at: string | null
  /** The occurrence that fired last, and when. */
  last_occurrence_at: string | null
  last_run_at: string | null
  last_job_id: string | null
}

/** The fields added to the schedule's state after its first release, absent from the states written before each. */
type AddedField = 'payload' | 'status' | 'next_run_at' | 'last_occurrence_at' | 'last_run_at' | 'last_job_id'

/** A schedule's state as any message stored it. */
export type StoredRecurringJob = Omit<RecurringJob, AddedField> & Partial<Pick<RecurringJob, AddedField>>

/**
 * The schedule's state as a message stored it, in today's form: a state written before a field
 * was added gets the value it meant (an empty payload, active, no occurrence computed or fired).
 * Applied wherever a message is decoded (streams/stored-forms.ts).
 */
export function upgradeRecurringJob(stored: StoredRecurringJob): RecurringJob {
  return {
    ...stored,
    payload: stored.payload ?? {},
    status: stored.status ?? 'active',
    next_run_at: stored.next_run_at ?? null,
    last_occurrence_at: stored.last_occurrence_at ?? null,
    last_run_at: stored.last_run_at ?? null,
    last_job_id: stored.last_job_id ?? null,
  }
}

export type RecurringJobAggregate = RecurringJob | null

export type RecurringJobEvent =
  | {
      type: 'recurring_upserted'
      data: RecurringSchedule & { recurring_id: string; project_id: string; upserted_at: string; next_run_at?: string | null }
    }
  | { type: 'recurring_deleted'; data: { recurring_id: string; deleted_at: string } }
  | { type: 'recurring_rescheduled'; data: { next_run_at: string | null; rescheduled_at: string } }
  | {
      type: 'recurring_fired'
      /** `job_id` null: the occurrence was due but no job was created (allowance or billing refused it). */
      data: { occurrence_at: string; job_id: string | null; skipped_reason: string | null; fired_at: string; next_run_at: string | null }
    }

export type RecurringJobCommand =
  | {
      type: 'upsert_recurring'
      data: RecurringSchedule & { recurring_id: string; project_id: string; next_run_at?: string | null }
      meta: CommandMeta
    }
  | { type: 'delete_recurring'; data: { recurring_id: string }; meta: CommandMeta }
  /** The next occurrence moved without a firing (a clock change, a stale read model). */
  | { type: 'reschedule'; data: { next_run_at: string | null }; meta: CommandMeta }
  | {
      type: 'record_fire'
      data: { occurrence_at: string; job_id: string | null; skipped_reason: string | null; next_run_at: string | null }
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

export function isActiveSchedule(state: RecurringJobAggregate): state is RecurringJob {
  return state !== null && state.status === 'active'
}

function isSameSchedule(a: RecurringJob, b: RecurringSchedule): boolean {
  return (
    a.job_type === b.job_type &&
    a.cron_expression === b.cron_expression &&
    a.queue === b.queue &&
    a.timezone === b.timezone &&
    a.max_attempts === b.max_attempts &&
    a.timeout_seconds === b.timeout_seconds &&
    a.ttl_seconds === b.ttl_seconds &&
    canonicalJson(a.payload) === canonicalJson(b.payload ?? {}) &&
    (a.priority ?? 0) === (b.priority ?? 0)
  )
}

function decide(command: RecurringJobCommand, state: RecurringJobAggregate): RecurringJobEvent[] {
  const now = command.meta.now
  switch (command.type) {
    case 'upsert_recurring': {
      const d = command.data
      const live = isActiveSchedule(state) ? state : null
      if (live !== null && live.job_type !== d.job_type) throw new RecurringJobTypeConflict(live.id, live.job_type)
      if (live !== null && isSameSchedule(live, d)) return []
      return [{ type: 'recurring_upserted', data: { ...d, payload: d.payload ?? {}, upserted_at: now } }]
    }
    case 'delete_recurring':
      if (!isActiveSchedule(state)) throw new RecurringJobNotFound(command.data.recurring_id)
      return [{ type: 'recurring_deleted', data: { recurring_id: state.id, deleted_at: now } }]
    case 'reschedule':
      if (!isActiveSchedule(state) || state.next_run_at === command.data.next_run_at) return []
      return [{ type: 'recurring_rescheduled', data: { next_run_at: command.data.next_run_at, rescheduled_at: now } }]
    case 'record_fire': {
      if (!isActiveSchedule(state)) return []
      // An occurrence at or before the last one fired was fired already (by this or another scheduler).
      const last = state.last_occurrence_at
      if (last !== null && Date.parse(command.data.occurrence_at) <= Date.parse(last)) return []
      return [{ type: 'recurring_fired', data: { ...command.data, fired_at: now } }]
    }
  }
}

function evolve(state: RecurringJobAggregate, event: RecurringJobEvent): RecurringJobAggregate {
  if (event.type === 'recurring_upserted') {
    const { recurring_id, project_id, upserted_at, next_run_at, ...schedule } = event.data
    const live = isActiveSchedule(state) ? state : null
    return {
      ...schedule,
      // Absent from upserts recorded before schedules had a payload.
      payload: schedule.payload ?? {},
      id: recurring_id,
      project_id,
      created_at: live?.created_at ?? upserted_at,
      updated_at: upserted_at,
      status: 'active',
      next_run_at: next_run_at ?? null,
      last_occurrence_at: live?.last_occurrence_at ?? null,
      last_run_at: live?.last_run_at ?? null,
      last_job_id: live?.last_job_id ?? null,
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'recurring_upserted')
  switch (event.type) {
    case 'recurring_deleted':
      return { ...state, status: 'deleted', next_run_at: null, updated_at: event.data.deleted_at }
    case 'recurring_rescheduled':
      return { ...state, next_run_at: event.data.next_run_at }
    case 'recurring_fired':
      return {
        ...state,
        last_occurrence_at: event.data.occurrence_at,
        last_run_at: event.data.job_id === null ? state.last_run_at : event.data.fired_at,
        last_job_id: event.data.job_id ?? state.last_job_id,
        next_run_at: event.data.next_run_at,
      }
  }
}

export const recurringJobDecider: Decider<RecurringJobCommand, RecurringJobEvent, RecurringJobAggregate> = {
  initialState: null,
  decide,
  evolve,
}
