import type { JobState } from './job.ts'

/**
 * Bulk actions on a project's jobs chosen by a filter (`POST /jobsvc/v1/jobs/bulk`, issue 28 item
 * 6), run as an operation of kind `job_bulk` (domain/operation.ts). An action applies only where
 * the single-job route allows it, so a bulk retry or cancel never does what a caller could not do
 * job by job: retry where the spec's retry is accepted, cancel where the spec's cancel is (a bulk
 * cancel never asks a running job to stop), a priority change while the job waits.
 */

export const jobBulkKind = 'job_bulk'

export const bulkActions = ['retry', 'cancel', 'set_priority'] as const
export type BulkAction = (typeof bulkActions)[number]

/** The states each action applies to: those its single-job command accepts. */
export const bulkActionStates: Readonly<Record<BulkAction, readonly JobState[]>> = {
  retry: ['failed', 'dead_letter'],
  cancel: ['pending', 'scheduled'],
  set_priority: ['pending', 'scheduled'],
}

/** `set_priority`'s offset in seconds, as a job's own `priority` is bounded. */
export const bulkPriorityRange = { min: -600, max: 600 } as const

/** Ids a filter may name at most. */
export const maxBulkFilterIds = 1_000

/** Jobs a dry run names as a sample, in the order the run would take them. */
export const bulkSampleSize = 20

/**
 * Which jobs a bulk action is for: every key given must hold (an AND); each list is an OR of its
 * values. `tags`: the job's tags contain every pair. Times are ISO instants, `*_from` inclusive,
 * `*_until` inclusive; `finished_*` is the job's `completed_at`.
 */
export interface BulkFilter {
  ids?: string[]
  states?: JobState[]
  queues?: string[]
  job_types?: string[]
  tags?: Record<string, string>
  error_type?: string
  created_from?: string
  created_until?: string
  finished_from?: string
  finished_until?: string
}

export const bulkFilterKeys = [
  'ids',
  'states',
  'queues',
  'job_types',
  'tags',
  'error_type',
  'created_from',
  'created_until',
  'finished_from',
  'finished_until',
] as const satisfies ReadonlyArray<keyof BulkFilter>

/** A place in a bulk walk's order: jobs by creation time, then id. */
export interface BulkPosition {
  created_at: string
  id: string
}

/**
 * What a bulk operation's `params` hold: the action, the filter with its states resolved, and the
 * last matching job (in the walk's order) when it was counted. The run walks the matching jobs in
 * that order up to it, so jobs created after the count are not its business and a job it changed
 * is never met again, whatever state it moved to.
 */
export interface JobBulkParams {
  action: BulkAction
  filter: BulkFilter & { states: JobState[] }
  /** `set_priority` only. */
  priority?: number
  /** null: nothing matched when it was counted. */
  through: BulkPosition | null
}

/**
 * A bulk run's cursor (the operation's, opaque to it): the page it recorded last, from `from`
 * (exclusive; null: the start) through `to`. A run resuming acts again on that page alone, since
 * it may have stopped part-way through it.
 */
export interface BulkCursor {
  from: BulkPosition | null
  to: BulkPosition
}

export function toBulkCursorText(cursor: BulkCursor): string {
  return JSON.stringify(cursor)
}

export function fromBulkCursorText(text: string | null): BulkCursor | null {
  return text === null ? null : (JSON.parse(text) as BulkCursor)
}

/** Why a bulk request cannot be run as asked: a sentence for 400 `invalid_request`. */
export type BulkRefusal = { refused: string }

/**
 * The filter a bulk action runs with: at least one key given (an empty filter would touch every
 * job of the project, which no one asks for by accident of omission), and `states` within the
 * action's (left out: all of them). Times must not be reversed.
 */
export function resolveBulkFilter(action: BulkAction, filter: BulkFilter): { filter: JobBulkParams['filter'] } | BulkRefusal {
  if (!bulkFilterKeys.some((key) => filter[key] !== undefined)) {
    return { refused: `body.filter: name at least one of ${bulkFilterKeys.join(', ')} (an empty filter would match every job)` }
  }
  const applicable = bulkActionStates[action]
  const outside = filter.states?.find((state) => !applicable.includes(state))
  if (outside !== undefined) {
    return { refused: `body.filter.states: ${action} applies to ${applicable.join(' and ')} jobs, not ${outside}` }
  }
  for (const [from, until] of [
    ['created_from', 'created_until'],
    ['finished_from', 'finished_until'],
  ] as const) {
    const a = filter[from]
    const b = filter[until]
    if (a !== undefined && b !== undefined && Date.parse(a) > Date.parse(b)) return { refused: `body.filter.${from} is after ${until}` }
  }
  const states = applicable.filter((state) => filter.states === undefined || filter.states.includes(state))
  return { filter: { ...filter, states } }
}

/** Whether `action` applies to a job in `state` now: otherwise the run counts it as skipped. */
export function isBulkApplicable(action: BulkAction, state: JobState): boolean {
  return bulkActionStates[action].includes(state)
}

/** `set_priority`'s `priority`: required for it, refused with any other action. */
export function checkBulkPriority(action: BulkAction, priority: number | undefined): BulkRefusal | null {
  if (action === 'set_priority' && priority === undefined) return { refused: 'body.priority: required for set_priority' }
  if (action !== 'set_priority' && priority !== undefined) return { refused: 'body.priority: only set_priority takes a priority' }
  return null
}
