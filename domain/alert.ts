import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { AlertAlreadyExists, AlertNotFound } from './errors.ts'

/**
 * An alert setting of a project: a condition on its jobs, evaluated by the scheduler, and where
 * to say so. The aggregate remembers whether the condition holds, so a condition that keeps
 * holding notifies once, and its end is recorded as a resolution.
 */

export const alertKinds = ['dead_letter_count', 'queue_depth', 'oldest_pending_age'] as const
export type AlertKind = (typeof alertKinds)[number]

export const alertStatuses = ['ok', 'firing'] as const
export type AlertStatus = (typeof alertStatuses)[number]

export interface AlertSettings {
  name: string
  kind: AlertKind
  /** Null: every queue of the project. */
  queue: string | null
  /** Fires when the measured value is above this (jobs, or seconds for oldest_pending_age). */
  threshold: number
  /** The look-back of dead_letter_count, in minutes. */
  window_minutes: number
  /** Addresses e-mailed on trigger and resolve; empty: e-mail nobody. */
  email: string[]
  /** Whether trigger and resolve are also published as webhook events (`alert.triggered`, `alert.resolved`). */
  webhook: boolean
  enabled: boolean
}

export interface Alert extends AlertSettings {
  id: string
  project_id: string
  status: AlertStatus
  /** The value measured at the last trigger or resolution, and when (evaluations that change nothing are not recorded). */
  last_value: number | null
  last_evaluated_at: string | null
  last_triggered_at: string | null
  last_resolved_at: string | null
  created_at: string
  updated_at: string
  deleted: boolean
}

export type AlertAggregate = Alert | null

export type AlertEvent =
  | { type: 'alert_created'; data: AlertSettings & { alert_id: string; project_id: string; created_at: string } }
  | { type: 'alert_updated'; data: AlertSettings & { updated_at: string } }
  | { type: 'alert_deleted'; data: { deleted_at: string } }
  | { type: 'alert_triggered'; data: { value: number; threshold: number; triggered_at: string } }
  | { type: 'alert_resolved'; data: { value: number; threshold: number; resolved_at: string } }

export type AlertEventType = AlertEvent['type']

export type AlertCommand =
  | { type: 'create_alert'; data: AlertSettings & { alert_id: string; project_id: string }; meta: CommandMeta }
  | { type: 'update_alert'; data: AlertSettings; meta: CommandMeta }
  | { type: 'delete_alert'; data: Record<string, never>; meta: CommandMeta }
  | { type: 'record_evaluation'; data: { value: number }; meta: CommandMeta }

function requireAlert(state: AlertAggregate): Alert {
  if (state === null || state.deleted) throw new AlertNotFound('the alert was not found')
  return state
}

const settingsOf = (s: AlertSettings): AlertSettings => ({
  name: s.name,
  kind: s.kind,
  queue: s.queue,
  threshold: s.threshold,
  window_minutes: s.window_minutes,
  email: s.email,
  webhook: s.webhook,
  enabled: s.enabled,
})

function decide(command: AlertCommand, state: AlertAggregate): AlertEvent[] {
  const now = command.meta.now
  switch (command.type) {
    case 'create_alert':
      if (state !== null) throw new AlertAlreadyExists('an alert with this id already exists')
      return [{ type: 'alert_created', data: { ...command.data, created_at: now } }]
    case 'update_alert': {
      const alert = requireAlert(state)
      if (JSON.stringify(settingsOf(alert)) === JSON.stringify(settingsOf(command.data))) return []
      return [{ type: 'alert_updated', data: { ...settingsOf(command.data), updated_at: now } }]
    }
    case 'delete_alert':
      requireAlert(state)
      return [{ type: 'alert_deleted', data: { deleted_at: now } }]
    case 'record_evaluation': {
      if (state === null || state.deleted) return []
      const { value } = command.data
      const holds = state.enabled && value > state.threshold
      if (holds && state.status === 'ok') return [{ type: 'alert_triggered', data: { value, threshold: state.threshold, triggered_at: now } }]
      if (!holds && state.status === 'firing') return [{ type: 'alert_resolved', data: { value, threshold: state.threshold, resolved_at: now } }]
      return []
    }
  }
}

function evolve(state: AlertAggregate, event: AlertEvent): AlertAggregate {
  if (event.type === 'alert_created') {
    const { alert_id, project_id, created_at, ...settings } = event.data
    return {
      ...settingsOf(settings),
      id: alert_id,
      project_id,
      status: 'ok',
      last_value: null,
      last_evaluated_at: null,
      last_triggered_at: null,
      last_resolved_at: null,
      created_at,
      updated_at: created_at,
      deleted: false,
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'alert_created')
  switch (event.type) {
    case 'alert_updated': {
      const { updated_at, ...settings } = event.data
      return { ...state, ...settingsOf(settings), updated_at }
    }
    case 'alert_deleted':
      return { ...state, deleted: true, updated_at: event.data.deleted_at }
    case 'alert_triggered':
      return {
        ...state,
        status: 'firing',
        last_value: event.data.value,
        last_evaluated_at: event.data.triggered_at,
        last_triggered_at: event.data.triggered_at,
      }
    case 'alert_resolved':
      return {
        ...state,
        status: 'ok',
        last_value: event.data.value,
        last_evaluated_at: event.data.resolved_at,
        last_resolved_at: event.data.resolved_at,
      }
  }
}

export const alertDecider: Decider<AlertCommand, AlertEvent, AlertAggregate> = { initialState: null, decide, evolve }
