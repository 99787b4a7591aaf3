import t from 'tap'
import { Forbidden, QueueSettingsLimitReached } from '../../domain/errors.ts'
import { defaultTtlOf, maxQueueSettings, projectDecider, type ProjectCommand, type ProjectEvent } from '../../domain/project/index.ts'
import { deciderSpec } from '../support/decider-spec.ts'

// Issue 28, item 4: a queue's default ttl, state of the project aggregate.

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
const set = (actor: string | null, queue: string, ttl: number | null): ProjectCommand => ({
  type: 'set_queue_settings',
  data: { actor_user_id: actor, queue, default_ttl_seconds: ttl },
  meta: { now },
})
const updated = (queue: string, ttl: number | null, by: string | null = 'usr_admin'): ProjectEvent => ({
  type: 'queue_settings_updated',
  data: { queue, default_ttl_seconds: ttl, updated_by: by, updated_at: now },
})

t.test('an admin (or an API key) sets a queue default ttl; the state holds it; the same again writes nothing', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const state = spec
    .given(project)
    .when(set('usr_admin', 'emails', 300))
    .then([updated('emails', 300)])
  t.equal(defaultTtlOf(state!, 'emails'), 300)
  t.equal(defaultTtlOf(state!, 'other'), null, 'other queues have none')
  spec
    .given([...project, updated('emails', 300)])
    .when(set(null, 'emails', 300))
    .then([], 'unchanged')
  spec
    .given(project)
    .when(set(null, 'emails', 60))
    .then([updated('emails', 60, null)], 'an API key acts as the owner')
})

t.test('null removes the default, and the queue leaves the state', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const state = spec
    .given([...project, updated('emails', 300)])
    .when(set('usr_admin', 'emails', null))
    .then([updated('emails', null)])
  t.same(state!.queue_settings, [])
  spec
    .given(project)
    .when(set('usr_admin', 'emails', null))
    .then([], 'removing what is not set writes nothing')
})

t.test('a member is refused; a project holds settings for at most maxQueueSettings queues', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  spec
    .given(project)
    .when(set('usr_member', 'emails', 300))
    .thenThrows(Forbidden, 'forbidden')
  const full = Array.from({ length: maxQueueSettings }, (_, i) => updated(`q${i}`, 60))
  spec
    .given([...project, ...full])
    .when(set('usr_admin', 'one-more', 60))
    .thenThrows(QueueSettingsLimitReached, 'queue_settings_limit_reached')
  spec
    .given([...project, ...full])
    .when(set('usr_admin', 'q0', 120))
    .then([updated('q0', 120)], 'changing a held one is fine')
})
