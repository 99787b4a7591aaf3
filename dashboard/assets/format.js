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
]

/** The types a `*` subscription does not receive: only a subscription that names them does (domain/webhook.ts). */
export const namedOnlyWebhookEventTypes = ['audit.checkpoint', 'queue.paused', 'queue.resumed', 'job.expired']

const roleRank = { viewer: 0, member: 1, admin: 2, owner: 3 }

/** Whether `role` is at least `needed` (viewer < member < admin < owner). */
export const hasRoleAtLeast = (role, needed) => (roleRank[role] ?? -1) >= roleRank[needed]

const pad = (n) => String(n).padStart(2, '0')

/** A `datetime-local` input's value (the browser's time zone, to the second) for the instant `date`. */
export const toLocalInput = (date) =>
  `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`

/** A `datetime-local` value as RFC 3339 (UTC); '' stays '' (no bound). */
export const toInstant = (local) => (local === '' ? '' : new Date(local).toISOString())
