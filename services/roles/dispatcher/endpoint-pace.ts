import { setTimeout as sleep } from 'node:timers/promises'
import type { ReplayPace } from '../../use-cases/webhooks/replay-run.ts'

/** Endpoints whose pace is remembered at once; past it the one paced longest ago is forgotten. */
const maxEndpoints = 10_000

/**
 * Replays' requests to one endpoint (a URL origin), spaced evenly at `perSecond` at most, for
 * every replay this process runs: the dispatcher that leads operations runs all of them
 * (operation-runner.ts), so the pace holds for the install. Live deliveries are not paced: they
 * come as the events do.
 */
export class EndpointPace implements ReplayPace {
  readonly #intervalMs: number
  /** When each endpoint may take its next request (Date.now() terms). */
  readonly #nextAt = new Map<string, number>()

  constructor(perSecond: number) {
    this.#intervalMs = 1000 / perSecond
  }

  async take(endpoint: string, requests: number, signal: AbortSignal): Promise<boolean> {
    const now = Date.now()
    const at = Math.max(now, this.#nextAt.get(endpoint) ?? 0)
    this.#nextAt.delete(endpoint)
    this.#nextAt.set(endpoint, at + requests * this.#intervalMs)
    if (this.#nextAt.size > maxEndpoints) this.#nextAt.delete(this.#nextAt.keys().next().value!)
    if (at <= now) return !signal.aborted
    try {
      await sleep(at - now, undefined, { signal })
      return true
    } catch {
      return false
    }
  }
}
