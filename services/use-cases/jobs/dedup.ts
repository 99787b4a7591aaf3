import { setTimeout as sleep } from 'node:timers/promises'
import {
  debouncedRunAt,
  isAbandoned,
  isDebouncing,
  isDuplicateOf,
  isReplaceable,
  type DedupKeyAggregate,
  type DedupScope,
  type DedupWhile,
  type KeyScope,
} from '../../../domain/dedup-key.ts'
import type { Job } from '../../../domain/job.ts'
import { InvalidState, JobNotFound } from '../../../domain/errors.ts'
import type { Ref } from '../../../streams/aggregate-handler.ts'
import { dedupKeyHandler } from '../../../streams/aggregates.ts'
import { ConcurrencyConflict } from '../../../streams/errors.ts'
import type { Loaded } from '../../../streams/event-store.ts'
import { sha256Hex } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { JobService, Written } from './job-service.ts'

/** A create's `dedup` option (issue 29, item 5), defaults applied. */
export interface DedupOption {
  key: string
  scope: DedupScope
  while: DedupWhile
  /**
   * `replace_payload`: a waiting holder takes the duplicate's payload; a running or ended one is
   * answered as it is. `keep_latest_queued`: only a waiting holder makes a duplicate (and takes
   * its payload); behind a running or ended one a new job is created, which then holds the key.
   */
  on_duplicate: 'skip' | 'replace_payload' | 'keep_latest_queued'
}

/** A create's `debounce` option (issue 29, item 5): the key holds in the job's queue. */
export interface DebounceOption {
  key: string
  seconds: number
  max_wait_seconds: number
}

/** What a create with `dedup` does: create its job with the id the key now names, or answer the job holding it. */
export type DedupAdmission = { kind: 'new'; jobId: string; ref: Ref<'dedup'> } | { kind: 'duplicate'; existing: Written }

/** What deciding on a key needs of the runtime: the log, its write guard, the clock and ids. */
type KeyDeps = Pick<Deps, 'store' | 'newUlid' | 'now' | 'guard'>

/** How often a create looks again for a holder's job that is not on the log yet (its create is in flight). */
const holderLookMs = 20

/**
 * Rounds of load and append before a create gives up (ConcurrencyConflict). Each lost round means
 * another create took the key meanwhile, so the bound is only reached by a key taken and freed
 * over and over during one request.
 */
const maxRounds = 50

/**
 * The key's aggregate: its id is a digest of the scope (with the queue for a queue's key) and
 * the key's text, which may hold any character a subject token cannot.
 */
export function dedupKeyRef(projectId: string, dedup: Pick<DedupOption, 'key' | 'scope'>, queue: string): Ref<'dedup'> {
  const scoped = dedup.scope === 'queue' ? ['queue', queue, dedup.key] : ['project', dedup.key]
  return dedupKeyHandler.ref(projectId, `ddk_${sha256Hex(JSON.stringify(scoped)).slice(0, 40)}`)
}

/** A debounce key holds in the job's queue, apart from every dedup key of the same text. */
export function debounceKeyRef(projectId: string, debounce: Pick<DebounceOption, 'key'>, queue: string): Ref<'dedup'> {
  return dedupKeyHandler.ref(projectId, `ddk_${sha256Hex(JSON.stringify(['debounce', queue, debounce.key])).slice(0, 40)}`)
}

/** What a create does about the key's existing job: a new job, or answer it (after `update`, if given). */
type HolderVerdict = { kind: 'new' } | { kind: 'answer'; update?: () => Promise<Written> }

/**
 * Decides whether a create with `dedup` is a duplicate, through the log so that every API
 * process agrees: the key's holder, when it names a job that is still within the rule (`while`),
 * answers for it (with `replace_payload`, a waiting holder first takes `payload`; one claimed
 * meanwhile refuses it, and the create is decided again on the job's new state); otherwise the
 * create takes the key for a new job id (see `admitKey`).
 */
export function admitDedup(
  deps: KeyDeps,
  jobs: JobService,
  projectId: string,
  queue: string,
  dedup: DedupOption,
  payload: Record<string, unknown>,
): Promise<DedupAdmission> {
  const ref = dedupKeyRef(projectId, dedup, queue)
  const taking = { key: dedup.key, scope: dedup.scope, queue: dedup.scope === 'queue' ? queue : null }
  return admitKey(deps, jobs, projectId, ref, taking, (holder, now): HolderVerdict => {
    const isDuplicate = dedup.on_duplicate === 'keep_latest_queued' ? isReplaceable(holder) : isDuplicateOf(dedup.while, holder, now)
    if (!isDuplicate) return { kind: 'new' }
    if (dedup.on_duplicate === 'skip' || !isReplaceable(holder)) return { kind: 'answer' }
    return { kind: 'answer', update: () => jobs.replacePayload(projectId, holder.id, payload) }
  })
}

/**
 * A create with `debounce`: while the key's job is still in its quiet period (scheduled), it
 * takes this create's payload and its due time moves to `debouncedRunAt`; otherwise (it is due,
 * runs or has ended) the create takes the key for a new job, which the caller creates scheduled
 * `seconds` from now.
 */
