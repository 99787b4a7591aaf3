import type { Logger } from 'pino'
import { isBudgeted } from '../../domain/log-budget.ts'
import type { PlanLimits } from '../../domain/plans.ts'
import type { Plan } from '../../domain/project/index.ts'
import type { Sql } from '../../projections/database.ts'
import { projectDirectory } from '../../projections/project-directory.ts'
import { LogBudgetExceeded } from '../../streams/errors.ts'
import type { AppendMeter } from '../../streams/event-store.ts'

/** The budget's window: bytes appended in the last hour, counted in one-minute buckets. */
const windowMinutes = 60
/** How often this process writes its counts and reads everyone's back. */
const flushIntervalMs = 1_000
/** How often the plans of the projects counted are read again (a plan change applies within this). */
const planRefreshMs = 60_000
/** Buckets older than this are deleted (by any process, once a minute). */
const keptMinutes = 2 * windowMinutes

type Minutes = Map<number, number>

interface ProjectBytes {
  /** Every process's bytes per epoch minute, as last read back. */
  shared: Minutes
  /** This process's bytes not written yet. */
  pending: Minutes
  /** Bytes being written: still counted until the shared counts are read back. */
  writing: Minutes
  /** null: not known (not in the project directory, or not read yet): not limited meanwhile. */
  plan: Plan | null
  /** The first read of the project's counts and plan, while it runs. */
  loaded: Promise<void> | null
  /** Whether that first read was started: by the first check, never by a count alone. */
  loadStarted: boolean
  /** Date.now() of the last append counted or checked. */
  usedAt: number
}

function add(minutes: Minutes, minute: number, bytes: number): void {
  minutes.set(minute, (minutes.get(minute) ?? 0) + bytes)
}

/**
 * Each project's log budget: bytes appended to the log in a sliding hour, by plan
 * (`log_bytes_per_hour`), shared by every process of the install. Every append of a project
 * counts its stored size; an append that adds work or history (domain/log-budget.ts) is refused
 * with LogBudgetExceeded once the hour's bytes reach the budget.
 *
 * Each process counts in memory and, every second, adds its counts to one Postgres row per
 * project and minute and reads back the sum of all processes (the request limit's scheme,
 * services/use-cases/metering/request-rate.ts), so across processes a project can overshoot by
 * what the others appended in the last second; within one process the check is exact but for the
 * append that crosses the budget, which is made. Where Postgres cannot be read, appends are not
 * refused: the budget guards the log's size, and an outage of the counters must not stop the log.
 */
export class LogBudget implements AppendMeter {
  readonly #sql: Sql
  readonly #plans: Readonly<Record<Plan, PlanLimits>>
  readonly #log: Logger
  readonly #now: () => Date
  readonly #projects = new Map<string, ProjectBytes>()
  readonly #timer: NodeJS.Timeout
  #flushing: Promise<void> = Promise.resolve()
  #plansReadAt = 0
  #prunedMinute = 0
  #failing = false

  constructor(sql: Sql, plans: Readonly<Record<Plan, PlanLimits>>, log: Logger, now: () => Date) {
    this.#sql = sql
    this.#plans = plans
    this.#log = log
    this.#now = now
    this.#timer = setInterval(() => void this.flush(), flushIntervalMs)
    this.#timer.unref()
  }

  admit(projectId: string, eventTypes: readonly string[]): void | Promise<void> {
    if (!isBudgeted(eventTypes)) return
    const entry = this.#entry(projectId)
    if (!entry.loadStarted) this.#startLoad(projectId, entry)
    if (entry.loaded !== null) return entry.loaded.then(() => this.#check(projectId, entry))
    this.#check(projectId, entry)
  }

  stored(projectId: string, bytes: number): void {
    add(this.#entry(projectId).pending, this.#minute(), bytes)
  }

  #minute(): number {
    return Math.floor(this.#now().getTime() / 60_000)
  }

  #entry(projectId: string): ProjectBytes {
    let entry = this.#projects.get(projectId)
    if (entry === undefined) {
      entry = { shared: new Map(), pending: new Map(), writing: new Map(), plan: null, loaded: null, loadStarted: false, usedAt: Date.now() }
      this.#projects.set(projectId, entry)
    }
    entry.usedAt = Date.now()
    return entry
  }

  /**
   * Reads the project's counts and plan before its first check. Not on its first count: a project
   * is counted first when it is created, and a read started by that append could run before the
   * creation writes the project's directory row, leaving it without a plan (unlimited) until the
   * next flush.
   */
  #startLoad(projectId: string, entry: ProjectBytes): void {
    entry.loadStarted = true
    entry.loaded = this.#load(projectId, entry).finally(() => (entry.loaded = null))
  }

