/** Where polls look for work: one project, its queues, optionally only some job types. */
export interface ClaimTarget {
  projectId: string
  queues: string[]
  jobTypes: string[] | null
}

/** One poll's share of a claim: the worker the jobs go to, and how many it takes. */
export interface PollDemand {
  workerId: string
  capacity: number
}

export type ClaimRequest = ClaimTarget & PollDemand

/** Runs one claim transaction for several polls of one target; resolves to each poll's jobs. */
export type ClaimRunner<J> = (target: ClaimTarget, polls: readonly PollDemand[]) => Promise<J[][]>

export interface ClaimLineLimits {
  /** Claim transactions one project may run at once. */
  perProject: number
  /** Claim transactions of all projects at once. */
  total: number
  /** Jobs one transaction may claim (the sum of the capacities of the polls it serves). */
  jobsPerTransaction: number
}

interface Waiter<J> {
  demand: PollDemand
  resolve(jobs: J[]): void
  reject(err: unknown): void
  withdraw?: () => void
}

interface Batch<J> {
  key: string
  target: ClaimTarget
  waiters: Waiter<J>[]
  capacity: number
}

interface ProjectLine<J> {
  /** When the project last started a transaction (a counter): the least recent goes first. */
  lastTurn: number
  running: number
  /** Polls served by the running transactions. */
  served: number
  /** Batches not started yet, first come first served. */
  queued: Batch<J>[]
  /** The queued batch of each target that still takes polls. */
  open: Map<string, Batch<J>>
}

/**
 * The Postgres side of long polls, bounded per project. Every claim runs as a transaction that
 * holds one of the process's pooled connections, and a project's waiting polls all wake on the
 * same wake-up: left alone, one project with hundreds of polls would take the whole pool at each
 * wake-up and tick, and every other tenant's polls, lists and reads would queue behind it.
 *
 * Here a project runs at most `perProject` claim transactions at once, and the process at most
 * `total`; the other polls wait in memory, holding no connection. Polls of one project and target
 * (queues and job types) that wait together join one batch, which one transaction serves (up to
 * `jobsPerTransaction` jobs), so a wake-up of 300 polls is a few queries, not 300. When a slot
 * frees, the waiting project whose last turn is the oldest goes next, so a project with a long
 * line does not delay another project's claim by more than one turn.
 */
export class ClaimLine<J> {
  readonly #run: ClaimRunner<J>
  readonly #limits: ClaimLineLimits
  /** Projects with running or queued batches. */
  readonly #lines = new Map<string, ProjectLine<J>>()
  #running = 0
  #turns = 0
  #pumpScheduled = false

  constructor(run: ClaimRunner<J>, limits: ClaimLineLimits) {
    this.#run = run
    this.#limits = limits
  }

