import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { deliveryDecider, upgradeDelivery, type Delivery, type StoredDelivery } from '../../domain/delivery.ts'
import { jobDecider, upgradeJob, type Job, type JobEvent, type StoredJob } from '../../domain/job.ts'
import { projectDecider, upgradeProject, type Project, type ProjectEvent, type StoredProject } from '../../domain/project/index.ts'
import { recurringJobDecider, upgradeRecurringJob, type RecurringJob, type StoredRecurringJob } from '../../domain/recurring-job.ts'
import { upgradeUser, userDecider, type StoredUser, type User } from '../../domain/user.ts'
import { fromStoredState } from '../../streams/stored-forms.ts'

// Saved states as messages stored them when each field was still missing, oldest first: the state is
// a persisted contract, and each of these must read as the state its history means today.

const created = '2025-01-01T00:00:00.000Z'
const key = { prefix: 'jsk_live_0123456789abcde', key_hash: 'a'.repeat(64), status: 'active' as const, issued_at: created, expires_at: null }

/** The project as the first release stored it (4e47646): no team, no billing. */
const projectV1 = { id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: 'ops@acme.test', created_at: created, updated_at: created, keys: [key] }

const member = { user_id: 'usr_1', email: 'ops@acme.test', role: 'owner' as const, joined_at: created }

/** With its team and key revocation (a061823). */
const projectV2 = { ...projectV1, status: 'active', keys_revoked_at: null, members: [member], invites: [] }

/** With billing (caf4bba), a period rolled into. */
const projectV3 = {
  ...projectV2,
  billing_state: 'past_due',
  overage_enabled: true,
  spend_cap_cents: 5000,
  allowance_warnings: ['2025-01-01:80'],
  billing_period: '2025-01-01',
}

/** With the provider's events remembered (10060e8) and retry policies (65fef43). */
const policy = { base_delay_seconds: 5, factor: 2, max_delay_seconds: 60, jitter_seconds: 0, max_attempts: 4 }
const projectV4 = {
  ...projectV3,
  provider_events: [{ id: 'evt_p1', at: created }],
  retry_policies: { project: policy, queues: [] },
}

/** What a state written before each addition meant, by the release that added it. */
const noTeam = { status: 'active', keys_revoked_at: null, members: [], invites: [] }
const billingNeverSet = { billing_state: 'active', overage_enabled: false, spend_cap_cents: null, allowance_warnings: [], billing_period: null }
const noneYet = {
  provider_events: [],
  retry_policies: { project: null, queues: [] },
  rate_limit_override: null,
  promotions: [],
  history_expired_through: 0,
  queue_pauses: [],
  queue_settings: [],
  queue_limits: [],
}
const defaultsOfOldProjects = { ...noTeam, ...billingNeverSet, ...noneYet }

t.test('a project stored before each of its fields existed reads with the value that state meant', async (t) => {
  const upgrade = (saved: object) => upgradeProject(saved as StoredProject)
  t.strictSame(upgrade(projectV1), { ...projectV1, ...defaultsOfOldProjects }, 'the first release: no team, billing as the defaults')
  t.strictSame(upgrade(projectV2), { ...defaultsOfOldProjects, ...projectV2 }, 'with a team: its own members kept')
  t.strictSame(upgrade(projectV3), { ...defaultsOfOldProjects, ...projectV3 }, 'with billing: its own settings kept')
  t.strictSame(upgrade(projectV4), { ...defaultsOfOldProjects, ...projectV4 }, 'with provider events and retry policies')
})