export function admitDebounce(
  deps: KeyDeps,
  jobs: JobService,
  projectId: string,
  queue: string,
  debounce: DebounceOption,
  payload: Record<string, unknown>,
): Promise<DedupAdmission> {
  const ref = debounceKeyRef(projectId, debounce, queue)
  return admitKey(deps, jobs, projectId, ref, { key: debounce.key, scope: 'debounce', queue }, (holder, now): HolderVerdict => {
    if (!isDebouncing(holder)) return { kind: 'new' }
    const runAt = debouncedRunAt(holder, now, debounce.seconds, debounce.max_wait_seconds)
    return { kind: 'answer', update: () => jobs.replacePayload(projectId, holder.id, payload, runAt) }
  })
}

/**
 * The key's decision, through the log so that every API process agrees: the key's holder, when
 * `verdict` says it answers, is the answer (updated first when the verdict says how; an update
 * its job refuses because it changed meanwhile, or loses to others, is decided again on fresh
 * state); otherwise the create takes the key for a new job id with an append at the key's
 * sequence, and the caller creates the job with that id. A lost race (another create took the
 * key) loads the key again and finds the winner.
 *
 * A holder whose job is missing is waited for (its create appends the job right after the key),
 * until the key has been held `abandonedAfterMs` by the clock of this process or of the one that
 * took it: then its create crashed between the two appends and the key is free.
 */
async function admitKey(
  deps: KeyDeps,
  jobs: JobService,
  projectId: string,
  ref: Ref<'dedup'>,
  taking: { key: string; scope: KeyScope; queue: string | null },
  verdict: (holder: Job, now: string) => HolderVerdict,
): Promise<DedupAdmission> {
  const missingSince = new Map<string, number>()
  for (let round = 0; round < maxRounds;) {
    const loaded = await dedupKeyHandler.load(deps.store, ref)
    const holder = loaded.state?.job_id ?? null
    const now = deps.now()
    if (holder !== null) {
      const existing = await loadHolder(jobs, projectId, holder)
      if (existing !== null) {
        const answer = verdict(existing.job, now.toISOString())
        if (answer.kind === 'answer') {
          if (answer.update === undefined) return { kind: 'duplicate', existing }
          round++
          try {
            return { kind: 'duplicate', existing: await answer.update() }
          } catch (err) {
            // Claimed or ended meanwhile, or outraced by other updates: decided again on fresh state.
            if (!(err instanceof InvalidState) && !(err instanceof ConcurrencyConflict)) throw err
            continue
          }
        }
      } else if (!isGivenUp(loaded.state!, missingSince, holder, now)) {
        await sleep(holderLookMs)
        continue
      }
    }
    round++
    const jobId = jobs.newJobId()
    try {
      await take(deps, ref, loaded, taking, jobId, holder)
      return { kind: 'new', jobId, ref }
    } catch (err) {
      if (!(err instanceof ConcurrencyConflict)) throw err
    }
  }
  throw new ConcurrencyConflict(`the dedup key changed ${maxRounds} times during one create`)
}

/** The holder's job, or null when the log has none (not appended yet, never appended, or purged by retention). */
async function loadHolder(jobs: JobService, projectId: string, jobId: string): Promise<Written | null> {
  try {
    return await jobs.load(projectId, jobId)
  } catch (err) {
    if (err instanceof JobNotFound) return null
    throw err
  }
}

function isGivenUp(key: NonNullable<DedupKeyAggregate>, missingSince: Map<string, number>, holder: string, now: Date): boolean {
  if (isAbandoned(key, now.toISOString())) return true
  const since = missingSince.get(holder) ?? now.getTime()
  missingSince.set(holder, since)
  return isAbandoned({ taken_at: new Date(since).toISOString() }, now.toISOString())
}

/**
 * One append at the sequence loaded (decided on that state alone: a stale one conflicts), under
 * the write guard so the expected sequence is checked exactly where the log's own check is not.
 */
async function take(
  deps: KeyDeps,
  ref: Ref<'dedup'>,
  loaded: Loaded<NonNullable<DedupKeyAggregate>>,
  taking: { key: string; scope: KeyScope; queue: string | null },
  jobId: string,
  freeHolder: string | null,
): Promise<void> {
  const command = {
    type: 'take_dedup_key' as const,
    data: { job_id: jobId, ...taking, free_holder: freeHolder },
    meta: { now: deps.now().toISOString() },
  }
  await deps.guard.serialize(deps.store.subjectOf(ref), () => dedupKeyHandler.decide(deps, ref, command, { hint: loaded, trustHint: true }))
}

/**
 * Gives the key back after its job could not be created, so the next create need not wait for
 * it to count as abandoned. Only the holder's release appends anything.
 */
export async function releaseDedup(deps: KeyDeps, ref: Ref<'dedup'>, jobId: string): Promise<void> {
  const command = { type: 'release_dedup_key' as const, data: { job_id: jobId }, meta: { now: deps.now().toISOString() } }
  await deps.guard.serialize(deps.store.subjectOf(ref), () => dedupKeyHandler.decide(deps, ref, command))
}
