import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { Forbidden, ProjectNotFound, RetryPolicyLimitReached } from '../../domain/errors.ts'
import { projectDecider, type ProjectCommand, type ProjectEvent } from '../../domain/project/index.ts'
import {
  defaultRetryPolicy,
  maxQueueRetryPolicies,
  retryDelayMs,
  retryMaxDelayMs,
  retryPolicyFor,
  type RetryPolicies,
  type RetryPolicy,
} from '../../domain/retry-policy.ts'
import { deciderSpec } from '../support/decider-spec.ts'

t.test('retryDelayMs: 15 s doubling plus up to 3 s of jitter, capped at a day', async (t) => {
  t.equal(retryDelayMs(1, 0), 15_000)
  t.equal(retryDelayMs(2, 0), 30_000)
  t.equal(retryDelayMs(5, 0), 240_000)
  t.equal(retryDelayMs(1, 0.5), 16_500)
  t.equal(retryDelayMs(1, 0.999), 17_997)
  t.equal(retryDelayMs(13, 0), 15_000 * 2 ** 12, 'attempt 13 is still below a day')
  t.equal(retryDelayMs(14, 0), retryMaxDelayMs, 'attempt 14 reaches the cap')
  t.equal(retryDelayMs(14, 0.999), retryMaxDelayMs + 2_997, 'the jitter comes on top of the cap')
  t.equal(retryDelayMs(5000, 0), retryMaxDelayMs, 'huge attempts stay at the cap')
  t.equal(retryDelayMs(0, 0), 15_000, 'attempt 0 is treated as the first')
})

const constant = { base_delay_seconds: 10, factor: 1, max_delay_seconds: 10, jitter_seconds: 0, max_attempts: 7 }
const steep = { base_delay_seconds: 2, factor: 1.5, max_delay_seconds: 100, jitter_seconds: 60, max_attempts: 4 }

t.test('retryDelayMs under a policy: base × factor^(attempt−1), capped, plus the jitter', async (t) => {
  t.equal(retryDelayMs(1, 0.999, constant), 10_000, 'factor 1 and no jitter: a constant wait')
  t.equal(retryDelayMs(9, 0, constant), 10_000)
  t.equal(retryDelayMs(1, 0, steep), 2_000)
  t.equal(retryDelayMs(3, 0, steep), 4_500, 'a fractional factor')
  t.equal(retryDelayMs(20, 0, steep), 100_000, 'capped')
  t.equal(retryDelayMs(20, 0.5, steep), 130_000, 'the jitter on top of the cap')
  t.equal(retryDelayMs(100, 0, { ...steep, factor: 10 }), 100_000, '10^99 stays at the cap')
  t.equal(retryDelayMs(3, 0.25, defaultRetryPolicy), retryDelayMs(3, 0.25), "the default is the spec's")
})

t.test("retryPolicyFor: the queue's own, else the project's, else the spec's", async (t) => {
  const policies: RetryPolicies = { project: constant, queues: [{ ...steep, queue: 'slow' }] }
  t.strictSame(retryPolicyFor(undefined, 'any'), defaultRetryPolicy)
  t.strictSame(retryPolicyFor({ project: null, queues: [] }, 'any'), defaultRetryPolicy)
  t.strictSame(retryPolicyFor(policies, 'any'), constant)
  t.strictSame(retryPolicyFor(policies, 'slow'), { ...steep, queue: 'slow' })
  t.strictSame(retryPolicyFor({ project: null, queues: policies.queues }, 'other'), defaultRetryPolicy)
  t.strictSame(retryPolicyFor(policies, '__proto__'), constant, 'a queue named like a prototype key is just a name')
})

