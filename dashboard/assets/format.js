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

const roleRank = { viewer: 0, member: 1, admin: 2, owner: 3 }

/** Whether `role` is at least `needed` (viewer < member < admin < owner). */
export const hasRoleAtLeast = (role, needed) => (roleRank[role] ?? -1) >= roleRank[needed]
