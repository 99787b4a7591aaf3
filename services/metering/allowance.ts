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
 * The monthly job allowance: one row per project and period, taken one unit at a time by a
 * single guarded upsert. The guard (room in the allowance, or overage on and the cap not
 * passed) is checked by Postgres on the row it locks, so concurrent creates in any number of
 * processes never take more than the terms allow, and each success sees a distinct count.
 */
export class Allowance {
  readonly #sql: Sql

  constructor(sql: Sql) {
    this.#sql = sql
  }

  async consume(projectId: string, terms: QuotaTerms, now: Date): Promise<Consumption> {
    const { start, endsAt } = billingPeriodOf(now)
    const overage = terms.overageEnabled
    const cap = terms.spendCapCents
    // A unit beyond the allowance is overage: counted as such now, at the terms of this moment.
    const rows = await this.#sql<{ used: number; overage: number }[]>`
      INSERT INTO project_usage (project_id, period_start, used, overage)
      SELECT ${projectId}, ${start}, 1, CASE WHEN 1 > ${terms.allowance}::bigint THEN 1 ELSE 0 END
      WHERE 0 < ${terms.allowance}::bigint OR (${overage}::boolean AND (${cap}::bigint IS NULL OR ceil(${terms.centsPer10k}::numeric / 10000) <= ${cap}::bigint))
      ON CONFLICT (project_id, period_start) DO UPDATE SET used = project_usage.used + 1,
        overage = project_usage.overage + CASE WHEN project_usage.used + 1 > ${terms.allowance}::bigint THEN 1 ELSE 0 END
      WHERE project_usage.used < ${terms.allowance}::bigint
         OR (${overage}::boolean AND (${cap}::bigint IS NULL
             OR ceil((project_usage.overage + 1) * ${terms.centsPer10k}::numeric / 10000) <= ${cap}::bigint))
      RETURNING used, overage`
    const row = rows[0]
    if (row !== undefined) {
      const asOverage = row.used > terms.allowance
      const reading = readingOf(terms, row.used - 1, row.overage - (asOverage ? 1 : 0), endsAt)
      return { admitted: true, reading, period: start, usedAfter: row.used, asOverage }
    }
    const reading = await this.read(projectId, terms, now)
    return { admitted: false, code: overage ? 'spend_cap_reached' : 'monthly_allowance_exceeded', reading }
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
