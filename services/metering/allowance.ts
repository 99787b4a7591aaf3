import type { Sql } from '../../projections/database.ts'

/** The project's terms for the current period, from its plan and billing settings. */
export interface QuotaTerms {
  allowance: number
  /** Overage on and possible on the plan (the plan has a rate). */
  overageEnabled: boolean
  centsPer10k: number
  spendCapCents: number | null
}

export interface QuotaReading {
  limit: number
  /** Jobs created this period before the request being answered. */
  used: number
  overage: number
  overageCostCents: number
  spendCapCents: number | null
  /** Unix seconds of the period's end. */
  resetAt: number
}

export type Consumption =
  | { admitted: true; reading: QuotaReading; period: string; usedAfter: number; asOverage: boolean }
  | { admitted: false; code: 'monthly_allowance_exceeded' | 'spend_cap_reached'; reading: QuotaReading }

interface Waiter {
  terms: QuotaTerms
  endsAt: Date
  resolve(consumption: Consumption): void
  reject(err: unknown): void
}

/** Creates served by one statement at most. */
const maxBatch = 256

/** Billing periods are UTC calendar months; the allowance resets on the first. */
export function billingPeriodOf(now: Date): { start: string; endsAt: Date } {
  const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))
  const endsAt = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1))
  return { start: start.toISOString().slice(0, 10), endsAt }
}

/** Overage is billed per job at the plan's rate per 10,000, rounded up to a whole cent. */
export function overageCostCents(overageJobs: number, centsPer10k: number): number {
  return overageJobs <= 0 ? 0 : Math.ceil((overageJobs * centsPer10k) / 10_000)
}

function readingOf(terms: QuotaTerms, used: number, overage: number, endsAt: Date): QuotaReading {
  return {
    limit: terms.allowance,
    used,
    overage,
    overageCostCents: overageCostCents(overage, terms.centsPer10k),
    spendCapCents: terms.spendCapCents,
    resetAt: Math.floor(endsAt.getTime() / 1000),
  }
}

/**
 * The monthly job allowance: one row per project and period. Units are taken by one UPDATE that
 * computes the room (allowance left, or overage on and the cap not passed) from the row it
 * locks, so concurrent creates in any number of processes never take more than the terms allow,
 * and each success sees a distinct count.
 */
export class Allowance {
  readonly #sql: Sql

  constructor(sql: Sql) {
    this.#sql = sql
  }

  /**
   * Takes one unit for a create. Creates waiting in this process for the same project and period
   * are served by one statement (a group commit): while a batch is in flight the next waiters
   * queue, and the following statement takes units for all of them. Each admitted create gets
   * its own count, in order.
   */
  consume(projectId: string, terms: QuotaTerms, now: Date): Promise<Consumption> {
    const { start, endsAt } = billingPeriodOf(now)
    const key = `${projectId}/${start}`
    return new Promise((resolve, reject) => {
      let queue = this.#queues.get(key)
      if (queue === undefined) {
        queue = { waiters: [], draining: false }
        this.#queues.set(key, queue)
      }
      queue.waiters.push({ terms, endsAt, resolve, reject })
      if (!queue.draining) void this.#drain(key, projectId, start, queue)
    })
  }

  readonly #queues = new Map<string, { waiters: Waiter[]; draining: boolean }>()
  /** Usage rows known to exist (they are never deleted), so the insert is skipped. */
  readonly #knownRows = new Set<string>()