  async #load(projectId: string, entry: ProjectBytes): Promise<void> {
    try {
      const [rows, plans] = await Promise.all([
        this.#sql<{ minute: number; bytes: number }[]>`
          SELECT minute, bytes FROM log_byte_counts WHERE project_id = ${projectId} AND minute > ${this.#minute() - windowMinutes}`,
        projectDirectory.plansOf(this.#sql, [projectId]),
      ])
      entry.shared = new Map(rows.map((r) => [r.minute, r.bytes]))
      entry.plan = plans.get(projectId) ?? null
    } catch (err) {
      this.#warnOnce(err)
    }
  }

  /** The window's buckets, every process's and this one's: minute → bytes. */
  #window(entry: ProjectBytes): Minutes {
    const from = this.#minute() - windowMinutes
    const window: Minutes = new Map()
    for (const counts of [entry.shared, entry.writing, entry.pending]) {
      for (const [minute, bytes] of counts) if (minute > from) add(window, minute, bytes)
    }
    return window
  }

  #check(projectId: string, entry: ProjectBytes): void {
    if (entry.plan === null) return
    const limit = this.#plans[entry.plan].log_bytes_per_hour
    const window = this.#window(entry)
    let used = 0
    for (const bytes of window.values()) used += bytes
    if (used < limit) return
    // Back under the budget once enough of the oldest minutes have left the window.
    const nowMs = this.#now().getTime()
    let left = used
    let retryAfterMs = windowMinutes * 60_000
    for (const minute of [...window.keys()].sort((a, b) => a - b)) {
      left -= window.get(minute)!
      if (left < limit) {
        retryAfterMs = (minute + windowMinutes) * 60_000 - nowMs
        break
      }
    }
    throw new LogBudgetExceeded(projectId, limit, Math.max(1_000, retryAfterMs))
  }

  /** Writes this process's counts and reads every process's back (and, now and then, the plans). */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#flushOnce()).catch((err) => this.#warnOnce(err))
    return this.#flushing
  }

  async #flushOnce(): Promise<void> {
    this.#forgetIdle()
    const known = [...this.#projects.keys()].filter((id) => this.#projects.get(id)!.loaded === null)
    if (known.length === 0) return
    const rows: Array<{ project_id: string; minute: number; bytes: number }> = []
    for (const id of known) {
      const entry = this.#projects.get(id)!
      for (const [minute, bytes] of entry.pending) rows.push({ project_id: id, minute, bytes })
      for (const [minute, bytes] of entry.pending) add(entry.writing, minute, bytes)
      entry.pending = new Map()
    }
    const minute = this.#minute()
    try {
      if (rows.length > 0) {
        await this.#sql`
          INSERT INTO log_byte_counts (project_id, minute, bytes)
          SELECT project_id, minute, bytes FROM json_to_recordset(${JSON.stringify(rows)}::text::json) AS r(project_id text, minute bigint, bytes bigint)
          ON CONFLICT (project_id, minute) DO UPDATE SET bytes = log_byte_counts.bytes + excluded.bytes`
      }
    } catch (err) {
      // Not written: counted again next time rather than lost.
      for (const r of rows) {
        const entry = this.#projects.get(r.project_id)!
        add(entry.pending, r.minute, r.bytes)
        entry.writing = new Map()
      }
      throw err
    }
    const fresh = await this.#sql<{ project_id: string; minute: number; bytes: number }[]>`
      SELECT project_id, minute, bytes FROM log_byte_counts WHERE project_id = ANY(${known}) AND minute > ${minute - windowMinutes}`
    const shared = new Map<string, Minutes>(known.map((id) => [id, new Map()]))
    for (const r of fresh) shared.get(r.project_id)!.set(r.minute, r.bytes)
    for (const id of known) {
      const entry = this.#projects.get(id)
      if (entry === undefined) continue
      entry.shared = shared.get(id)!
      entry.writing = new Map()
    }
    // A project without a plan (its first read failed, Postgres busy or away, or it is not in the
    // directory) is read again at every flush until it has one: otherwise one failed read would
    // leave it unlimited until the next refresh of every plan, a minute later.
    const refreshAll = Date.now() - this.#plansReadAt >= planRefreshMs
    const toRead = refreshAll ? known : known.filter((id) => this.#projects.get(id)?.plan === null)
    if (toRead.length > 0) {
      const plans = await projectDirectory.plansOf(this.#sql, toRead)
      for (const id of toRead) {
        const entry = this.#projects.get(id)
        if (entry !== undefined) entry.plan = plans.get(id) ?? null
      }
      if (refreshAll) this.#plansReadAt = Date.now()
    }
    if (minute !== this.#prunedMinute) {
      this.#prunedMinute = minute
      await this.#sql`DELETE FROM log_byte_counts WHERE minute < ${minute - keptMinutes}`
    }
    this.#failing = false
  }

  /** Projects this process has neither counted nor checked for an hour: nothing of theirs is left in the window. */
  #forgetIdle(): void {
    const idleSince = Date.now() - windowMinutes * 60_000
    for (const [id, entry] of this.#projects) {
      if (entry.usedAt < idleSince && entry.pending.size === 0 && entry.loaded === null) this.#projects.delete(id)
    }
  }

  #warnOnce(err: unknown): void {
    if (!this.#failing) this.#log.warn({ err }, 'log budget: the counters cannot be read or written; appends are not refused meanwhile')
    this.#failing = true
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    await this.flush()
  }
}
