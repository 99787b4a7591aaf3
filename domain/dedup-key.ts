import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { InvalidState } from './errors.ts'
import type { Job, JobState } from './job.ts'
import { maxTagValueLength } from './job-options.ts'

/**
 * One aggregate per deduplication key (issue 29, item 5): a project's key in a queue, or in the
 * whole project. Its state names the job that last took the key. "At most one job per key" is an
 * append with an expected sequence on the key's subject rather than a unique index in a read
 * model or a map in one process, so two API processes racing the same key cannot both win: the
 * loser's append conflicts, it loads the key again and finds the winner.
 *
 * A create takes the key before its job exists (the job is appended next, with the id the key
 * names), so a crash between the two leaves the key naming a job that never appeared. The key is
 * then free once `abandonedAfterMs` has passed since it was taken (`isAbandoned`); before that,
 * a create finding the job missing waits for it, since the holder's append is normally
 * milliseconds behind.
 */

/** Where a key holds: among the jobs of one queue (the job's), or of the whole project. */
export type DedupScope = 'queue' | 'project'

/** A key's scope as the log records it: a dedup key's, or `debounce` (a debounce key, of the job's queue). */
export type KeyScope = DedupScope | 'debounce'

/**
 * When an earlier job with the key makes a create a duplicate: while it is `pending` (pending or
 * scheduled), `active` (pending, scheduled or processing), or for `window_seconds` after it was
 * created, whatever its state.
 */
export type DedupWhile = 'pending' | 'active' | { window_seconds: number }

export interface DedupKey {
  key: string
  scope: KeyScope
  /** The queue the key holds in; null for a project-wide key. */
  queue: string | null
  /** The job that took the key last; null once a create that took it failed and gave it back. */
  job_id: string | null
  taken_at: string | null
}

export type DedupKeyAggregate = DedupKey | null

export type DedupKeyEvent =
  | { type: 'dedup_key_taken'; data: { job_id: string; key: string; scope: KeyScope; queue: string | null; taken_at: string } }
  /** The create that took the key did not create its job (a missing parent, an outage): the key is free at once. */
  | { type: 'dedup_key_released'; data: { job_id: string; released_at: string } }

export type DedupKeyCommand =
  | {
      type: 'take_dedup_key'
      /**
       * `free_holder`: the holder the edge found not holding any more (its job ended, left the
       * window, or never appeared). Naming it rather than passing a flag keeps a re-decision
       * after a conflict from taking the key from a holder nobody looked at.
       */
      data: { job_id: string; key: string; scope: KeyScope; queue: string | null; free_holder: string | null }
      meta: CommandMeta
    }
  | { type: 'release_dedup_key'; data: { job_id: string }; meta: CommandMeta }

/** A key is bounded like a tag's value. */
export const maxDedupKeyLength = maxTagValueLength

/** A window of at most 30 days, the longest ttl (job-options.ts). */
export const dedupWindowSecondsRange = { min: 1, max: 2_592_000 } as const

/** How long a key may name a job that does not exist before it counts as free (a create crashed between its two appends). */
export const abandonedAfterMs = 5_000

const pendingStates: readonly JobState[] = ['pending', 'scheduled']
const activeStates: readonly JobState[] = ['pending', 'scheduled', 'processing']

/** Whether `holder`, the key's job, makes a create at `now` with rule `rule` a duplicate of it. */
export function isDuplicateOf(rule: DedupWhile, holder: Pick<Job, 'state' | 'created_at'>, now: string): boolean {
  if (rule === 'pending') return pendingStates.includes(holder.state)
  if (rule === 'active') return activeStates.includes(holder.state)
  return Date.parse(now) - Date.parse(holder.created_at) < rule.window_seconds * 1000
}

/**
 * Whether a duplicate with `on_duplicate: "replace_payload"` replaces the holder's payload: only
 * while it waits. A running or ended holder is answered as it is (its attempt has its payload).
 */
export function isReplaceable(holder: Pick<Job, 'state'>): boolean {
  return pendingStates.includes(holder.state)
}

/** The bounds of a debounce: a quiet period of 1 s to a day, a longest wait of up to 30 days. */
export const debounceSecondsRange = { min: 1, max: 86_400 } as const
export const debounceMaxWaitSecondsRange = { min: 1, max: 2_592_000 } as const

/**
 * Whether a debounce key's job is still in its quiet period: scheduled (its `run_at` ahead) and
 * not waiting for a parent. Once due, running or ended, the next create starts a new one.
 */
export function isDebouncing(holder: Pick<Job, 'state' | 'waiting_for_parent'>): boolean {
  return holder.state === 'scheduled' && !holder.waiting_for_parent
}

/**
 * The due time a debounced job moves to on a create at `now`: another quiet period from now, but
 * never later than `max_wait_seconds` after its first create.
 */
export function debouncedRunAt(holder: Pick<Job, 'created_at'>, now: string, seconds: number, maxWaitSeconds: number): string {
  return new Date(Math.min(Date.parse(now) + seconds * 1000, Date.parse(holder.created_at) + maxWaitSeconds * 1000)).toISOString()
}

/** Whether a key whose job is missing was taken long enough ago that its create must have crashed. */
export function isAbandoned(key: Pick<DedupKey, 'taken_at'>, now: string): boolean {
  return key.taken_at === null || Date.parse(now) - Date.parse(key.taken_at) >= abandonedAfterMs
}

function decide(command: DedupKeyCommand, state: DedupKeyAggregate): DedupKeyEvent[] {
  const holder = state?.job_id ?? null
  switch (command.type) {
    case 'take_dedup_key': {
      const { job_id, key, scope, queue, free_holder } = command.data
      if (holder === job_id) return []
      if (holder !== null && holder !== free_holder) throw new InvalidState(`the key is held by job ${holder}`)
      return [{ type: 'dedup_key_taken', data: { job_id, key, scope, queue, taken_at: command.meta.now } }]
    }
    case 'release_dedup_key':
      // Only the holder gives the key back: a late release must not free a key a newer job took.
      return holder === command.data.job_id ? [{ type: 'dedup_key_released', data: { job_id: holder, released_at: command.meta.now } }] : []
  }
}

function evolve(state: DedupKeyAggregate, event: DedupKeyEvent): DedupKeyAggregate {
  if (event.type === 'dedup_key_taken') {
    const { job_id, key, scope, queue, taken_at } = event.data
    return { key, scope, queue, job_id, taken_at }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'dedup_key_taken')
  return { ...state, job_id: null, taken_at: null }
}

export const dedupKeyDecider: Decider<DedupKeyCommand, DedupKeyEvent, DedupKeyAggregate> = {
  initialState: null,
  decide,
  evolve,
}
