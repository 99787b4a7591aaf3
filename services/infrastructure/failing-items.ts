import type { Logger } from 'pino'
import { isDatabaseUnavailable } from '../../projections/database.ts'
import { isLogUnavailable } from '../../streams/errors.ts'
import { schedulerItemFailures } from './metrics.ts'

/**
 * Items of a recurring pass (the scheduler's reaper, promotion, sweeps, alerts, retention) whose
 * handling threw, each held back from the next passes for a while that doubles with each failure
 * in a row: 1 s, 2 s, 4 s … at most 10 minutes. A pass leaves the held-back items out of its
 * query, so an item that keeps failing never heads the queue again and costs one try now and
 * then instead of one per pass. In memory, per process: a restarted scheduler tries each once
 * more. At most 10,000 items are kept; past that, the one that failed longest ago is let go first.
 */
export class FailingItems {
  readonly #now: () => number
  readonly #held = new Map<string, { failures: number; until: number }>()
  readonly #baseMs: number
  readonly #maxMs: number
  readonly #maxItems: number

  constructor(options: { now?: () => number; baseMs?: number; maxMs?: number; maxItems?: number } = {}) {
    this.#now = options.now ?? Date.now
    this.#baseMs = options.baseMs ?? 1_000
    this.#maxMs = options.maxMs ?? 600_000
    this.#maxItems = options.maxItems ?? 10_000
  }

  /** The keys held back now, for a pass's query to leave out. */
  heldBack(): string[] {
    const now = this.#now()
    const keys: string[] = []
    for (const [key, entry] of this.#held) if (entry.until > now) keys.push(key)
    return keys
  }

  isHeldBack(key: string): boolean {
    return (this.#held.get(key)?.until ?? 0) > this.#now()
  }

  /** Counts a failure of `key`: resolves to its failures in a row and how long it is now held back. */
  failed(key: string): { failures: number; heldBackMs: number } {
    const failures = (this.#held.get(key)?.failures ?? 0) + 1
    const heldBackMs = Math.min(this.#maxMs, this.#baseMs * 2 ** Math.min(failures - 1, 30))
    this.#held.delete(key)
    if (this.#held.size >= this.#maxItems) this.#held.delete(this.#held.keys().next().value!)
    this.#held.set(key, { failures, until: this.#now() + heldBackMs })
    return { failures, heldBackMs }
  }

  /** `key` was handled: it starts afresh. */
  succeeded(key: string): void {
    this.#held.delete(key)
  }
}

/**
 * An outage, not a bad item: Postgres or NATS out of reach. It fails the whole pass (logged
 * once by its loop) rather than holding back every item it met, which would delay them all by
 * their backoff once the dependency is back.
 */
export function isOutage(err: unknown): boolean {
  return isDatabaseUnavailable(err) || isLogUnavailable(err)
}

/** What a pass handles: one item of one project (a job, a parent, an alert, a project). */
export interface PassItem {
  project_id: string
  id: string
}

/**
 * One kind of pass whose items are isolated: `each` runs them, and an item that throws is logged
 * with its project and id, counted (`jobsvc_scheduler_item_failures_total{pass}`) and held back
 * (`FailingItems`), while the others go on; `heldBack` is what the pass's next query leaves out.
 */
export class IsolatedPass {
  readonly name: string
  readonly #log: Logger
  readonly #failing: FailingItems

  constructor(log: Logger, name: string, failing = new FailingItems()) {
    this.#log = log
    this.name = name
    this.#failing = failing
  }

  heldBack(): string[] {
    return this.#failing.heldBack()
  }

  isHeldBack(item: PassItem): boolean {
    return this.#failing.isHeldBack(item.id)
  }

  async each<T extends PassItem>(items: readonly T[], concurrency: number, run: (item: T) => Promise<void>): Promise<void> {
    const succeed = async (item: T) => {
      await run(item)
      this.#failing.succeeded(item.id)
    }
    await eachIsolated(items, concurrency, succeed, (item, err) => {
      const { failures, heldBackMs } = this.#failing.failed(item.id)
      schedulerItemFailures.inc({ pass: this.name })
      this.#log.error(
        { err, project_id: item.project_id, id: item.id, failures, held_back_ms: heldBackMs },
        `scheduler: ${this.name} skipped an item that failed; held back for ${heldBackMs} ms`,
      )
    })
  }
}

/**
 * Runs `run` over `items`, `concurrency` at a time, isolating them: an item that throws is
 * handed to `onFailure` and the others go on. An outage (`isOutage`) stops the pass instead: no
 * new item starts, and it is thrown once those in flight have settled.
 */
export async function eachIsolated<T>(
  items: readonly T[],
  concurrency: number,
  run: (item: T) => Promise<void>,
  onFailure: (item: T, err: unknown) => void,
): Promise<void> {
  let next = 0
  let outage: { err: unknown } | null = null
  const worker = async () => {
    while (outage === null && next < items.length) {
      const item = items[next++]!
      try {
        await run(item)
      } catch (err) {
        if (isOutage(err)) outage ??= { err }
        else onFailure(item, err)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker))
  if (outage !== null) throw (outage as { err: unknown }).err
}
