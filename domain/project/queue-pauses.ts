import { InvalidPauseUntil, QueuePauseLimitReached } from '../errors.ts'
import { requireProject, requireRole, type Acting, type Command, type Project, type ProjectAggregate, type QueuePause } from './state.ts'

/**
 * Paused queues: state on the project aggregate, so every API process, which follows the
 * project's events for its API keys already, knows at once which queues its polls must leave
 * alone. A pause with `until` ends by itself at that instant: `isQueuePaused` reads the clock,
 * so no process needs an event to stop honouring it. The scheduler then records the end
 * (`end_queue_pauses`, a `queue_resumed` with `automatic: true` at `until`) for the activity
 * feed and the webhooks.
 */

/** Paused queues a project may hold at once (the project's state carries every one). */
export const maxPausedQueues = 100

export type QueuePauseEvent =
  /** `paused_by`: the dashboard user; null for an API key. A pause of a paused queue replaces it (reason, until, paused_at). */
  | { type: 'queue_paused'; data: QueuePause }
  /**
   * `paused_at`: the pause this ends. `resumed_by`: the dashboard user; null for an API key or the
   * scheduler. `automatic`: recorded by the scheduler for a pause whose `until` passed (`resumed_at`
   * is that `until`); absent for a resume.
   */
  | { type: 'queue_resumed'; data: { queue: string; paused_at: string; resumed_by: string | null; resumed_at: string; automatic?: true } }

export type QueuePauseCommand =
  | Command<'pause_queue', Acting & { queue: string; reason: string | null; until: string | null }>
  | Command<'resume_queue', Acting & { queue: string }>
  /** The scheduler's: records the end of every pause whose `until` has passed. */
  | Command<'end_queue_pauses', Record<string, never>>

/** The queue's pause at `now`, if one holds: one whose `until` has passed has ended. */
export function pauseOf(project: Pick<Project, 'queue_pauses'>, queue: string, now: Date): QueuePause | null {
  const pause = project.queue_pauses.find((p) => p.queue === queue)
  if (pause === undefined || (pause.until !== null && Date.parse(pause.until) <= now.getTime())) return null
  return pause
}

export function isQueuePaused(project: Pick<Project, 'queue_pauses'>, queue: string, now: Date): boolean {
  return pauseOf(project, queue, now) !== null
}

/** The pauses that still hold at `now`. */
export function pausesAt(project: Pick<Project, 'queue_pauses'>, now: Date): QueuePause[] {
  return project.queue_pauses.filter((p) => p.until === null || Date.parse(p.until) > now.getTime())
}

export function decideQueuePause(command: QueuePauseCommand, state: ProjectAggregate): QueuePauseEvent[] {
  const { now } = command.meta
  const project = requireProject(state)
  if (command.type === 'end_queue_pauses') {
    return project.queue_pauses
      .filter((p) => p.until !== null && Date.parse(p.until) <= Date.parse(now))
      .map((p) => ({
        type: 'queue_resumed',
        data: { queue: p.queue, paused_at: p.paused_at, resumed_by: null, resumed_at: p.until!, automatic: true },
      }))
  }
  const actor = command.data.actor_user_id
  const { queue } = command.data
  switch (command.type) {
    case 'pause_queue': {
      requireRole(project, actor, 'admin', 'pausing a queue')
      const { reason, until } = command.data
      if (until !== null && Date.parse(until) <= Date.parse(now)) throw new InvalidPauseUntil('until must be in the future')
      const holding = pausesAt(project, new Date(now))
      const current = holding.find((p) => p.queue === queue)
      if (current !== undefined && current.reason === reason && current.until === until) return []
      if (current === undefined && holding.length >= maxPausedQueues) {
        throw new QueuePauseLimitReached(`a project has at most ${maxPausedQueues} paused queues; resume one first`)
      }
      return [{ type: 'queue_paused', data: { queue, reason, until, paused_by: actor, paused_at: now } }]
    }
    case 'resume_queue': {
      requireRole(project, actor, 'admin', 'resuming a queue')
      const pause = project.queue_pauses.find((p) => p.queue === queue)
      if (pause === undefined) return []
      return [{ type: 'queue_resumed', data: { queue, paused_at: pause.paused_at, resumed_by: actor, resumed_at: now } }]
    }
  }
}

export function evolveQueuePause(state: Project, event: QueuePauseEvent): Project {
  const { queue } = event.data
  const others = state.queue_pauses.filter((p) => p.queue !== queue)
  if (event.type === 'queue_resumed') {
    // An automatic end is dated at its `until`, which may be before the project's last change.
    const updatedAt = event.data.resumed_at > state.updated_at ? event.data.resumed_at : state.updated_at
    return { ...state, queue_pauses: others, updated_at: updatedAt }
  }
  // Pauses that ended by their `until` leave the state with the next pause, so it stays bounded.
  const at = Date.parse(event.data.paused_at)
  const holding = others.filter((p) => p.until === null || Date.parse(p.until) > at)
  return { ...state, queue_pauses: [...holding, event.data], updated_at: event.data.paused_at }
}
