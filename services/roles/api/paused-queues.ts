import { pausesAt, type Project } from '../../../domain/project/index.ts'
import type { ReadyIndex } from '../../use-cases/jobs/ready-index/index.ts'
import type { ApiKeyDirectory } from './api-key-directory.ts'

/** What a poll must leave alone now: its paused queues, and when the first of their pauses ends by itself. */
export interface PollPauses {
  paused: ReadonlySet<string>
  /** The earliest `until` of those pauses (ms since the epoch); null when none ends by itself. */
  endsAt: number | null
}

const none: PollPauses = { paused: new Set(), endsAt: null }

/**
 * The queues' pauses as this process knows them, for its polls: read from the project state the
 * API key directory keeps (replaced by every project event on the log, in every process), so a
 * pause or resume appended through any API process applies here as soon as its event arrives.
 * A resume wakes this process's polls waiting on the queue at once; a pause that ends by its
 * `until` needs no event: a poll reads the clock on each claim and waits no longer than `endsAt`.
 */
export class PausedQueues {
  readonly #keys: ApiKeyDirectory
  readonly #now: () => Date
  #unwatch: (() => void) | undefined

  constructor(keys: ApiKeyDirectory, ready: ReadyIndex, now: () => Date) {
    this.#keys = keys
    this.#now = now
    this.#unwatch = keys.onChange((before, after) => {
      if (before === undefined || before.queue_pauses.length === 0) return
      const holding = new Set(pausesAt(after, now()).map((p) => p.queue))
      for (const p of pausesAt(before, now())) {
        if (!holding.has(p.queue)) ready.wakeQueue(after.id, p.queue)
      }
    })
  }

  /** The pauses of `queues` now; `fallback` is the project as the request found it, where this process holds none newer. */
  of(projectId: string, queues: readonly string[], fallback: Project): PollPauses {
    let project = this.#keys.current(projectId)
    if (project === undefined) {
      // A dashboard session's poll of a project no event, key or append has brought to this process
      // since it started: kept, so that a resume's event has a state to compare with and wakes the poll.
      this.#keys.remember(fallback)
      project = fallback
    }
    if (project.queue_pauses.length === 0) return none
    const paused = new Set<string>()
    let endsAt: number | null = null
    for (const p of pausesAt(project, this.#now())) {
      if (!queues.includes(p.queue)) continue
      paused.add(p.queue)
      if (p.until !== null) endsAt = Math.min(endsAt ?? Infinity, Date.parse(p.until))
    }
    return paused.size === 0 ? none : { paused, endsAt }
  }

  stop(): void {
    this.#unwatch?.()
  }
}