  /**
   * Claims for one poll, in turn. An abort while the poll still waits for its turn takes it out of
   * its batch and resolves to no jobs; once its transaction runs, the answer is the transaction's.
   */
  claim(request: ClaimRequest, signal?: AbortSignal): Promise<J[]> {
    const target: ClaimTarget = {
      projectId: request.projectId,
      queues: [...request.queues].sort(),
      jobTypes: request.jobTypes === null ? null : [...request.jobTypes].sort(),
    }
    const demand: PollDemand = { workerId: request.workerId, capacity: Math.min(request.capacity, this.#limits.jobsPerTransaction) }
    if (signal?.aborted) return Promise.resolve([])
    return new Promise<J[]>((resolve, reject) => {
      const waiter: Waiter<J> = { demand, resolve, reject }
      const batch = this.#batchFor(target, demand.capacity)
      batch.waiters.push(waiter)
      batch.capacity += demand.capacity
      if (batch.capacity >= this.#limits.jobsPerTransaction) this.#lines.get(target.projectId)!.open.delete(batch.key)
      if (signal !== undefined) {
        const onAbort = () => this.#withdraw(batch, waiter)
        signal.addEventListener('abort', onAbort, { once: true })
        waiter.withdraw = () => signal.removeEventListener('abort', onAbort)
      }
      this.#schedulePump()
    })
  }

  /** Transactions running now (all projects, or one). */
  running(projectId?: string): number {
    return projectId === undefined ? this.#running : (this.#lines.get(projectId)?.running ?? 0)
  }

  /** Polls of the project waiting for their turn. */
  waiting(projectId: string): number {
    return this.#lines.get(projectId)?.queued.reduce((n, b) => n + b.waiters.length, 0) ?? 0
  }

  /** Polls of the project whose claim runs now (a transaction serves one or more). */
  served(projectId: string): number {
    return this.#lines.get(projectId)?.served ?? 0
  }

  #batchFor(target: ClaimTarget, capacity: number): Batch<J> {
    const key = JSON.stringify([target.queues, target.jobTypes])
    let line = this.#lines.get(target.projectId)
    if (line === undefined) this.#lines.set(target.projectId, (line = { lastTurn: 0, running: 0, served: 0, queued: [], open: new Map() }))
    const open = line.open.get(key)
    if (open !== undefined && open.capacity + capacity <= this.#limits.jobsPerTransaction) return open
    const batch: Batch<J> = { key, target, waiters: [], capacity: 0 }
    line.queued.push(batch)
    line.open.set(key, batch)
    return batch
  }

  #withdraw(batch: Batch<J>, waiter: Waiter<J>): void {
    const at = batch.waiters.indexOf(waiter)
    const line = this.#lines.get(batch.target.projectId)
    // Started already (the batch left the queue): the transaction's answer stands.
    if (at < 0 || line === undefined || !line.queued.includes(batch)) return
    batch.waiters.splice(at, 1)
    batch.capacity -= waiter.demand.capacity
    if (batch.waiters.length === 0) {
      line.queued.splice(line.queued.indexOf(batch), 1)
      if (line.open.get(batch.key) === batch) line.open.delete(batch.key)
      this.#forgetIfIdle(batch.target.projectId, line)
    }
    waiter.resolve([])
  }

  /**
   * Starts batches on the next turn of the event loop, so that the polls one wake-up (or one
   * read of the socket) woke have all joined their batch before it runs.
   */
  #schedulePump(): void {
    if (this.#pumpScheduled) return
    this.#pumpScheduled = true
    setImmediate(() => {
      this.#pumpScheduled = false
      this.#pump()
    })
  }

  #pump(): void {
    while (this.#running < this.#limits.total) {
      const next = this.#nextTurn()
      if (next === null) return
      this.#start(next.projectId, next.line, next.line.queued.shift()!)
    }
  }

  /** Of the projects with a queued batch and a free slot, the one whose last turn is the oldest. */
  #nextTurn(): { projectId: string; line: ProjectLine<J> } | null {
    let next: { projectId: string; line: ProjectLine<J> } | null = null
    for (const [projectId, line] of this.#lines) {
      if (line.queued.length === 0 || line.running >= this.#limits.perProject) continue
      if (next === null || line.lastTurn < next.line.lastTurn) next = { projectId, line }
    }
    if (next !== null) next.line.lastTurn = ++this.#turns
    return next
  }

  #start(projectId: string, line: ProjectLine<J>, batch: Batch<J>): void {
    if (line.open.get(batch.key) === batch) line.open.delete(batch.key)
    for (const w of batch.waiters) w.withdraw?.()
    line.running++
    line.served += batch.waiters.length
    this.#running++
    const finish = () => {
      line.running--
      line.served -= batch.waiters.length
      this.#running--
      this.#forgetIfIdle(projectId, line)
      this.#pump()
    }
    this.#run(
      batch.target,
      batch.waiters.map((w) => w.demand),
    ).then(
      (claimed) => {
        finish()
        batch.waiters.forEach((w, i) => w.resolve(claimed[i] ?? []))
      },
      (err: unknown) => {
        finish()
        for (const w of batch.waiters) w.reject(err)
      },
    )
  }

  #forgetIfIdle(projectId: string, line: ProjectLine<J>): void {
    if (line.running === 0 && line.queued.length === 0 && this.#lines.get(projectId) === line) this.#lines.delete(projectId)
  }
}