  async #drain(key: string, projectId: string, period: string, queue: { waiters: Waiter[]; draining: boolean }): Promise<void> {
    queue.draining = true
    try {
      while (queue.waiters.length > 0) {
        const batch = queue.waiters.splice(0, maxBatch)
        try {
          await this.#serve(key, projectId, period, batch)
        } catch (err) {
          for (const w of batch) w.reject(err)
        }
      }
    } finally {
      queue.draining = false
      if (queue.waiters.length === 0) this.#queues.delete(key)
    }
  }

  async #serve(key: string, projectId: string, period: string, batch: Waiter[]): Promise<void> {
    // The newest request carries the newest view of the project's terms.
    const terms = batch[batch.length - 1]!.terms
    const n = batch.length
    if (!this.#knownRows.has(key)) {
      await this.#sql`INSERT INTO project_usage (project_id, period_start, used, overage) VALUES (${projectId}, ${period}, 0, 0) ON CONFLICT DO NOTHING`
      this.#knownRows.add(key)
    }
    const on = terms.overageEnabled
    const cap = terms.spendCapCents
    const rate = terms.centsPer10k
    // Room: what the allowance has left, plus with overage on what the cap still allows
    // (o overage jobs cost ceil(o × rate ÷ 10,000) cents ≤ cap  ⇔  o ≤ floor(cap × 10,000 ÷ rate)).
    // Every SET expression reads the row as it was, under the row's lock.
    const rows = await this.#sql<{ used: number; overage: number; last_take: number }[]>`
      UPDATE project_usage SET
        used = used + LEAST(${n}::bigint, GREATEST(${terms.allowance}::bigint - used, 0)
          + CASE WHEN ${on}::boolean THEN (CASE WHEN ${cap}::bigint IS NULL OR ${rate}::numeric = 0 THEN ${n}::bigint
                 ELSE GREATEST(floor(${cap}::bigint * 10000 / ${rate}::numeric)::bigint - overage, 0) END) ELSE 0 END),
        overage = overage + GREATEST(0, used + LEAST(${n}::bigint, GREATEST(${terms.allowance}::bigint - used, 0)
          + CASE WHEN ${on}::boolean THEN (CASE WHEN ${cap}::bigint IS NULL OR ${rate}::numeric = 0 THEN ${n}::bigint
                 ELSE GREATEST(floor(${cap}::bigint * 10000 / ${rate}::numeric)::bigint - overage, 0) END) ELSE 0 END)
          - GREATEST(${terms.allowance}::bigint, used)),
        last_take = LEAST(${n}::bigint, GREATEST(${terms.allowance}::bigint - used, 0)
          + CASE WHEN ${on}::boolean THEN (CASE WHEN ${cap}::bigint IS NULL OR ${rate}::numeric = 0 THEN ${n}::bigint
                 ELSE GREATEST(floor(${cap}::bigint * 10000 / ${rate}::numeric)::bigint - overage, 0) END) ELSE 0 END)
      WHERE project_id = ${projectId} AND period_start = ${period}
      RETURNING used, overage, last_take`
    const row = rows[0]
    if (row === undefined) {
      this.#knownRows.delete(key)
      throw new Error(`usage row of ${key} is missing`)
    }
    const take = row.last_take
    const oldUsed = row.used - take
    const oldOverage = row.overage - Math.max(0, row.used - Math.max(terms.allowance, oldUsed))
    batch.forEach((w, i) => {
      if (i < take) {
        const used = oldUsed + i
        const overage = oldOverage + Math.max(0, used - Math.max(terms.allowance, oldUsed))
        const asOverage = used >= terms.allowance
        w.resolve({ admitted: true, reading: readingOf(terms, used, overage, w.endsAt), period, usedAfter: used + 1, asOverage })
      } else {
        w.resolve({ admitted: false, code: on ? 'spend_cap_reached' : 'monthly_allowance_exceeded', reading: readingOf(terms, row.used, row.overage, w.endsAt) })
      }
    })
  }

  /** Gives back a unit whose job was not created after all (the append failed). */
  async release(projectId: string, taken: { period: string; asOverage: boolean }): Promise<void> {
    const overage = taken.asOverage ? 1 : 0
    await this.#sql`
      UPDATE project_usage SET used = used - 1, overage = greatest(overage - ${overage}, 0)
      WHERE project_id = ${projectId} AND period_start = ${taken.period} AND used > 0`
  }

  async read(projectId: string, terms: QuotaTerms, now: Date): Promise<QuotaReading> {
    const { start, endsAt } = billingPeriodOf(now)
    const usage = await this.usageOf(projectId, start)
    return readingOf(terms, usage.used, usage.overage, endsAt)
  }

  async usageOf(projectId: string, period: string): Promise<{ used: number; overage: number }> {
    const rows = await this.#sql<{ used: number; overage: number }[]>`
      SELECT used, overage FROM project_usage WHERE project_id = ${projectId} AND period_start = ${period}`
    return rows[0] ?? { used: 0, overage: 0 }
  }
}

export function quotaHeaders(reading: QuotaReading): Record<string, string> {
  const headers: Record<string, string> = {
    'X-Quota-Limit': String(reading.limit),
    'X-Quota-Used': String(reading.used),
    'X-Quota-Overage': String(reading.overage),
    'X-Quota-Overage-Cost': String(reading.overageCostCents),
    'X-Quota-Reset': String(reading.resetAt),
  }
  if (reading.spendCapCents !== null) headers['X-Quota-Spend-Cap'] = String(reading.spendCapCents)
  return headers
}
