import type { Sql } from '../../projections/database.ts'

/** The spec's window: requests in the last hour, counted in one-minute buckets. */
const windowMinutes = 60
/** How often this process writes its counts and reads everyone's. */
export const defaultFlushIntervalMs = 250

export interface RateVerdict {
  admitted: boolean
  limit: number
  remaining: number
  /** Unix seconds when the oldest counted minute leaves the window. */
  resetAt: number
}

interface ProjectCounts {
  /** Counts of every process as last read from Postgres, by epoch minute. */
  shared: Map<number, number>
  /** This process's admissions not yet written. */
  pending: Map<number, number>
  /** Admissions being written now: still counted until the shared counts are read back. */
  writing: Map<number, number>
  loaded: Promise<void> | null
}

const sum = (m: Map<number, number>, from: number) => [...m].reduce((s, [minute, n]) => (minute > from ? s + n : s), 0)

/**
 * The per-project request limit over a sliding hour, shared by every API process. Each process
 * counts in memory and, every 250 ms, adds its counts to one Postgres row per project and minute
 * and reads back the sum of all processes. A decision uses the shared sum plus this process's
 * unwritten counts, so across processes the limit can be overshot by at most what the others
 * admitted in the last quarter second; within one process it is exact.
 */
export class RequestRateLimiter {
  readonly #sql: Sql
  readonly #projects = new Map<string, ProjectCounts>()
  #timer: NodeJS.Timeout | undefined
  #flushing: Promise<void> = Promise.resolve()

  constructor(sql: Sql, flushIntervalMs = defaultFlushIntervalMs) {
    this.#sql = sql
    this.#timer = setInterval(() => void this.flush(), flushIntervalMs)
    this.#timer.unref()
  }

  async #load(projectId: string, counts: ProjectCounts, nowMinute: number): Promise<void> {
    const rows = await this.#sql<{ minute: number; n: number }[]>`
      SELECT minute, n FROM request_counts WHERE project_id = ${projectId} AND minute > ${nowMinute - windowMinutes}`
    counts.shared = new Map(rows.map((r) => [r.minute, r.n]))
  }

  async admit(projectId: string, limit: number, now: Date): Promise<RateVerdict> {
    const nowMinute = Math.floor(now.getTime() / 60_000)
    let counts = this.#projects.get(projectId)
    if (counts === undefined) {
      counts = { shared: new Map(), pending: new Map(), writing: new Map(), loaded: null }
      counts.loaded = this.#load(projectId, counts, nowMinute)
      this.#projects.set(projectId, counts)
    }
    if (counts.loaded !== null) {
      await counts.loaded
      counts.loaded = null
    }
    const from = nowMinute - windowMinutes
    const used = sum(counts.shared, from) + sum(counts.writing, from) + sum(counts.pending, from)
    const minutes = [...counts.shared.keys(), ...counts.writing.keys(), ...counts.pending.keys()].filter((m) => m > from)
    const oldest = minutes.length > 0 ? Math.min(...minutes) : nowMinute
    const resetAt = (oldest + windowMinutes) * 60
    if (used >= limit) return { admitted: false, limit, remaining: 0, resetAt }
    counts.pending.set(nowMinute, (counts.pending.get(nowMinute) ?? 0) + 1)
    return { admitted: true, limit, remaining: limit - used - 1, resetAt }
  }

  /** Writes this process's counts and reads every process's back. */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#flushOnce()).catch(() => undefined)
    return this.#flushing
  }

  async #flushOnce(): Promise<void> {
    const rows: Array<{ project_id: string; minute: number; n: number }> = []
    const taken = new Map<string, Map<number, number>>()
    for (const [projectId, counts] of this.#projects) {
      if (counts.pending.size === 0) continue
      for (const [minute, n] of counts.pending) rows.push({ project_id: projectId, minute, n })
      taken.set(projectId, counts.pending)
      counts.writing = counts.pending
      counts.pending = new Map()
    }
    // Every known project is read back, written to or not: other processes count too.
    const known = [...this.#projects.keys()]
    if (known.length === 0) return
    let written = false
    try {
      if (rows.length > 0) {
        await this.#sql`
          INSERT INTO request_counts (project_id, minute, n)
          SELECT * FROM unnest(${rows.map((r) => r.project_id)}::text[], ${rows.map((r) => r.minute)}::bigint[], ${rows.map((r) => r.n)}::bigint[])
          ON CONFLICT (project_id, minute) DO UPDATE SET n = request_counts.n + excluded.n`
      }
      written = true
      // Minutes are those of the newest admission's clock, which tests may shift; a day back is plenty.
      const newest = Math.max(0, ...rows.map((r) => r.minute))
      const fresh = await this.#sql<{ project_id: string; minute: number; n: number }[]>`
        SELECT project_id, minute, n FROM request_counts
        WHERE project_id = ANY(${known}) AND minute > ${Math.min(newest, Math.floor(Date.now() / 60_000)) - 24 * 60}`
      for (const projectId of known) {
        const counts = this.#projects.get(projectId)!
        if (counts.loaded !== null) continue
        counts.shared = new Map(fresh.filter((r) => r.project_id === projectId).map((r) => [r.minute, r.n]))
        counts.writing = new Map()
      }
    } catch (err) {
      // Written but not read back: they stay counted as `writing` until the next read.
      if (written) throw err
      // Not written: count them again next time rather than lose them.
      for (const [projectId, pending] of taken) {
        const counts = this.#projects.get(projectId)!
        counts.writing = new Map()
        for (const [minute, n] of pending) counts.pending.set(minute, (counts.pending.get(minute) ?? 0) + n)
      }
      throw err
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    await this.flush()
  }
}
