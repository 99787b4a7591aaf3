/**
 * Counts the requests of each project that hold something for a long time (a long poll, a
 * progress stream) in this process, and refuses one past the bound. Counted per process, not per
 * install: what such a request holds (memory, a NATS subscription, a place in this process's
 * claim line and Postgres pool) belongs to the process, and a shared count would cost a write per
 * request and keep the slots of a process that died.
 */
export class ProjectSlots {
  readonly #max: number
  readonly #held = new Map<string, number>()

  constructor(max: number) {
    this.#max = max
  }

  /**
   * Takes a slot of the project: resolves to its release, which is safe to call more than once
   * (only the first call frees the slot), or null when the project holds them all.
   */
  tryAcquire(projectId: string): (() => void) | null {
    const held = this.#held.get(projectId) ?? 0
    if (held >= this.#max) return null
    this.#held.set(projectId, held + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      const left = (this.#held.get(projectId) ?? 1) - 1
      if (left <= 0) this.#held.delete(projectId)
      else this.#held.set(projectId, left)
    }
  }

  /** Slots the project holds now. */
  held(projectId: string): number {
    return this.#held.get(projectId) ?? 0
  }

  get max(): number {
    return this.#max
  }
}
