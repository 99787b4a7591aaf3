import t from 'tap'
import type { Alert } from '../../domain/alert.ts'
import type { Job } from '../../domain/job.ts'
import { alertWebhookEventOf, webhookBody, webhookEventOf } from '../../domain/webhook-payload.ts'

const at = '2025-03-01T12:00:00.000Z'
const done = '2025-03-01T12:00:02.500Z'

const job: Job = {
  id: 'job_1',
  project_id: 'prj_1',
  state: 'succeeded',
  job_type: 'email.send',
  queue: 'mail',
  tags: null,
  created_at: at,
  run_at: null,
  started_at: at,
  completed_at: done,
  updated_at: done,
  duration_ms: 2_500,
  progress: null,
  error_seq: null,
  attempt: 3,
  max_attempts: 3,
  timeout_seconds: 30,
  worker_id: null,
  idempotency_key: null,
  traceparent: null,
  parent_job_id: null,
  waiting_for_parent: false,
  children: [],
}

/** What every finished job's event opens with, for `job` above. */
const finishedJobFields = { schema_version: 1, job_id: 'job_1', project_id: 'prj_1', job_type: 'email.send', queue: 'mail' }

const alert: Alert = {
  id: 'alr_1',
  project_id: 'prj_1',
  name: 'deep queue',
  kind: 'queue_depth',
  queue: 'mail',
  threshold: 10,
  window_minutes: 60,
  email: [],
  webhook: true,
  enabled: true,
  status: 'firing',
  last_value: 12,
  deleted: false,
  last_evaluated_at: at,
  last_triggered_at: at,
  last_resolved_at: null,
  created_at: at,
  updated_at: at,
}

t.test('job.created carries the job and its queue only', async (t) => {
  t.strictSame(webhookEventOf({ type: 'job_created', data: {} }, job), {
    type: 'job.created',
    data: { schema_version: 1, job_id: 'job_1', queue: 'mail' },
  })
})

t.test('job.succeeded carries the spec’s fields, its times from the event', async (t) => {
  t.strictSame(webhookEventOf({ type: 'job_succeeded', data: { worker_id: 'w', attempt: 1, duration_ms: 2_500, completed_at: done } }, job), {
    type: 'job.succeeded',
    data: { ...finishedJobFields, state: 'succeeded', duration_ms: 2_500, completed_at: done },
  })
})

t.test('job.succeeded carries the result last, only when the ack had one', async (t) => {
  const event = { type: 'job_succeeded', data: { worker_id: 'w', attempt: 1, duration_ms: 2_500, completed_at: done, result: ['a', 1] } }
  const sent = webhookEventOf(event, job)!
  t.strictSame(sent.data, { ...finishedJobFields, state: 'succeeded', duration_ms: 2_500, completed_at: done, result: ['a', 1] })
  t.equal(Object.keys(sent.data).at(-1), 'result')
})

t.test('a dead-lettered job is job.failed, with its last error', async (t) => {
  const error = { type: 'Timeout', message: 'took too long', stack_trace: '' }
  const event = { type: 'job_dead_lettered', data: { worker_id: null, attempt: 3, error, duration_ms: 30_000, completed_at: done, reaped: true } }
  t.strictSame(webhookEventOf(event, { ...job, state: 'dead_letter' }), {
    type: 'job.failed',
    data: {
      ...finishedJobFields,
      state: 'dead_letter',
      attempt_number: 3,
      max_attempts: 3,
      error_type: 'Timeout',
      error_message: 'took too long',
      duration_ms: 30_000,
      completed_at: done,
    },
  })
})

t.test('other job events, and events of no job, send nothing', async (t) => {
  t.equal(webhookEventOf({ type: 'job_claimed', data: {} }, job), null)
  t.equal(webhookEventOf({ type: 'job_created', data: {} }, null), null)
})

t.test('alert notifications, only for alerts that ask for webhooks', async (t) => {
  t.strictSame(alertWebhookEventOf({ type: 'alert_triggered', data: { value: 12, threshold: 10, triggered_at: at } }, alert), {
    type: 'alert.triggered',
    data: {
      schema_version: 1,
      alert_id: 'alr_1',
      project_id: 'prj_1',
      name: 'deep queue',
      kind: 'queue_depth',
      queue: 'mail',
      threshold: 10,
      value: 12,
      status: 'firing',
      at,
    },
  })
  t.match(alertWebhookEventOf({ type: 'alert_resolved', data: { value: 3, threshold: 10, resolved_at: done } }, alert), {
    type: 'alert.resolved',
    data: { status: 'ok', value: 3, at: done },
  })
  t.equal(alertWebhookEventOf({ type: 'alert_triggered', data: { value: 12, threshold: 10, triggered_at: at } }, { ...alert, webhook: false }), null)
  t.equal(alertWebhookEventOf({ type: 'alert_updated', data: {} }, alert), null)
})

t.test('the body is the envelope in the spec’s order, the data as given', async (t) => {
  const body = webhookBody({ id: 'evt_1', time: at }, { type: 'job.created', data: { schema_version: 1, job_id: 'job_1', queue: 'mail' } })
  t.equal(body, `{"event_id":"evt_1","event_type":"job.created","created_at":"${at}","data":{"schema_version":1,"job_id":"job_1","queue":"mail"}}`)
})

t.test('an activation (issue 30) is job.activated, with the parent that let it run and the graph job’s parents', async (t) => {
  const child: Job = { ...job, state: 'pending', depends_on: ['job_a', 'job_b'], waiting_for: [], on_parent_failure: 'run' }
  const activated = { type: 'job_activated', data: { parent_job_id: 'job_b', state: 'pending', activated_at: done } }
  t.same(webhookEventOf(activated, child), {
    type: 'job.activated',
    data: { ...finishedJobFields, state: 'pending', parent_job_id: 'job_b', depends_on: ['job_a', 'job_b'], activated_at: done },
  })
  const continuation: Job = { ...job, state: 'scheduled', parent_job_id: 'job_p' }
  const later = { type: 'job_activated', data: { parent_job_id: 'job_p', state: 'scheduled', activated_at: done } }
  t.match(webhookEventOf(later, continuation)?.data, { parent_job_id: 'job_p', depends_on: null, state: 'scheduled' }, 'a continuation’s too')
})
