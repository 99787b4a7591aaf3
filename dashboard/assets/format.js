// Times are shown in the browser's own time zone and locale.
export const timeZone = Intl.DateTimeFormat().resolvedOptions().timeZone

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' })

export function formatTime(iso) {
  if (!iso) return '—'
  return dateTime.format(new Date(iso))
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined) return '—'
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min`
  return `${(ms / 3_600_000).toFixed(1)} h`
}

export const jobStates = ['pending', 'scheduled', 'processing', 'succeeded', 'failed', 'cancelled', 'dead_letter']

/**
 * The webhook event types (domain/webhook.ts): a subscription's filter, a replay's types, a
 * deliveries filter. test/dashboard/webhook-replay.test.ts checks that this copy lists the same.
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
]

/** The types a `*` subscription does not receive: only a subscription that names them does (domain/webhook.ts). */
export const namedOnlyWebhookEventTypes = ['audit.checkpoint', 'queue.paused', 'queue.resumed', 'job.expired', 'job.activated']

const roleRank = { viewer: 0, member: 1, admin: 2, owner: 3 }

/** Whether `role` is at least `needed` (viewer < member < admin < owner). */
export const hasRoleAtLeast = (role, needed) => (roleRank[role] ?? -1) >= roleRank[needed]

const pad = (n) => String(n).padStart(2, '0')

/** A `datetime-local` input's value (the browser's time zone, to the second) for the instant `date`. */
export const toLocalInput = (date) =>
  `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`

/** A `datetime-local` value as RFC 3339 (UTC); '' stays '' (no bound). */
export const toInstant = (local) => (local === '' ? '' : new Date(local).toISOString())

/** A job history event's type as the timeline names it: without the `job_` prefix, a few in words. */
const eventLabels = { job_limit_waiting: 'waiting for its limits' }

export const eventLabel = (type) => eventLabels[type] ?? type.replace(/^job_/, '').replaceAll('_', ' ')

/** Why a job waits for its queue's limits (a `job_limit_waiting` event's `reason`). */
const limitWaitReasons = {
  concurrency: 'concurrency limit',
  rate: 'rate limit',
  held: 'held back after a worker said it was rate limited',
}

/** A job cancelled with `cancel_reason: "concurrency_limit"` (the queue's strategy `cancel_newest`). */
export const concurrencyCancelNote = "Cancelled by its queue's limits: its key was at its concurrency limit (strategy cancel_newest)"

/** A job cancelled with `cancel_reason: "parent_never_created"` (the orphan sweep of the scheduler, issue 30). */
export const neverCreatedParentNote = 'Cancelled: a parent of its graph batch was never created (the batch was cut short)'

/** How a graph job's parent ended, as a `job_parent_settled` says it. */
const parentOutcomes = { succeeded: 'succeeded', dead_letter: 'dead-lettered', cancelled: 'was cancelled' }

/** A `job_parent_settled`: how the parent ended and how many of the job's parents are still waited for. */
function parentSettledNote(d) {
  const dropped = d.dropped ? ' — dropped (ignore)' : ''
  const left = d.waiting === 0 ? 'all parents settled' : `waiting for ${d.waiting} of ${d.of} ${d.of === 1 ? 'parent' : 'parents'}`
  return `Parent ${d.parent_job_id} ${parentOutcomes[d.outcome] ?? d.outcome}${dropped} — ${left}`
}

/**
 * What a job event means where its data says more than its type (issue 29's limits, issue 30's
 * parents); null for the rest. `job` tells a graph job's activation (it has `depends_on`) from a
 * continuation's.
 */
export function eventNote(event, job) {
  const d = event.data ?? {}
  if (event.type === 'job_parent_settled') return parentSettledNote(d)
  if (event.type === 'job_activated') {
    const due = d.state === 'scheduled' ? '; due at its run time' : ''
    return job?.depends_on !== undefined ? `Activated: every parent settled${due}` : `Activated: parent ${d.parent_job_id} succeeded${due}`
  }
  if (event.type === 'job_limit_waiting')
    return `Waiting for ${d.key === null ? 'its queue' : `key ${d.key}`}: ${limitWaitReasons[d.reason] ?? d.reason}, since ${formatTime(d.since)}`
  if (event.type === 'job_claimed' && d.limit_wait_ms != null) return `Waited ${formatDuration(d.limit_wait_ms)} for its limits`
  if (event.type === 'job_released' && d.reason === 'rate_limited') return `Rate limited by the worker; due again at ${formatTime(d.run_at)}`
  if (event.type === 'job_released' && d.reason === 'limit_refused')
    return 'Claim handed back before any worker saw it: its concurrency key filled up meanwhile'
  if (event.type === 'job_cancelled' && d.reason === 'concurrency_limit') return concurrencyCancelNote
  if (event.type === 'job_cancelled' && d.reason === 'parent_never_created') return neverCreatedParentNote
  return null
}

/** A key dimension of queue limits (`concurrency_key`, `job_type`, `tag:<name>`) in words. */
export const keyDimensionLabel = (by) => (by.startsWith('tag:') ? `tag ${by.slice(4)}` : by.replace('_', ' '))