t.test("a project's state as decided today upgrades to itself", async (t) => {
  const events: ProjectEvent[] = [
    {
      type: 'project_created',
      data: { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: 'ops@acme.test', owner_user_id: 'usr_1', created_at: created },
    },
    { type: 'api_key_issued', data: { prefix: key.prefix, key_hash: key.key_hash, issued_at: created } },
    {
      type: 'rate_limit_overridden',
      data: {
        requests_per_hour: 9000,
        expires_at: '2025-02-01T00:00:00.000Z',
        reason: 'launch',
        set_by: 'usr_staff',
        set_at: created,
        previous_requests_per_hour: 1000,
      },
    },
    {
      type: 'promo_code_applied',
      data: {
        code: 'SPRING',
        kind: 'allowance_bonus',
        amount: 100,
        first_period: '2025-01-01',
        periods: 2,
        applied_by: 'usr_1',
        applied_at: created,
      },
    },
  ]
  const today = fold(projectDecider, null, events) as Project
  t.strictSame(upgradeProject(today), today)
  t.strictSame(
    upgradeProject(upgradeProject(projectV1 as StoredProject)),
    upgradeProject(projectV1 as StoredProject),
    'an upgraded state stays as it is',
  )
})

const jobCreated: JobEvent = {
  type: 'job_created',
  data: {
    job_id: 'job_1',
    project_id: 'prj_1',
    job_type: 'email.send',
    queue: 'default',
    payload: { to: 'a@b.c' },
    state: 'pending',
    run_at: null,
    max_attempts: 3,
    timeout_seconds: 60,
    tags: null,
    parent_job_id: null,
    waiting_for_parent: false,
    idempotency_key: null,
    traceparent: null,
    created_at: created,
  },
}

t.test('a job stored before trace context was kept reads with none, as a job created without the header', async (t) => {
  const today = fold(jobDecider, null, [jobCreated]) as Job
  const { traceparent: _none, ...withoutTrace } = today
  t.strictSame(upgradeJob(withoutTrace as StoredJob, 5, []), today, 'schema 2 without traceparent')
  const schema1 = { ...withoutTrace, payload: { to: 'a@b.c' }, error: null }
  t.strictSame(upgradeJob(schema1 as StoredJob, 5, []), { ...today, error_seq: null }, 'schema 1 without traceparent')
  const traced = { ...today, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }
  t.strictSame(upgradeJob(traced, 5, []), traced, 'a state as decided today upgrades to itself')
})

t.test('every message decoded carries the upgraded state (streams/stored-forms.ts)', async (t) => {
  t.strictSame(fromStoredState('project', projectV1, 3, []), upgradeProject(projectV1 as StoredProject))
  t.equal(fromStoredState('project', null, 3, []), null, 'no state: the aggregate was never created')
  const { traceparent: _none, ...withoutTrace } = fold(jobDecider, null, [jobCreated]) as Job
  t.equal((fromStoredState('job', withoutTrace, 3, []) as Job).traceparent, null)
})

/** The user as accounts first stored it (a061823): no ended sessions, notifications, bounces or devices. */
const userV1 = {
  id: 'usr_1',
  email: 'ada@example.test',
  password_hash: 'scrypt$x',
  password_changed_at: created,
  plan: 'starter',
  status: 'active',
  created_at: created,
  updated_at: created,
  terms_accepted_at: created,
  email_verified_at: created,
  display_name: 'Ada',
  timezone: 'Europe/London',
  locale: 'en-GB',
  is_admin: true,
  account: { id: 'acc_1', name: 'Analytical Engines' },
  verification: null,
  password_reset: null,
  totp: null,
  recovery_code_hashes: [],
  project_ids: ['prj_1'],
}

/** With logout ending sessions (92ce479). */
const userV2 = { ...userV1, ended_sessions: [{ session_id: 'ses_1', expires_at: '2025-01-08T00:00:00.000Z' }], sessions_ended_before: created }

const userAddedLater = { notifications: {}, email_undeliverable: null, email_reverified_at: null, known_devices: [] }

t.test('a user stored before each of its fields existed reads with the value that state meant', async (t) => {
  t.strictSame(
    upgradeUser(userV1 as StoredUser),
    { ...userV1, ended_sessions: [], sessions_ended_before: null, ...userAddedLater },
    'no session ended',
  )
  t.strictSame(upgradeUser(userV2 as StoredUser), { ...userV2, ...userAddedLater }, 'its ended sessions kept')
  t.strictSame(fromStoredState('user', userV1, 3, []), upgradeUser(userV1 as StoredUser), 'as every message decoded carries it')
})

