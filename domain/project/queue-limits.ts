import { QueueLimitsLimitReached } from '../errors.ts'
import {
  requireProject,
  requireRole,
  type Acting,
  type Command,
  type FlowLimits,
  type Project,
  type ProjectAggregate,
  type QueueLimits,
} from './state.ts'

export {
  concurrencyStrategies,
  type ConcurrencyLimits,
  type ConcurrencyStrategy,
  type FlowLimits,
  type KeyDimension,
  type QueueLimits,
  type RateLimits,
} from './state.ts'

/**
 * A queue's flow limits (issue 29): how many of its jobs run at once, in all and per key, and how
 * fast they start. State on the project aggregate, like the queue's pauses and settings, so every
 * API process, which follows the project's events for its API keys already, claims under the
 * current limits without a read. What holds a limit across processes is the gate aggregate
 * (domain/flow-gate.ts); this is only what the limits are.
 */

/** Queues a project may hold limits for at once (the project's state carries every one). */
export const maxQueueLimits = 100

export const queueConcurrencyRange = { min: 1, max: 10_000 } as const
export const keyConcurrencyRange = { min: 1, max: 1_000 } as const
export const rateLimitRange = { min: 1, max: 100_000 } as const
export const ratePeriodSecondsRange = { min: 1, max: 86_400 } as const

export type QueueLimitsEvent = {
  type: 'queue_limits_updated'
  /** `limits` null: the queue's limits removed. */
  data: { queue: string; limits: FlowLimits | null; updated_by: string | null; updated_at: string }
}

export type QueueLimitsCommand = Command<'set_queue_limits', Acting & { queue: string; limits: FlowLimits | null }>

/** The queue's limits, if it has any. */
export function queueLimitsOf(project: Pick<Project, 'queue_limits'>, queue: string): QueueLimits | null {
  return project.queue_limits.find((l) => l.queue === queue) ?? null
}

function sameLimits(a: FlowLimits | null, b: FlowLimits | null): boolean {
  return JSON.stringify(a) === JSON.stringify(b)
}

export function decideQueueLimits(command: QueueLimitsCommand, state: ProjectAggregate): QueueLimitsEvent[] {
  const { now } = command.meta
  const project = requireProject(state)
  const actor = command.data.actor_user_id
  requireRole(project, actor, 'admin', 'changing the limits of a queue')
  const { queue, limits } = command.data
  const current = queueLimitsOf(project, queue)
  const currentLimits = current === null ? null : { concurrency: current.concurrency, rate: current.rate }
  if (sameLimits(currentLimits, limits)) return []
  if (current === null && project.queue_limits.length >= maxQueueLimits) {
    throw new QueueLimitsLimitReached(`a project holds limits for at most ${maxQueueLimits} queues; remove one first`)
  }
  return [{ type: 'queue_limits_updated', data: { queue, limits, updated_by: actor, updated_at: now } }]
}

export function evolveQueueLimits(state: Project, event: QueueLimitsEvent): Project {
  const { queue, limits, updated_by, updated_at } = event.data
  const others = state.queue_limits.filter((l) => l.queue !== queue)
  // A queue whose limits are removed leaves the state, so it stays bounded.
  const all = limits === null ? others : [...others, { queue, ...limits, updated_by, updated_at }]
  return { ...state, queue_limits: all, updated_at }
}
