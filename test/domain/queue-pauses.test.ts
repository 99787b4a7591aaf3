import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { Forbidden, InvalidPauseUntil, ProjectNotFound, QueuePauseLimitReached } from '../../domain/errors.ts'
import {
  isQueuePaused,
  maxPausedQueues,
  pauseOf,
  projectDecider,
  upgradeProject,
  type ProjectCommand,
  type ProjectEvent,
  type StoredProject,
} from '../../domain/project/index.ts'
import { deciderSpec } from '../support/decider-spec.ts'

const now = '2025-03-01T12:00:00.000Z'
const later = '2025-03-01T13:00:00.000Z'
const project: ProjectEvent[] = [
  {
    type: 'project_created',
    data: { project_id: 'prj_1', name: 'Acme', plan: 'pro', owner_email: 'o@acme.test', owner_user_id: 'usr_owner', created_at: now },
  },
  ...(['admin', 'member', 'viewer'] as const).map((role): ProjectEvent => ({
    type: 'member_joined',
    data: { user_id: `usr_${role}`, email: `${role}@acme.test`, role, joined_at: now },
  })),
]

const pause = (actor: string | null, queue: string, reason: string | null = null, until: string | null = null, at = now): ProjectCommand => ({
  type: 'pause_queue',
  data: { actor_user_id: actor, queue, reason, until },
  meta: { now: at },
})
const resume = (actor: string | null, queue: string, at = now): ProjectCommand => ({
  type: 'resume_queue',
  data: { actor_user_id: actor, queue },
  meta: { now: at },
})
const paused = (
  queue: string,
  reason: string | null = null,
  until: string | null = null,
  by: string | null = 'usr_admin',
  at = now,
): ProjectEvent => ({
  type: 'queue_paused',
  data: { queue, reason, until, paused_by: by, paused_at: at },
})
const resumed = (queue: string, by: string | null = 'usr_admin', at = now, pausedAt = now): ProjectEvent => ({
  type: 'queue_resumed',
  data: { queue, paused_at: pausedAt, resumed_by: by, resumed_at: at },
})

t.test('pause_queue: an admin or above (or an API key) pauses; the state holds it until resumed', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const state = spec
    .given(project)
    .when(pause('usr_admin', 'emails', 'provider outage'))
    .then([paused('emails', 'provider outage')])
  t.ok(isQueuePaused(state!, 'emails', new Date(later)), 'paused with no end')
  t.notOk(isQueuePaused(state!, 'other', new Date(now)), 'other queues are not')
  spec
    .given(project)
    .when(pause(null, 'emails'))
    .then([paused('emails', null, null, null)], 'an API key acts as the owner')
  const back = spec
    .given([...project, paused('emails')])
    .when(resume('usr_owner', 'emails', later))
    .then([resumed('emails', 'usr_owner', later)])
  t.strictSame(back?.queue_pauses, [])
})

t.test('pause_queue: pausing again replaces the pause; the same pause again writes nothing', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  spec
    .given([...project, paused('emails', 'a')])
    .when(pause('usr_admin', 'emails', 'a'))
    .then([], 'the same reason and until')
  const replaced = spec
    .given([...project, paused('emails', 'a')])
    .when(pause('usr_admin', 'emails', 'b', later))
    .then([paused('emails', 'b', later)])
  t.equal(replaced?.queue_pauses.length, 1)
  spec.given(project).when(resume('usr_admin', 'emails')).then([], 'resuming a queue that is not paused')
})

t.test('pause_queue: until ends the pause by itself, and must be in the future', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const state = spec
    .given(project)
    .when(pause('usr_admin', 'emails', null, later))
    .then([paused('emails', null, later)])
  t.ok(isQueuePaused(state!, 'emails', new Date(Date.parse(later) - 1)), 'paused before until')
  t.equal(pauseOf(state!, 'emails', new Date(later)), null, 'not from until on')
  spec
    .given(project)
    .when(pause('usr_admin', 'emails', null, now))
    .thenThrows(InvalidPauseUntil, 'invalid_request')
  spec
    .given([...project, paused('emails', null, later)])
    .when(resume('usr_admin', 'emails', '2025-03-02T00:00:00.000Z'))
    .then([resumed('emails', 'usr_admin', '2025-03-02T00:00:00.000Z')], 'a resume after until removes the ended pause from the state')
})

t.test('pause_queue: members and viewers are refused, strangers told it does not exist', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  for (const actor of ['usr_member', 'usr_viewer']) {
    spec.given(project).when(pause(actor, 'emails')).thenThrows(Forbidden, 'forbidden', actor)
    spec
      .given([...project, paused('emails')])
      .when(resume(actor, 'emails'))
      .thenThrows(Forbidden, 'forbidden', actor)
  }
  spec.given(project).when(pause('usr_stranger', 'emails')).thenThrows(ProjectNotFound, 'project_not_found')
})

t.test('pause_queue: at most maxPausedQueues at once; ended pauses leave the state and do not count', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const full = [...project, ...Array.from({ length: maxPausedQueues }, (_, i) => paused(`q${i}`))]
  spec.given(full).when(pause('usr_admin', 'one-more')).thenThrows(QueuePauseLimitReached, 'queue_pause_limit_reached')
  spec
    .given(full)
    .when(pause('usr_admin', 'q0', 'changed'))
    .then([paused('q0', 'changed')], 'a paused queue may still be paused again')
  const ending = [...project, ...Array.from({ length: maxPausedQueues }, (_, i) => paused(`q${i}`, null, later))]
  const afterwards = '2025-03-01T14:00:00.000Z'
  const state = spec
    .given(ending)
    .when(pause('usr_admin', 'one-more', null, null, afterwards))
    .then([paused('one-more', null, null, 'usr_admin', afterwards)], 'the ended pauses do not count')
  t.strictSame(
    state?.queue_pauses.map((p) => p.queue),
    ['one-more'],
    'and leave the state with the next pause',
  )
})

t.test('a project stored before queue pauses reads as having none', async (t) => {
  const folded = fold(projectDecider, null, project)!
  const { queue_pauses: _, ...stored } = folded
  t.strictSame(upgradeProject(stored as StoredProject).queue_pauses, [])
})

t.test('end_queue_pauses: the scheduler records the end of each pause whose until has passed', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const soon = '2025-03-01T12:30:00.000Z'
  const history = [...project, paused('a', null, soon), paused('b', null, later), paused('c')]
  const end: ProjectCommand = { type: 'end_queue_pauses', data: {}, meta: { now: '2025-03-01T12:45:00.000Z' } }
  const state = spec
    .given(history)
    .when(end)
    .then([{ type: 'queue_resumed', data: { queue: 'a', paused_at: now, resumed_by: null, resumed_at: soon, automatic: true } }])
  t.same(
    state?.queue_pauses.map((p) => p.queue),
    ['b', 'c'],
    'the others hold',
  )
  spec
    .given([...project, paused('c')])
    .when(end)
    .then([], 'nothing has ended')
})
