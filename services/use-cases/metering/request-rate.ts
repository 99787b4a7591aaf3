import type { Sql } from '../../../projections/database.ts'

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
  /** The epoch minute the admitted requests were counted in (what a refund gives back). */
  minute: number
}

interface ProjectCounts {
  /** Counts of every process as last read from Postgres, by epoch minute. */
  shared: Map<number, number>
  /** This process's admissions not yet written. */
  pending: Map<number, number>
  /** Admissions being written now: still counted until the shared counts are read back. */
  writing: Map<number, number>
  loaded: Promise<void> | null
  /**
   * The window's total and oldest minute, summed once and then kept by each admission: a
   * request costs O(1) whatever the number of minutes. Summed again only when the window moves
   * (once a minute) or a flush replaces the counts (every 250 ms).
   */
  window: { from: number; used: number; oldest: number } | null
}

function summed(counts: ProjectCounts, from: number, nowMinute: number): { from: number; used: number; oldest: number } {
  let used = 0
  let oldest = nowMinute
  for (const m of [counts.shared, counts.writing, counts.pending]) {
    for (const [minute, n] of m) {
      if (minute <= from) continue
      used += n
      if (minute < oldest) oldest = minute
    }
  }
  return { from, used, oldest }
}

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

  /** Admits `weight` requests at once (a batch's items) if the window holds them all, or none. */
  async admit(projectId: string, limit: number, now: Date, weight = 1): Promise<RateVerdict> {
    const nowMinute = Math.floor(now.getTime() / 60_000)
    let counts = this.#projects.get(projectId)
    if (counts === undefined) {
      counts = { shared: new Map(), pending: new Map(), writing: new Map(), loaded: null, window: null }
      counts.loaded = this.#load(projectId, counts, nowMinute)
      this.#projects.set(projectId, counts)
    }
    if (counts.loaded !== null) {
      await counts.loaded
      counts.loaded = null
    }
    const from = nowMinute - windowMinutes
    if (counts.window?.from !== from) counts.window = summed(counts, from, nowMinute)
    const window = counts.window
    const resetAt = (window.used > 0 ? window.oldest : nowMinute) * 60 + windowMinutes * 60
    if (window.used + weight > limit) return { admitted: false, limit, remaining: Math.max(0, limit - window.used), resetAt, minute: nowMinute }
    counts.pending.set(nowMinute, (counts.pending.get(nowMinute) ?? 0) + weight)
    window.used += weight
    if (nowMinute < window.oldest) window.oldest = nowMinute
    return { admitted: true, limit, remaining: limit - window.used, resetAt, minute: nowMinute }
  }

  /**
   * Gives back `units` admitted in `minute` (a long poll that waited its full time for nothing;
   * README, "Security and limits"): counted as minus that many in the minute, so a count already
   * written is lowered by the next flush. Nothing when the minute has left the window (or this
   * process forgot the project: then it was idle for an hour, and the minute is gone too).
   */
  refund(projectId: string, minute: number, units = 1): void {
    const counts = this.#projects.get(projectId)
    if (counts === undefined || minute <= Math.floor(Date.now() / 60_000) - windowMinutes) return
    counts.pending.set(minute, (counts.pending.get(minute) ?? 0) - units)
    if (counts.window !== null && minute > counts.window.from) counts.window.used -= units
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
    this.#forgetIdle()
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
      const byProject = new Map<string, Map<number, number>>()
      for (const r of fresh) {
        let minutes = byProject.get(r.project_id)
        if (minutes === undefined) byProject.set(r.project_id, (minutes = new Map()))
        minutes.set(r.minute, r.n)
      }
      for (const projectId of known) {
        const counts = this.#projects.get(projectId)
        if (counts === undefined || counts.loaded !== null) continue
        counts.shared = byProject.get(projectId) ?? new Map()
        counts.writing = new Map()
        counts.window = null
      }
    } catch (err) {
      // Written but not read back: they stay counted as `writing` until the next read.
      if (written) throw err
      // Not written: count them again next time rather than lose them.
      for (const [projectId, pending] of taken) {
        const counts = this.#projects.get(projectId)!
        counts.writing = new Map()
        for (const [minute, n] of pending) counts.pending.set(minute, (counts.pending.get(minute) ?? 0) + n)
        counts.window = null
      }
      throw err
    }
  }

  /**
   * Drops projects this process has counted nothing for in the last hour: they would otherwise be
   * read back every 250 ms for as long as the process runs. A request later loads them again.
   */
  #forgetIdle(): void {
    const from = Math.floor(Date.now() / 60_000) - windowMinutes
    for (const [projectId, counts] of this.#projects) {
      if (counts.loaded !== null || counts.pending.size > 0 || counts.writing.size > 0) continue
      if (![...counts.shared.keys()].some((minute) => minute > from)) this.#projects.delete(projectId)
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    await this.flush()
  }
}
