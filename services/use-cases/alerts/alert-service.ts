import type { Actor } from '../../../domain/decider.ts'
import type { Alert, AlertCommand, AlertEvent, AlertSettings } from '../../../domain/alert.ts'
import { AlertNotFound } from '../../../domain/errors.ts'
import { alertSettings, applyAlertRows } from '../../../projections/alerts.ts'
import type { Queryable } from '../../../projections/database.ts'
import { jobList } from '../../../projections/job-list.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { alertHandler } from '../../../streams/aggregates.ts'
import { commandWithRows } from '../../infrastructure/command-with-rows.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { IsolatedPass } from '../../infrastructure/failing-items.ts'

const alertIdPattern = /^alr_[0-9a-z]{26}$/

/** `db`: where the alert's row is written at once (a transaction of the caller's, or the pool). */
export async function commandAlert(
  deps: Deps,
  projectId: string,
  alertId: string,
  command: AlertCommand,
  db: Queryable = deps.sql,
): Promise<CommandResult<AlertEvent, Alert>> {
  if (!alertIdPattern.test(alertId)) throw new AlertNotFound(`alert ${alertId} was not found`)
  return commandWithRows(deps, alertHandler, alertHandler.ref(projectId, alertId), command, applyAlertRows, db)
}

export async function createAlert(
  deps: Deps,
  projectId: string,
  settings: AlertSettings,
  db: Queryable = deps.sql,
  actor?: Actor,
): Promise<CommandResult<AlertEvent, Alert>> {
  const alertId = `alr_${deps.newUlid().toLowerCase()}`
  const command: AlertCommand = {
    type: 'create_alert',
    data: { ...settings, alert_id: alertId, project_id: projectId },
    meta: { now: deps.now().toISOString(), actor },
  }
  return commandAlert(deps, projectId, alertId, command, db)
}

/**
 * Creates alerts within a per-project cap (deleted alerts do not count). The count and the new
 * row are written in one transaction under a Postgres advisory lock of the project, so the cap
 * holds across API processes. Creations of one project also take turns in this process, so a
 * burst of them holds one pooled connection, not one each while they wait for the lock.
 */
export class CappedAlertCreation {
  readonly #deps: Deps
  readonly #turns = new Map<string, Promise<unknown>>()

  constructor(deps: Deps) {
    this.#deps = deps
  }

  /** Resolves to the creation, or null when the project already has `max` alerts. */
  async create(projectId: string, settings: AlertSettings, max: number, actor?: Actor): Promise<CommandResult<AlertEvent, Alert> | null> {
    const before = this.#turns.get(projectId) ?? Promise.resolve()
    const mine = before.catch(() => undefined).then(() => this.#createCounted(projectId, settings, max, actor))
    this.#turns.set(projectId, mine)
    try {
      return await mine
    } finally {
      if (this.#turns.get(projectId) === mine) this.#turns.delete(projectId)
    }
  }

  #createCounted(
    projectId: string,
    settings: AlertSettings,
    max: number,
    actor: Actor | undefined,
  ): Promise<CommandResult<AlertEvent, Alert> | null> {
    return this.#deps.sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`alerts:${projectId}`}, 0))`
      if ((await alertSettings.liveCount(tx, projectId)) >= max) return null
      return createAlert(this.#deps, projectId, settings, tx, actor)
    })
  }
}

export async function loadAlert(deps: Deps, projectId: string, alertId: string): Promise<Alert> {
  const alert = alertIdPattern.test(alertId) ? (await alertHandler.load(deps.store, alertHandler.ref(projectId, alertId))).state : null
  if (alert === null || alert.deleted) throw new AlertNotFound(`alert ${alertId} was not found`)
  return alert
}

/** What an alert measures, now, from the jobs read model. */
export async function measure(deps: Deps, alert: Pick<Alert, 'project_id' | 'kind' | 'queue' | 'window_minutes'>, now: Date): Promise<number> {
  switch (alert.kind) {
    case 'dead_letter_count':
      return jobList.deadLetteredSince(deps.sql, alert.project_id, alert.queue, new Date(now.getTime() - alert.window_minutes * 60_000))
    case 'queue_depth':
      return jobList.pendingCount(deps.sql, alert.project_id, alert.queue)
    case 'oldest_pending_age': {
      const oldest = await jobList.oldestDueAt(deps.sql, alert.project_id, alert.queue, now)
      return oldest === null ? 0 : Math.max(0, Math.floor((now.getTime() - oldest.getTime()) / 1000))
    }
  }
}

/**
 * Evaluates every enabled alert: measures it and records the result on the aggregate, which
 * decides whether that is a trigger (condition newly holds), a resolution (it no longer holds)
 * or nothing (no change: a condition that keeps holding notifies once). Notifications follow
 * from the appended `alert_triggered` / `alert_resolved` on the log: the dispatcher sends the
 * e-mails and the webhooks (services/roles/dispatcher).
 */
export async function evaluateAlerts(
  deps: Deps,
  pass = new IsolatedPass(deps.log, 'alert pass'),
  pageSize = 1000,
): Promise<{ triggered: number; resolved: number }> {
  const now = deps.now()
  let triggered = 0
  let resolved = 0
  for (let after = { project_id: '', id: '' }; ;) {
    const page = await alertSettings.toEvaluate(deps.sql, after, pageSize)
    const counts = await evaluatePage(deps, pass, page, now)
    triggered += counts.triggered
    resolved += counts.resolved
    if (page.length < pageSize) break
    after = page.at(-1)!
  }
  return { triggered, resolved }
}

/** The page's alerts one after another; one that fails is logged and held back (failing-items.ts). */
async function evaluatePage(
  deps: Deps,
  pass: IsolatedPass,
  rows: Array<{ project_id: string; id: string }>,
  now: Date,
): Promise<{ triggered: number; resolved: number }> {
  let triggered = 0
  let resolved = 0
  await pass.each(
    rows.filter((row) => !pass.isHeldBack(row)),
    1,
    async (row) => {
      const alert = await loadAlert(deps, row.project_id, row.id)
      const value = await measure(deps, alert, now)
      const result = await commandAlert(deps, row.project_id, row.id, {
        type: 'record_evaluation',
        data: { value },
        meta: { now: now.toISOString() },
      })
      const event = result.events[0]
      if (event?.type === 'alert_triggered') triggered++
      if (event?.type === 'alert_resolved') resolved++
    },
  )
  return { triggered, resolved }
}