const now = '2025-03-01T12:00:00.000Z'
const project: ProjectEvent[] = [
  {
    type: 'project_created',
    data: { project_id: 'prj_1', name: 'Acme', plan: 'pro', owner_email: 'o@acme.test', owner_user_id: 'usr_owner', created_at: now },
  },
  { type: 'api_key_issued', data: { prefix: 'jsk_live_0123456789abcde', key_hash: 'a'.repeat(64), issued_at: now } },
  ...(['admin', 'member', 'viewer'] as const).map((role): ProjectEvent => ({
    type: 'member_joined',
    data: { user_id: `usr_${role}`, email: `${role}@acme.test`, role, joined_at: now },
  })),
]

const setPolicy = (actor: string | null, queue: string | null, policy: RetryPolicy | null): ProjectCommand => ({
  type: 'set_retry_policy',
  data: { actor_user_id: actor, queue, policy },
  meta: { now },
})

const updated = (queue: string | null, policy: RetryPolicy | null, previous: RetryPolicy | null, by: string | null = 'usr_admin'): ProjectEvent => ({
  type: 'retry_policy_updated',
  data: { queue, policy, previous, updated_by: by, updated_at: now },
})

t.test('set_retry_policy: the project default and a queue override, by an admin or above', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const withDefault = spec
    .given(project)
    .when(setPolicy('usr_admin', null, constant))
    .then([updated(null, constant, null)])
  t.strictSame(withDefault?.retry_policies, { project: constant, queues: [] })
  spec
    .given(project)
    .when(setPolicy(null, null, constant))
    .then([updated(null, constant, null, null)], 'an API key (no user) acts as the owner')
  const history = [...project, updated(null, constant, null), updated('slow', steep, null)]
  t.strictSame(fold(projectDecider, null, history)?.retry_policies, { project: constant, queues: [{ ...steep, queue: 'slow' }] })
  spec
    .given(history)
    .when(setPolicy('usr_owner', 'slow', constant))
    .then([updated('slow', constant, steep, 'usr_owner')], 'a queue override replaced, its previous value recorded')
  const removed = spec
    .given(history)
    .when(setPolicy('usr_admin', 'slow', null))
    .then([updated('slow', null, steep)], 'removed')
  t.strictSame(removed?.retry_policies, { project: constant, queues: [] })
  spec
    .given(history)
    .when(setPolicy('usr_admin', null, null))
    .then([updated(null, null, constant)], 'the project default removed')
})

t.test('set_retry_policy: nothing when nothing changes', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  spec
    .given([...project, updated(null, constant, null)])
    .when(setPolicy('usr_admin', null, { ...constant }))
    .then([], 'the same policy')
  spec
    .given(project)
    .when(setPolicy('usr_admin', 'slow', null))
    .then([], 'removing an override that is not there')
  spec
    .given(project)
    .when(setPolicy('usr_admin', null, null))
    .then([], 'removing a default that is not there')
})

t.test('set_retry_policy: members and viewers are refused, strangers told it does not exist', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  for (const actor of ['usr_member', 'usr_viewer'])
    spec
      .given(project)
      .when(setPolicy(actor, null, constant))
      .thenThrows(Forbidden, 'forbidden', actor)
  spec
    .given(project)
    .when(setPolicy('usr_stranger', 'slow', constant))
    .thenThrows(ProjectNotFound, 'project_not_found')
})

t.test('set_retry_policy: at most maxQueueRetryPolicies queues; changing or removing one stays allowed', async (t) => {
  const spec = deciderSpec(t, projectDecider)
  const full = [...project, ...Array.from({ length: maxQueueRetryPolicies }, (_, i) => updated(`q${i}`, steep, null))]
  spec
    .given(full)
    .when(setPolicy('usr_admin', 'one-more', steep))
    .thenThrows(RetryPolicyLimitReached, 'retry_policy_limit_reached')
  spec
    .given(full)
    .when(setPolicy('usr_admin', 'q0', constant))
    .then([updated('q0', constant, steep)])
  spec
    .given(full)
    .when(setPolicy('usr_admin', 'q0', null))
    .then([updated('q0', null, steep)])
})
