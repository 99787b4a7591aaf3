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
  | { admitted: true; reading: QuotaReading; period: string; usedAfter: number }
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

function readingOf(terms: QuotaTerms, used: number, endsAt: Date): QuotaReading {
  const overage = Math.max(0, used - terms.allowance)
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
    const rows = await this.#sql<{ used: number }[]>`
      INSERT INTO project_usage (project_id, period_start, used)
      SELECT ${projectId}, ${start}, 1
      WHERE 0 < ${terms.allowance}::bigint OR (${overage}::boolean AND (${cap}::bigint IS NULL OR ceil(${terms.centsPer10k}::numeric / 10000) <= ${cap}::bigint))
      ON CONFLICT (project_id, period_start) DO UPDATE SET used = project_usage.used + 1
      WHERE project_usage.used < ${terms.allowance}::bigint
         OR (${overage}::boolean AND (${cap}::bigint IS NULL
             OR ceil((project_usage.used + 1 - ${terms.allowance}::bigint) * ${terms.centsPer10k}::numeric / 10000) <= ${cap}::bigint))
      RETURNING used`
    const usedAfter = rows[0]?.used
    if (usedAfter !== undefined) return { admitted: true, reading: readingOf(terms, usedAfter - 1, endsAt), period: start, usedAfter }
    const reading = await this.read(projectId, terms, now)
    return { admitted: false, code: overage ? 'spend_cap_reached' : 'monthly_allowance_exceeded', reading }
  }

  /** Gives back a unit whose job was not created after all (the append failed). */
  async release(projectId: string, period: string): Promise<void> {
    await this.#sql`UPDATE project_usage SET used = used - 1 WHERE project_id = ${projectId} AND period_start = ${period} AND used > 0`
  }

  async read(projectId: string, terms: QuotaTerms, now: Date): Promise<QuotaReading> {
    const { start, endsAt } = billingPeriodOf(now)
    const rows = await this.#sql<{ used: number }[]>`SELECT used FROM project_usage WHERE project_id = ${projectId} AND period_start = ${start}`
    return readingOf(terms, rows[0]?.used ?? 0, endsAt)
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
