/**
 * The deliverer's attempt slots, shared between projects. A quarter of the slots is kept in
 * reserve: a project may hold at most its share of the other three quarters, divided evenly
 * between the projects holding or waiting for slots (never less than `minShare`). So a project
 * that has none yet finds a free slot at once however slow the receivers of the busy ones are,
 * and one busy project alone still gets three quarters. As more projects get busy every share
 * shrinks, and slots a project holds over its new share come back as its attempts end (each
 * within the attempt deadline); only when shares cannot shrink further (`minShare` each filling
 * the pool) does a newcomer wait, for the first slot that frees. Waiters are served first come,
 * first served among those under their share.
 */
export class SlotPool {
  readonly #total: number
  readonly #shared: number
  readonly #minShare: number
  readonly #held = new Map<string, number>()
  readonly #waiting: Array<{ projectId: string; grant: (release: () => void) => void }> = []
  #inUse = 0

  constructor(total: number, minShare: number) {
    this.#total = total
    this.#shared = total - Math.floor(total / 4)
    this.#minShare = minShare
  }

  /** Slots `projectId` may hold now. */
  shareOf(projectId: string): number {
    const busy = new Set([...this.#held.keys(), ...this.#waiting.map((w) => w.projectId), projectId])
    return Math.max(this.#minShare, Math.floor(this.#shared / busy.size))
  }

  heldBy(projectId: string): number {
    return this.#held.get(projectId) ?? 0
  }

  /** Resolves with the slot's release function, or null if `signal` aborts first. */
  acquire(projectId: string, signal: AbortSignal): Promise<(() => void) | null> {
    if (signal.aborted) return Promise.resolve(null)
    if (this.#canGrant(projectId)) return Promise.resolve(this.#take(projectId))
    return new Promise((resolve) => {
      const waiter = {
        projectId,
        grant: (release: () => void) => {
          signal.removeEventListener('abort', onAbort)
          resolve(release)
        },
      }
      const onAbort = () => {
        const i = this.#waiting.indexOf(waiter)
        if (i >= 0) this.#waiting.splice(i, 1)
        resolve(null)
        this.#serve()
      }
      signal.addEventListener('abort', onAbort, { once: true })
      this.#waiting.push(waiter)
    })
  }

  #canGrant(projectId: string): boolean {
    return this.#inUse < this.#total && this.heldBy(projectId) < this.shareOf(projectId)
  }

  #take(projectId: string): () => void {
    this.#inUse++
    this.#held.set(projectId, this.heldBy(projectId) + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      this.#inUse--
      const left = this.heldBy(projectId) - 1
      if (left > 0) this.#held.set(projectId, left)
      else this.#held.delete(projectId)
      this.#serve()
    }
  }

  /** Grants free slots to the earliest waiters that are under their share. */
  #serve(): void {
    for (let i = 0; i < this.#waiting.length && this.#inUse < this.#total;) {
      const waiter = this.#waiting[i]!
      // Decided with the waiter still counted as busy, as it was when it queued.
      if (!this.#canGrant(waiter.projectId)) {
        i++
        continue
      }
      this.#waiting.splice(i, 1)
      waiter.grant(this.#take(waiter.projectId))
    }
  }
}
