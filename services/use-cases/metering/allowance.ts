import type { Sql } from '../../../projections/database.ts'

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

/** One unit of the allowance: the period's count before it, and whether it is billed as overage. */
export interface Unit {
  used: number
  asOverage: boolean
}

export type AllowanceRefusal = 'monthly_allowance_exceeded' | 'spend_cap_reached'

/** What a request for some units got. */
export interface Grant {
  period: string
  /** In the order asked for: fewer than asked when the terms ran out, and later creates go without. */
  units: Unit[]
  /** Why `units` is short of the count asked for; null when every unit was granted. */
  refusal: AllowanceRefusal | null
  /** The period as it stood before the first unit, or after the refusal when no unit was granted. */
  reading: QuotaReading
}

interface Waiter {
  terms: QuotaTerms
  endsAt: Date
  count: number
  units: Unit[]
  reading: QuotaReading | null
  resolve(grant: Grant): void
  reject(err: unknown): void
}

/** Units taken ahead by one process: counted as used in the row, handed out without a round trip. */
interface Lease {
  /** Next unit's count (0-based) and the end of the leased range. */
  next: number
  end: number
  /** The period's overage when the lease was taken (leased units are never overage). */
  overage: number
  grantedAt: number
  lastUsedAt: number
}

interface KeyState {
  waiters: Waiter[]
  draining: boolean
  lease: Lease | null
  /** Units taken since the last statement, to size the next lease. */
  demand: number
  /** Requests since the last statement: a lease saves round trips per request, so these decide whether to take one. */
  requests: number
}

/** Requests (each for one unit or a batch's) served by one statement at most. */
const maxBatch = 256
const maxLease = 500
/**
 * Requests since the last statement that make a process lease ahead. Counted in requests, not
 * units: one batch of a hundred jobs costs one statement anyway, and a lease taken for it would
 * only hold units out of other processes' reach.
 */
