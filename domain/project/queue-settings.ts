import { QueueSettingsLimitReached } from '../errors.ts'
import { requireProject, requireRole, type Acting, type Command, type Project, type ProjectAggregate, type QueueSettings } from './state.ts'

/**
 * Per-queue settings of a project (issue 28): for now the default `ttl_seconds` of the jobs
 * created in a queue without one (domain/job.ts, expiry). State on the project aggregate, so
 * every API process, which follows the project's events for its API keys already, creates with
 * the current default without a read, and so does the recurring scheduler, which loads the project.
 */

/** Queues a project may hold settings for at once (the project's state carries every one). */
export const maxQueueSettings = 100

export type QueueSettingsEvent =
  /** `default_ttl_seconds` null: the default removed. `updated_by`: the dashboard user; null for an API key. */
  {
    type: 'queue_settings_updated'
    data: { queue: string; default_ttl_seconds: number | null; updated_by: string | null; updated_at: string }
  }

/** `default_ttl_seconds` null removes the queue's default. */
export type QueueSettingsCommand = Command<'set_queue_settings', Acting & { queue: string; default_ttl_seconds: number | null }>

/** The queue's settings, if it has any. */
export function queueSettingsOf(project: Pick<Project, 'queue_settings'>, queue: string): QueueSettings | null {
  return project.queue_settings.find((s) => s.queue === queue) ?? null
}

/** The ttl a job created in `queue` without one gets; null: none. */
export function defaultTtlOf(project: Pick<Project, 'queue_settings'>, queue: string): number | null {
  return queueSettingsOf(project, queue)?.default_ttl_seconds ?? null
}

export function decideQueueSettings(command: QueueSettingsCommand, state: ProjectAggregate): QueueSettingsEvent[] {
  const { now } = command.meta
  const project = requireProject(state)
  const actor = command.data.actor_user_id
  requireRole(project, actor, 'admin', 'changing the settings of a queue')
  const { queue, default_ttl_seconds: ttl } = command.data
  const current = queueSettingsOf(project, queue)
  if ((current?.default_ttl_seconds ?? null) === ttl) return []
  if (current === null && project.queue_settings.length >= maxQueueSettings) {
    throw new QueueSettingsLimitReached(`a project holds settings for at most ${maxQueueSettings} queues; remove one first`)
  }
  return [{ type: 'queue_settings_updated', data: { queue, default_ttl_seconds: ttl, updated_by: actor, updated_at: now } }]
}

export function evolveQueueSettings(state: Project, event: QueueSettingsEvent): Project {
  const { queue, default_ttl_seconds: ttl, updated_by, updated_at } = event.data
  const others = state.queue_settings.filter((s) => s.queue !== queue)
  // A queue left with no setting leaves the state, so it stays bounded.
  const settings = ttl === null ? others : [...others, { queue, default_ttl_seconds: ttl, updated_by, updated_at }]
  return { ...state, queue_settings: settings, updated_at }
}
