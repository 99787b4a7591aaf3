import t from 'tap'
import { WebhookAlreadyExists, WebhookNotFound } from '../../domain/errors.ts'
import { matchesFilter, webhookDecider, type EventFilter, type WebhookCommand, type WebhookEvent } from '../../domain/webhook.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = '2025-03-01T12:00:00.000Z'
const t1 = '2025-03-01T12:05:00.000Z'
const t2 = '2025-03-01T12:10:00.000Z'
/** A day after t1 and t2: the previous secret's grace ends then. */
const t1NextDay = '2025-03-02T12:05:00.000Z'
const t2NextDay = '2025-03-02T12:10:00.000Z'

const subscription = {
  webhook_id: 'whk_1',
  project_id: 'prj_1',
  url: 'https://hooks.example.test/jobs',
  events: ['job.succeeded'] as EventFilter,
  secret_encrypted: 'enc:secret-1',
}

type UpdateData = Extract<WebhookCommand, { type: 'update_webhook' }>['data']

const create = (now = t0): WebhookCommand => ({ type: 'create_webhook', data: subscription, meta: { now } })
const update = (data: UpdateData, now = t1): WebhookCommand => ({ type: 'update_webhook', data, meta: { now } })
const rotate = (secret: string, now = t1): WebhookCommand => ({ type: 'rotate_webhook_secret', data: { secret_encrypted: secret }, meta: { now } })
const remove = (now = t1): WebhookCommand => ({ type: 'delete_webhook', data: {}, meta: { now } })

const created = (now = t0): WebhookEvent => ({ type: 'webhook_created', data: { ...subscription, created_at: now } })
const updated = (data: UpdateData, now = t1): WebhookEvent => ({ type: 'webhook_updated', data: { ...data, updated_at: now } })
const rotated = (secret: string, now = t1, graceUntil = t1NextDay): WebhookEvent => ({
  type: 'webhook_secret_rotated',
  data: { secret_encrypted: secret, previous_secret_expires_at: graceUntil, rotated_at: now },
})
const deleted = (now = t1): WebhookEvent => ({ type: 'webhook_deleted', data: { deleted_at: now } })

const spec = (t: Parameters<typeof deciderSpec>[0]) => deciderSpec(t, webhookDecider)

t.test('create: webhook_created, and the state is an active subscription with its sealed secret', async (t) => {
  const hook = spec(t).given([]).when(create()).then([created()])
  t.strictSame(hook, {
    id: 'whk_1',
    project_id: 'prj_1',
    url: subscription.url,
    events: ['job.succeeded'],
    is_active: true,
    secret_encrypted: 'enc:secret-1',
    previous_secret_encrypted: null,
    previous_secret_expires_at: null,
    created_at: t0,
    updated_at: null,
    deleted: false,
  })
})

t.test('create on an existing id is refused with WebhookAlreadyExists (409 invalid_state, like a taken project id)', async (t) => {
  spec(t).given([created()]).when(create(t1)).thenThrows(WebhookAlreadyExists, 'invalid_state')
  spec(t).given([created(), deleted()]).when(create(t2)).thenThrows(WebhookAlreadyExists, 'invalid_state', 'a deleted id is not reused either')
})

t.test('update: webhook_updated carries only the fields that change', async (t) => {
  const hook = spec(t)
    .given([created()])
    .when(update({ url: 'https://hooks.example.test/v2', events: '*', is_active: false }))
    .then([updated({ url: 'https://hooks.example.test/v2', events: '*', is_active: false })])
  t.match(hook, { url: 'https://hooks.example.test/v2', events: '*', is_active: false, updated_at: t1, secret_encrypted: 'enc:secret-1' })
  spec(t)
    .given([created()])
    .when(update({ url: subscription.url, events: ['job.succeeded', 'job.failed'], is_active: true }))
    .then([updated({ events: ['job.succeeded', 'job.failed'] })], 'an unchanged url and is_active are left out')
  spec(t)
    .given([created(), updated({ is_active: false })])
    .when(update({ is_active: true }, t2))
    .then([updated({ is_active: true }, t2)], 'reactivation')
})

t.test('update that changes nothing records nothing', async (t) => {
  spec(t).given([created()]).when(update({})).then([], 'no fields')
  spec(t)
    .given([created()])
    .when(update({ url: subscription.url, events: ['job.succeeded'], is_active: true }))
    .then([], 'the same values')
})

t.test('update of a subscription that does not exist, or was deleted, is WebhookNotFound', async (t) => {
  spec(t)
    .given([])
    .when(update({ is_active: false }))
    .thenThrows(WebhookNotFound, 'webhook_not_found')
  spec(t)
    .given([created(), deleted()])
    .when(update({ is_active: false }, t2))
    .thenThrows(WebhookNotFound, 'webhook_not_found', 'after delete')
  spec(t).given([created(), deleted()]).when(update({}, t2)).thenThrows(WebhookNotFound, 'webhook_not_found', 'even with no changes')
})

t.test('rotate: the new secret, and the previous one valid for 24 hours more', async (t) => {
  const hook = spec(t)
    .given([created()])
    .when(rotate('enc:secret-2'))
    .then([rotated('enc:secret-2')])
  t.match(hook, {
    secret_encrypted: 'enc:secret-2',
    previous_secret_encrypted: 'enc:secret-1',
    previous_secret_expires_at: t1NextDay,
    updated_at: t1,
  })
  const again = spec(t)
    .given([created(), rotated('enc:secret-2')])
    .when(rotate('enc:secret-3', t2))
    .then([rotated('enc:secret-3', t2, t2NextDay)], 'a second rotation')
  t.match(
    again,
    { secret_encrypted: 'enc:secret-3', previous_secret_encrypted: 'enc:secret-2', previous_secret_expires_at: t2NextDay },
    'keeps only the secret it replaced',
  )
})

t.test('rotate of a subscription that does not exist, or was deleted, is WebhookNotFound', async (t) => {
  spec(t).given([]).when(rotate('enc:secret-2')).thenThrows(WebhookNotFound, 'webhook_not_found')
  spec(t).given([created(), deleted()]).when(rotate('enc:secret-2', t2)).thenThrows(WebhookNotFound, 'webhook_not_found', 'after delete')
})

t.test('delete: webhook_deleted, and the subscription is inactive; a second delete is WebhookNotFound', async (t) => {
  const hook = spec(t).given([created()]).when(remove()).then([deleted()])
  t.match(hook, { deleted: true, is_active: false, updated_at: t1 })
  spec(t).given([created(), deleted()]).when(remove(t2)).thenThrows(WebhookNotFound, 'webhook_not_found', 'delete after delete')
  spec(t).given([]).when(remove()).thenThrows(WebhookNotFound, 'webhook_not_found', 'delete of nothing')
})

t.test('matchesFilter: * lets every type through, a list only its own', async (t) => {
  t.ok(matchesFilter('*', 'job.failed'))
  t.ok(matchesFilter('*', 'alert.triggered'))
  t.notOk(matchesFilter('*', 'job.activated'), 'an activation goes only to subscriptions that name it (issue 30)')
  t.ok(matchesFilter(['job.activated'], 'job.activated'))
  t.ok(matchesFilter(['job.succeeded', 'job.failed'], 'job.failed'))
  t.notOk(matchesFilter(['job.succeeded'], 'job.failed'))
  t.notOk(matchesFilter([], 'job.created'), 'an empty list matches nothing')
})

t.test('evolve on a missing state: webhook_created builds it, any other event throws', async (t) => {
  evolveOnMissingState(t, webhookDecider, created(), [updated({ is_active: false }), rotated('enc:secret-2'), deleted()])
})