const leaseFromRequests = 8
const leaseIdleMs = 500
const leaseMaxAgeMs = 2_000
const leaseCheckMs = 250

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
   * Takes `count` units for as many creates (one, or a batch's). Units come from this process's
   * lease when it has them (no round trip); otherwise requests waiting for the same project and
   * period are served by one statement (a group commit), which also leases a few units ahead when
   * the allowance has plenty of room. Each unit gets its own count; a request the terms cannot
   * fill gets the units there are, in order, and the refusal for the rest.
   */
  take(projectId: string, terms: QuotaTerms, now: Date, count: number): Promise<Grant> {
    if (!Number.isInteger(count) || count < 1) throw new RangeError(`take needs a whole number of units, at least 1 (got ${count})`)
    const { start, endsAt } = billingPeriodOf(now)
    const key = `${projectId}/${start}`
    const state = this.#stateOf(key)
    state.demand += count
    state.requests++
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { terms, endsAt, count, units: [], reading: null, resolve, reject }
      this.#fromLease(state, waiter)
      if (waiter.units.length === count) return resolve({ period: start, units: waiter.units, refusal: null, reading: waiter.reading! })
      state.waiters.push(waiter)
      if (!state.draining) void this.#drain(key, projectId, start, state)
    })
  }

  readonly #states = new Map<string, KeyState>()
  /** Usage rows known to exist (they are never deleted), so the insert is skipped. */
  readonly #knownRows = new Set<string>()
  #timer: NodeJS.Timeout | undefined

  #stateOf(key: string): KeyState {
    let state = this.#states.get(key)
    if (state === undefined) {
      state = { waiters: [], draining: false, lease: null, demand: 0, requests: 0 }
      this.#states.set(key, state)
    }
    return state
  }

  /** Units of the lease, as many as it holds and the terms still give the allowance room for. */
  #fromLease(state: KeyState, w: Waiter): void {
    const lease = state.lease
    if (lease === null) return
    const give = Math.min(w.count - w.units.length, lease.end - lease.next, w.terms.allowance - lease.next)
    for (let k = 0; k < give; k++) {
      const used = lease.next++
      w.reading ??= readingOf(w.terms, used, lease.overage, w.endsAt)
      w.units.push({ used, asOverage: false })
    }
    if (give > 0) lease.lastUsedAt = Date.now()
  }

  async #drain(key: string, projectId: string, period: string, state: KeyState): Promise<void> {
    state.draining = true
    try {
      while (state.waiters.length > 0) {
        const batch = state.waiters.splice(0, maxBatch)
        try {
          await this.#serve(key, projectId, period, state, batch)
        } catch (err) {
          // Units a request already took from the lease stay counted: the safe side.
          for (const w of batch) w.reject(err)
        }
      }
    } finally {
      state.draining = false
    }
  }

  async #serve(key: string, projectId: string, period: string, state: KeyState, waiting: Waiter[]): Promise<void> {
    // Requests that queued while the statement granting a lease was in flight take from it first.
    const batch: Waiter[] = []
    for (const w of waiting) {
      this.#fromLease(state, w)
      if (w.units.length === w.count) w.resolve({ period, units: w.units, refusal: null, reading: w.reading! })
      else batch.push(w)
    }
    if (batch.length === 0) return
    // A lease with units left that the terms no longer allow (a smaller allowance) goes back.
    await this.#returnLease(projectId, period, state)
    // The newest request carries the newest view of the project's terms.
    const terms = batch[batch.length - 1]!.terms
    const n = batch.reduce((sum, w) => sum + w.count - w.units.length, 0)
    // Ahead of demand, only under load (a quiet project's counts stay exact to the unit): about
    // twice what this process took since its last statement, at most a quarter of what the
    // allowance has left after this batch (so other processes keep room), never overage (overage
    // units are each checked against the cap).
    const ahead = state.requests >= leaseFromRequests ? Math.min(maxLease, state.demand * 2) : 0
    state.demand = 0
    state.requests = 0
    if (!this.#knownRows.has(key)) {
      await this
        .#sql`INSERT INTO project_usage (project_id, period_start, used, overage) VALUES (${projectId}, ${period}, 0, 0) ON CONFLICT DO NOTHING`
      this.#knownRows.add(key)
    }
    const on = terms.overageEnabled
    const cap = terms.spendCapCents
    const rate = terms.centsPer10k
    // Room: what the allowance has left, plus with overage on what the cap still allows
    // (o overage jobs cost ceil(o × rate ÷ 10,000) cents ≤ cap  ⇔  o ≤ floor(cap × 10,000 ÷ rate)).
    // Every SET expression reads the row as it was, under the row's lock.
    const sql = this.#sql
    const allowance = sql`${terms.allowance}::bigint`
    const takeSql = sql`LEAST(${n}::bigint, GREATEST(${allowance} - used, 0)
      + CASE WHEN ${on}::boolean THEN (CASE WHEN ${cap}::bigint IS NULL OR ${rate}::numeric = 0 THEN ${n}::bigint
             ELSE GREATEST(floor(${cap}::bigint * 10000 / ${rate}::numeric)::bigint - overage, 0) END) ELSE 0 END)`
    const leaseSql = sql`LEAST(${ahead}::bigint, GREATEST((${allowance} - used - ${takeSql}) / 4, 0))`
    const rows = await sql<{ used: number; overage: number; last_take: number }[]>`
      UPDATE project_usage SET
        used = used + ${takeSql} + ${leaseSql},
        overage = overage + GREATEST(0, used + ${takeSql} - GREATEST(${allowance}, used)),
        last_take = ${takeSql} + ${leaseSql}
      WHERE project_id = ${projectId} AND period_start = ${period}
      RETURNING used, overage, last_take`
    const row = rows[0]
    if (row === undefined) {
      this.#knownRows.delete(key)
      throw new Error(`usage row of ${key} is missing`)
    }
    const total = row.last_take
    const take = Math.min(n, total)
    const lease = total - take
    const oldUsed = row.used - total
    const overageAfterTake = row.overage
    const oldOverage = overageAfterTake - Math.max(0, oldUsed + take - Math.max(terms.allowance, oldUsed))
    const refusal: AllowanceRefusal = on ? 'spend_cap_reached' : 'monthly_allowance_exceeded'
    let granted = 0
    for (const w of batch) {
      const give = Math.min(w.count - w.units.length, take - granted)
      for (let k = 0; k < give; k++) {
        const used = oldUsed + granted + k
        const overage = oldOverage + Math.max(0, used - Math.max(terms.allowance, oldUsed))
        w.reading ??= readingOf(terms, used, overage, w.endsAt)
        w.units.push({ used, asOverage: used >= terms.allowance })
      }
      granted += give
      const short = w.units.length < w.count
      w.resolve({ period, units: w.units, refusal: short ? refusal : null, reading: w.reading ?? readingOf(terms, row.used, row.overage, w.endsAt) })
    }
    if (lease > 0) {
      state.lease = { next: oldUsed + take, end: row.used, overage: overageAfterTake, grantedAt: Date.now(), lastUsedAt: Date.now() }
      this.#timer ??= setInterval(() => void this.#expireLeases(), leaseCheckMs).unref()
    }
  }

  /** Gives back what a lease did not use, so unused units are never counted as jobs. */
  async #returnLease(projectId: string, period: string, state: KeyState): Promise<void> {
    const lease = state.lease
    state.lease = null
    const unused = lease === null ? 0 : lease.end - lease.next
    if (unused <= 0) return
    await this.#sql`UPDATE project_usage SET used = used - ${unused} WHERE project_id = ${projectId} AND period_start = ${period}`
  }

  /** Leases idle or old are returned, so a plan change or another process sees the room soon. */
  async #expireLeases(force = false): Promise<void> {
    const now = Date.now()
    for (const [key, state] of this.#states) {
      const lease = state.lease
      const idle = lease === null || now - lease.lastUsedAt > leaseIdleMs || now - lease.grantedAt > leaseMaxAgeMs
      if (lease !== null && (force || idle) && !state.draining) {
        const [projectId, period] = key.split('/') as [string, string]
        await this.#returnLease(projectId, period, state).catch(() => {
          state.lease = lease
        })
      }
      if (state.lease === null && state.waiters.length === 0 && !state.draining) this.#states.delete(key)
    }
  }

  /** Returns every lease (on shutdown). */
  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.#expireLeases(true)
  }

  /** Gives back units whose jobs were not created after all (an append failed or was refused). */
  async release(projectId: string, period: string, units: readonly Unit[]): Promise<void> {
    if (units.length === 0) return
    const overage = units.filter((u) => u.asOverage).length
    await this.#sql`
      UPDATE project_usage SET used = greatest(used - ${units.length}, 0), overage = greatest(overage - ${overage}, 0)
      WHERE project_id = ${projectId} AND period_start = ${period}`
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
