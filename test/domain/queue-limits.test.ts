import t from 'tap'
import { Forbidden, QueueLimitsLimitReached } from '../../domain/errors.ts'
import { maxQueueLimits, projectDecider, queueLimitsOf, type FlowLimits, type ProjectCommand, type ProjectEvent } from '../../domain/project/index.ts'
import { deciderSpec } from '../support/decider-spec.ts'

// Issue 29, item 1: a queue's flow limits, state of the project aggregate.

const now = '2025-03-01T12:00:00.000Z'
const project: ProjectEvent[] = [
  {
    type: 'project_created',
    data: { project_id: 'prj_1', name: 'Acme', plan: 'pro', owner_email: 'o@acme.test', owner_user_id: 'usr_owner', created_at: now },
  },
  ...(['admin', 'member'] as const).map((role): ProjectEvent => ({
    type: 'member_joined',
    data: { user_id: `usr_${role}`, email: `${role}@acme.test`, role, joined_at: now },
  })),
]
const perKey: FlowLimits = { concurrency: { limit: null, per_key: { limit: 2, by: 'concurrency_key' }, strategy: 'queue' }, rate: null }
const set = (actor: string | null, queue: string, limits: FlowLimits | null): ProjectCommand => ({
  type: 'set_queue_limits',
  data: { actor_user_id: actor, queue, limits },
  meta: { now },
})
const updated = (queue: string, limits: FlowLimits | null, by: string | null = 'usr_admin'): ProjectEvent => ({
  type: 'queue_limits_updated',
  data: { queue, limits, updated_by: by, updated_at: now },
})

t.test('an admin (or an API key) sets limits; the state holds them; the same again writes nothing; null removes them', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const state = spec
    .given(project)
    .when(set('usr_admin', 'emails', perKey))
    .then([updated('emails', perKey)])
  t.same(queueLimitsOf(state!, 'emails'), { queue: 'emails', ...perKey, updated_by: 'usr_admin', updated_at: now })
  t.equal(queueLimitsOf(state!, 'other'), null, 'other queues have none')
  spec
    .given([...project, updated('emails', perKey)])
    .when(set(null, 'emails', perKey))
    .then([], 'unchanged')
  const removed = spec
    .given([...project, updated('emails', perKey)])
    .when(set('usr_admin', 'emails', null))
    .then([updated('emails', null)])
  t.same(removed!.queue_limits, [], 'the queue leaves the state')
  spec
    .given(project)
    .when(set('usr_admin', 'emails', null))
    .then([], 'removing what is not set writes nothing')
})

t.test('a member is refused; a project holds limits for at most maxQueueLimits queues', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  spec
    .given(project)
    .when(set('usr_member', 'emails', perKey))
    .thenThrows(Forbidden, 'forbidden')
  const full = Array.from({ length: maxQueueLimits }, (_, i) => updated(`q${i}`, perKey))
  spec
    .given([...project, ...full])
    .when(set('usr_admin', 'one-more', perKey))
    .thenThrows(QueueLimitsLimitReached, 'queue_limits_limit_reached')
  const rate: FlowLimits = { concurrency: null, rate: { limit: 5, period_seconds: 1, burst: 5, by: null } }
  spec
    .given([...project, ...full])
    .when(set('usr_admin', 'q0', rate))
    .then([updated('q0', rate)], 'changing a held one is fine')
})
