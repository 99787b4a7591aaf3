import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { WebhookAlreadyExists, WebhookNotFound } from './errors.ts'

/**
 * A project's webhook subscription. The signing secret is held only sealed (AES-256-GCM at the
 * edge); after a rotation the previous secret stays valid for 24 hours.
 */

/**
 * The spec's job events, and (extensions) the alert notifications of alerts with `webhook: true`
 * the signed checkpoints of the project's audit log (docs/audit.md), queue pauses and resumes, and
 * jobs cancelled because they were not claimed within their ttl (`job.expired`).
 */
export const webhookEventTypes = [
  'job.created',
  'job.succeeded',
  'job.failed',
  'alert.triggered',
  'alert.resolved',
  'audit.checkpoint',
  'queue.paused',
  'queue.resumed',
  'job.expired',
  'job.activated',
] as const
export type WebhookEventType = (typeof webhookEventTypes)[number]
export type EventFilter = '*' | WebhookEventType[]

/**
 * Types a subscription receives only when it names them: `*` keeps meaning what it meant before
 * they existed, so a receiver written for the spec's events never meets one.
 */
const namedOnly: ReadonlySet<string> = new Set<WebhookEventType>([
  'audit.checkpoint',
  'queue.paused',
  'queue.resumed',
  'job.expired',
  'job.activated',
])

export const secretGraceMs = 24 * 60 * 60 * 1000

/**
 * Subscriptions a project may have, active or not (deleted ones do not count): a create past it
 * is refused with `webhook_limit_reached`. Counting inactive ones too means no update can pass
 * it, and it bounds what one project's events fan out to.
 */
export const maxWebhooksPerProject = 20

/**
 * Deliveries one event makes at most. New projects cannot reach it (one per subscription); an
 * install that had more subscriptions before the cap serves its oldest active ones.
 */
export const maxDeliveriesPerEvent = maxWebhooksPerProject

export interface Webhook {
  id: string
  project_id: string
  url: string
  events: EventFilter
  is_active: boolean
  secret_encrypted: string
  previous_secret_encrypted: string | null
  previous_secret_expires_at: string | null
  created_at: string
  updated_at: string | null
  deleted: boolean
}

export type WebhookAggregate = Webhook | null

export type WebhookEvent =
  | {
      type: 'webhook_created'
      data: { webhook_id: string; project_id: string; url: string; events: EventFilter; secret_encrypted: string; created_at: string }
    }
  | { type: 'webhook_updated'; data: { url?: string; events?: EventFilter; is_active?: boolean; updated_at: string } }
  | { type: 'webhook_secret_rotated'; data: { secret_encrypted: string; previous_secret_expires_at: string; rotated_at: string } }
  | { type: 'webhook_deleted'; data: { deleted_at: string } }

export type WebhookEventKind = WebhookEvent['type']

export type WebhookCommand =
  | {
      type: 'create_webhook'
      data: { webhook_id: string; project_id: string; url: string; events: EventFilter; secret_encrypted: string }
      meta: CommandMeta
    }
  | { type: 'update_webhook'; data: { url?: string; events?: EventFilter; is_active?: boolean }; meta: CommandMeta }
  | { type: 'rotate_webhook_secret'; data: { secret_encrypted: string }; meta: CommandMeta }
  | { type: 'delete_webhook'; data: Record<string, never>; meta: CommandMeta }

/** Does the filter let `type` through? `*` matches every type. */
export function matchesFilter(filter: EventFilter, type: string): boolean {
  return filter === '*' ? !namedOnly.has(type) : (filter as readonly string[]).includes(type)
}

function requireWebhook(state: WebhookAggregate): Webhook {
  if (state === null || state.deleted) throw new WebhookNotFound('the webhook subscription was not found')
  return state
}

const sameFilter = (a: EventFilter, b: EventFilter) => JSON.stringify(a) === JSON.stringify(b)

function decide(command: WebhookCommand, state: WebhookAggregate): WebhookEvent[] {
  const now = command.meta.now
  switch (command.type) {
    case 'create_webhook':
      if (state !== null) throw new WebhookAlreadyExists('a subscription with this id already exists')
      return [{ type: 'webhook_created', data: { ...command.data, created_at: now } }]
    case 'update_webhook': {
      const hook = requireWebhook(state)
      const d = command.data
      const changes: Extract<WebhookEvent, { type: 'webhook_updated' }>['data'] = { updated_at: now }
      if (d.url !== undefined && d.url !== hook.url) changes.url = d.url
      if (d.events !== undefined && !sameFilter(d.events, hook.events)) changes.events = d.events
      if (d.is_active !== undefined && d.is_active !== hook.is_active) changes.is_active = d.is_active
      return Object.keys(changes).length === 1 ? [] : [{ type: 'webhook_updated', data: changes }]
    }
    case 'rotate_webhook_secret':
      requireWebhook(state)
      return [
        {
          type: 'webhook_secret_rotated',
          data: {
            secret_encrypted: command.data.secret_encrypted,
            previous_secret_expires_at: new Date(Date.parse(now) + secretGraceMs).toISOString(),
            rotated_at: now,
          },
        },
      ]
    case 'delete_webhook':
      requireWebhook(state)
      return [{ type: 'webhook_deleted', data: { deleted_at: now } }]
  }
}

function evolve(state: WebhookAggregate, event: WebhookEvent): WebhookAggregate {
  if (event.type === 'webhook_created') {
    const d = event.data
    return {
      id: d.webhook_id,
      project_id: d.project_id,
      url: d.url,
      events: d.events,
      is_active: true,
      secret_encrypted: d.secret_encrypted,
      previous_secret_encrypted: null,
      previous_secret_expires_at: null,
      created_at: d.created_at,
      updated_at: null,
      deleted: false,
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'webhook_created')
  switch (event.type) {
    case 'webhook_updated': {
      const { updated_at, ...changes } = event.data
      return { ...state, ...changes, updated_at }
    }
    case 'webhook_secret_rotated':
      return {
        ...state,
        previous_secret_encrypted: state.secret_encrypted,
        previous_secret_expires_at: event.data.previous_secret_expires_at,
        secret_encrypted: event.data.secret_encrypted,
        updated_at: event.data.rotated_at,
      }
    case 'webhook_deleted':
      return { ...state, deleted: true, is_active: false, updated_at: event.data.deleted_at }
  }
}

export const webhookDecider: Decider<WebhookCommand, WebhookEvent, WebhookAggregate> = { initialState: null, decide, evolve }
