import type { Subscription } from '@nats-io/transport-node'
import { queueToken, readyWildcard } from '../../streams/names.ts'
import type { Deps } from '../runtime.ts'

/** One waiting poll's interest: set before it queries, so a wake-up between query and wait is kept. */
export interface ReadyListener {
  /** Resolves on a wake-up for one of the queues (or one that came since listen), the timeout, or abort. */
  wait(ms: number, signal: AbortSignal): Promise<void>
  close(): void
}

/**
 * Fans the plain-NATS wake-ups (`<ns>.ready.<project>.<queue>`) out to the long polls of this
 * process. One subscription per process, whatever the number of waiting polls.
 */
export class ReadyNotifier {
  readonly #deps: Deps
  readonly #listeners = new Map<string, Set<{ fire: () => void }>>()
  #subscription: Subscription | undefined

  constructor(deps: Deps) {
    this.#deps = deps
  }

  start(): void {
    const prefix = `${this.#deps.config.namespace}.ready.`
    this.#subscription = this.#deps.nats.nc.subscribe(readyWildcard(this.#deps.config.namespace), {
      callback: (err, msg) => {
        if (err) return
        const key = msg.subject.slice(prefix.length)
        for (const l of this.#listeners.get(key) ?? []) l.fire()
      },
    })
  }

  stop(): void {
    this.#subscription?.unsubscribe()
  }

  listen(projectId: string, queues: readonly string[]): ReadyListener {
    const keys = queues.map((q) => `${projectId}.${queueToken(q)}`)
    let fired = false
    let wake: (() => void) | undefined
    const entry = {
      fire: () => {
        fired = true
        wake?.()
      },
    }
    for (const k of keys) {
      let set = this.#listeners.get(k)
      if (set === undefined) this.#listeners.set(k, (set = new Set()))
      set.add(entry)
    }
    return {
      wait: (ms, signal) =>
        new Promise<void>((resolve) => {
          if (fired || signal.aborted) {
            fired = false
            return resolve()
          }
          const done = () => {
            clearTimeout(timer)
            signal.removeEventListener('abort', done)
            wake = undefined
            fired = false
            resolve()
          }
          const timer = setTimeout(done, ms)
          signal.addEventListener('abort', done, { once: true })
          wake = done
        }),
      close: () => {
        for (const k of keys) {
          const set = this.#listeners.get(k)
          set?.delete(entry)
          if (set?.size === 0) this.#listeners.delete(k)
        }
      },
    }
  }
}
