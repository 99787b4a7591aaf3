import type { Alert, AlertEvent } from './alert.ts'
import type { Checkpoint } from './audit-checkpoint.ts'
import type { Job, JobEvent } from './job.ts'
import type { ProjectEventType, QueuePause } from './project/index.ts'
import type { WebhookEventType } from './webhook.ts'

/**
 * What a delivered webhook says (spec, Outbound webhooks): which events of the log become
 * webhook events, their `data`, and the body's envelope. The body is signed as it is written
 * here, so its field order is part of the contract too.
 */

/** A webhook event before it has an id and a time: its type and its `data`. */
export interface WebhookEventContent {
  type: WebhookEventType
  data: Record<string, unknown>
}

/** The job events that become webhook events; the rest of a job's history is not sent. */
export const jobEventsSent = [
  'job_created',
  'job_succeeded',
  'job_dead_lettered',
  'job_cancelled',
  'job_activated',
] as const satisfies readonly JobEvent['type'][]

/** The alert events that become webhook events, for alerts that ask for them (`webhook: true`). */
export const alertEventsSent = ['alert_triggered', 'alert_resolved'] as const satisfies readonly AlertEvent['type'][]

/** The webhook event of a job event, given the job after it; null for events that send none. */
export function webhookEventOf(event: { type: string; data: unknown }, job: Job | null): WebhookEventContent | null {
  if (job === null) return null
  switch (event.type) {
    case 'job_created':
      return { type: 'job.created', data: { schema_version: 1, job_id: job.id, queue: job.queue } }
    case 'job_succeeded': {
      const d = event.data as Extract<JobEvent, { type: 'job_succeeded' }>['data']
      // `result` only when the worker's ack carried one: an ack without it sends the spec's body.
      const result = d.result === undefined ? {} : { result: d.result }
      return {
        type: 'job.succeeded',
        data: { ...finishedJobFields(job, 'succeeded'), duration_ms: d.duration_ms, completed_at: d.completed_at, ...result },
      }
    }
    case 'job_dead_lettered': {
      const d = event.data as Extract<JobEvent, { type: 'job_dead_lettered' }>['data']
      return {
        type: 'job.failed',
        data: {
          ...finishedJobFields(job, 'dead_letter'),
          attempt_number: d.attempt,
          max_attempts: job.max_attempts,
          error_type: d.error?.type ?? null,
          error_message: d.error?.message ?? null,
          duration_ms: d.duration_ms,
          completed_at: d.completed_at,
        },
      }
    }
    case 'job_cancelled': {
      // Only an expiry sends one (issue 28); a cancel asked for sends none, as the spec has it.
      const d = event.data as Extract<JobEvent, { type: 'job_cancelled' }>['data']
      if (d.reason !== 'expired') return null
      return {
        type: 'job.expired',
        data: {
          ...finishedJobFields(job, 'cancelled'),
          reason: 'expired',
          previous_state: d.previous_state,
          ttl_seconds: job.ttl_seconds ?? null,
          expires_at: job.expires_at ?? null,
          cancelled_at: d.cancelled_at,
        },
      }
    }
    case 'job_activated': {
      // Issue 30: a continuation's parent, or the last of a graph job's parents, let it run.
      const d = event.data as Extract<JobEvent, { type: 'job_activated' }>['data']
      return {
        type: 'job.activated',
        data: {
          schema_version: 1,
          job_id: job.id,
          project_id: job.project_id,
          job_type: job.job_type,
          queue: job.queue,
          state: d.state,
          parent_job_id: d.parent_job_id,
          depends_on: job.depends_on ?? null,
          activated_at: d.activated_at,
        },
      }
    }
    default:
      return null
  }
}

/** The fields a finished job's webhook event opens with, in the order the signed body has them. */
function finishedJobFields(job: Job, state: 'succeeded' | 'dead_letter' | 'cancelled') {
  return { schema_version: 1, job_id: job.id, project_id: job.project_id, job_type: job.job_type, queue: job.queue, state }
}

/** The webhook event of a checkpoint of the project's audit log: the signed checkpoint as it is (docs/audit.md). */
export function auditWebhookEventOf(event: { type: string; data: unknown }): WebhookEventContent | null {
  if (event.type !== 'checkpoint_issued') return null
  const c = event.data as Checkpoint
  return {
    type: 'audit.checkpoint',
    data: {
      schema_version: 1,
      project_id: c.project_id,
      tree_size: c.tree_size,
      root_hash: c.root_hash,
      issued_at: c.issued_at,
      key_id: c.key_id,
      signature: c.signature,
    },
  }
}

/** The project events that become webhook events (`queue.paused`, `queue.resumed`); the project's others send none. */
export const projectEventsSent = ['queue_paused', 'queue_resumed'] as const satisfies readonly ProjectEventType[]

/** The webhook event of a queue's pause or resume. */
export function queueWebhookEventOf(event: { type: string; data: unknown }, project: { id: string } | null): WebhookEventContent | null {
  if (project === null) return null
  if (event.type === 'queue_paused') {
    const d = event.data as QueuePause
    return {
      type: 'queue.paused',
      data: {
        schema_version: 1,
        project_id: project.id,
        queue: d.queue,
        reason: d.reason,
        until: d.until,
        paused_by: d.paused_by,
        paused_at: d.paused_at,
      },
    }
  }
  if (event.type === 'queue_resumed') {
    const d = event.data as { queue: string; paused_at: string; resumed_by: string | null; resumed_at: string; automatic?: true }
    return {
      type: 'queue.resumed',
      data: {
        schema_version: 1,
        project_id: project.id,
        queue: d.queue,
        paused_at: d.paused_at,
        resumed_by: d.resumed_by,
        resumed_at: d.resumed_at,
        automatic: d.automatic === true,
      },
    }
  }
  return null
}

/** The webhook event of any message's event, by its aggregate (null: its aggregate sends none, or this event is not one). */
export function webhookEventOfMessage(
  message: { aggregate: string; state: unknown },
  event: { type: string; data: unknown },
): WebhookEventContent | null {
  switch (message.aggregate) {
    case 'job':
      return webhookEventOf(event, message.state as Job | null)
    case 'alert':
      return alertWebhookEventOf(event, message.state as Alert | null)
    case 'audit':
      return auditWebhookEventOf(event)
    case 'project':
      return queueWebhookEventOf(event, message.state as { id: string } | null)
    default:
      return null
  }
}

/** The webhook event of an alert event, given the alert after it; null unless the alert asks for webhooks. */
export function alertWebhookEventOf(event: { type: string; data: unknown }, alert: Alert | null): WebhookEventContent | null {
  if (alert === null || !alert.webhook) return null
  if (event.type !== 'alert_triggered' && event.type !== 'alert_resolved') return null
  const d = event.data as { value: number; threshold: number; triggered_at?: string; resolved_at?: string }
  return {
    type: event.type === 'alert_triggered' ? 'alert.triggered' : 'alert.resolved',
    data: {
      schema_version: 1,
      alert_id: alert.id,
      project_id: alert.project_id,
      name: alert.name,
      kind: alert.kind,
      queue: alert.queue,
      threshold: d.threshold,
      value: d.value,
      status: event.type === 'alert_triggered' ? 'firing' : 'ok',
      at: d.triggered_at ?? d.resolved_at,
    },
  }
}

/** The request body: `event_id` and `created_at` are the log event's, the same on every attempt. */
export function webhookBody(event: { id: string; time: string }, content: WebhookEventContent): string {
  return JSON.stringify({ event_id: event.id, event_type: content.type, created_at: event.time, data: content.data })
}
