import { RetryPolicyLimitReached } from '../errors.ts'
import { isSameRetryPolicy, maxQueueRetryPolicies, toRetryPolicy, type RetryPolicies, type RetryPolicy } from '../retry-policy.ts'
import { requireProject, requireRole, type Acting, type Command, type Project, type ProjectAggregate } from './state.ts'

/** The project's retry settings: its default and one per queue (domain/retry-policy.ts says how they apply). */

export type RetryPolicyEvent =
  /**
   * `queue` null: the project's default. `policy` null: the setting removed (the queue follows the
   * project's again, the project the spec's). `updated_by`: the dashboard user; null for an API key.
   */
  {
    type: 'retry_policy_updated'
    data: { queue: string | null; policy: RetryPolicy | null; previous: RetryPolicy | null; updated_by: string | null; updated_at: string }
  }

/** `queue` null sets the project's default; `policy` null removes the setting. */
export type RetryPolicyCommand = Command<'set_retry_policy', Acting & { queue: string | null; policy: RetryPolicy | null }>

export function decideRetryPolicy(command: RetryPolicyCommand, state: ProjectAggregate): RetryPolicyEvent[] {
  const { now } = command.meta
  const project = requireProject(state)
  const actor = command.data.actor_user_id
  requireRole(project, actor, 'admin', 'changing the retry policy')
  const { queue } = command.data
  const policy = command.data.policy === null ? null : toRetryPolicy(command.data.policy)
  const policies = project.retry_policies
  const previous = queue === null ? policies.project : (policies.queues.find((p) => p.queue === queue) ?? null)
  if (isSameRetryPolicy(previous, policy)) return []
  if (queue !== null && previous === null && policies.queues.length >= maxQueueRetryPolicies) {
    throw new RetryPolicyLimitReached(`a project has at most ${maxQueueRetryPolicies} queue retry policies; remove one first`)
  }
  return [
    {
      type: 'retry_policy_updated',
      data: { queue, policy, previous: previous === null ? null : toRetryPolicy(previous), updated_by: actor, updated_at: now },
    },
  ]
}

function withRetryPolicy(policies: RetryPolicies, queue: string | null, policy: RetryPolicy | null): RetryPolicies {
  if (queue === null) return { ...policies, project: policy }
  const others = policies.queues.filter((p) => p.queue !== queue)
  return { ...policies, queues: policy === null ? others : [...others, { ...policy, queue }] }
}

export function evolveRetryPolicy(state: Project, event: RetryPolicyEvent): Project {
  return {
    ...state,
    retry_policies: withRetryPolicy(state.retry_policies, event.data.queue, event.data.policy),
    updated_at: event.data.updated_at,
  }
}