t.test("a user's state as decided today upgrades to itself", async (t) => {
  const today = fold(userDecider, null, [
    {
      type: 'user_signed_up',
      data: { user_id: 'usr_1', email: 'ada@example.test', password_hash: 'scrypt$x', plan: 'starter', created_at: created },
    },
    { type: 'new_device_signed_in', data: { device_id: 'dev_1', first_device: true, signed_in_at: created } },
  ]) as User
  t.strictSame(upgradeUser(today), today)
})

/** A recurring schedule as the first release stored it (4e47646): no payload, status or occurrences. */
const scheduleV1 = {
  job_type: 'report.daily',
  cron_expression: '0 9 * * *',
  queue: 'default',
  timezone: 'UTC',
  max_attempts: 3,
  timeout_seconds: 60,
  id: 'rjob_report-daily',
  project_id: 'prj_1',
  created_at: created,
  updated_at: created,
}

t.test('a recurring schedule stored before its later fields reads with the value that state meant', async (t) => {
  const neverFired = { next_run_at: null, last_occurrence_at: null, last_run_at: null, last_job_id: null }
  t.strictSame(upgradeRecurringJob(scheduleV1 as StoredRecurringJob), { ...scheduleV1, payload: {}, status: 'active', ...neverFired })
  const fired = {
    ...scheduleV1,
    status: 'active',
    next_run_at: '2025-01-02T09:00:00.000Z',
    last_occurrence_at: created,
    last_run_at: created,
    last_job_id: 'job_1',
  }
  t.strictSame(upgradeRecurringJob(fired as StoredRecurringJob), { ...fired, payload: {} }, 'before payloads (8f0f1a7): its occurrences kept')
  t.strictSame(
    fromStoredState('recurring', scheduleV1, 3, []),
    upgradeRecurringJob(scheduleV1 as StoredRecurringJob),
    'as every message decoded carries it',
  )
})

t.test("a recurring schedule's state as decided today upgrades to itself", async (t) => {
  const { id, created_at: _c, updated_at: _u, ...schedule } = scheduleV1
  const today = fold(recurringJobDecider, null, [
    { type: 'recurring_upserted', data: { ...schedule, payload: { to: 'ops' }, recurring_id: id, upserted_at: created, next_run_at: null } },
  ]) as RecurringJob
  t.strictSame(upgradeRecurringJob(today), today)
})

/** A delivery as stored before redeliveries and replays (issue 25): no event sequence, operation or delivery repeated. */
const deliveryV1 = {
  id: 'del_0123456789abcdef0123456789',
  project_id: 'prj_1',
  webhook_id: 'whk_1',
  event_id: 'evt_1',
  event_type: 'job.created',
  status: 'failed' as const,
  response_status: 500,
  attempt: 5,
  attempted_at: created,
  created_at: created,
}

t.test('a delivery stored before redeliveries reads as a live delivery whose event is found by its id', async (t) => {
  const upgraded = { ...deliveryV1, event_seq: null, operation_id: null, redelivery_of: null }
  t.strictSame(upgradeDelivery(deliveryV1 as StoredDelivery), upgraded)
  t.strictSame(fromStoredState('delivery', deliveryV1, 3, []), upgraded, 'as every message decoded carries it')
  const { id, created_at, attempt: _a, attempted_at: _t, status: _s, response_status: _r, ...about } = deliveryV1
  const today = fold(deliveryDecider, null, [
    {
      type: 'delivery_scheduled',
      data: { ...about, delivery_id: id, scheduled_at: created_at, event_seq: 7, operation_id: null, redelivery_of: 'del_x' },
    },
  ]) as Delivery
  t.strictSame(upgradeDelivery(today), today, "today's state upgrades to itself")
})
