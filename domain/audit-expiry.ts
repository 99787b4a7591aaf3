import type { CommandMeta, Decider } from './decider.ts'

/**
 * The leaves of a project's Merkle log whose messages retention removes (docs/audit.md): recorded
 * on the log before the messages go, hash by hash, so that a tree rebuilt from the log (a replay,
 * a projector on an empty database) puts them back in their places and has the same roots as the
 * tree that held the messages. Bookkeeping of the service, not a leaf and not in the feed: the
 * removal itself is visible to tenants as the project's `history_expired`.
 */

/** A run of consecutive leaves: the first one's index, and their SHA-256 hashes, 32 bytes each, concatenated, in base64. */
export interface ExpiredLeafRun {
  from: number
  hashes: string
}

export interface AuditExpiry {
  project_id: string
  /** Leaves recorded so far. */
  leaves: number
}

export type AuditExpiryAggregate = AuditExpiry | null

export type AuditExpiryEvent = { type: 'leaves_expired'; data: { project_id: string; runs: ExpiredLeafRun[]; expired_at: string } }
export type AuditExpiryEventType = AuditExpiryEvent['type']

export type AuditExpiryCommand = { type: 'record_expired_leaves'; data: { project_id: string; runs: ExpiredLeafRun[] }; meta: CommandMeta }

/** Leaves one event holds at most: 8,192 hashes are 256 KiB, well inside a message. */
export const maxLeavesPerRecord = 8192

/** How many leaves a run holds (its base64 hashes' bytes over 32). */
export function leavesOfRun(run: ExpiredLeafRun): number {
  const padding = run.hashes.endsWith('==') ? 2 : run.hashes.endsWith('=') ? 1 : 0
  return ((run.hashes.length / 4) * 3 - padding) / 32
}

function decide(command: AuditExpiryCommand, _state: AuditExpiryAggregate): AuditExpiryEvent[] {
  if (command.data.runs.length === 0) return []
  return [{ type: 'leaves_expired', data: { project_id: command.data.project_id, runs: command.data.runs, expired_at: command.meta.now } }]
}

function evolve(state: AuditExpiryAggregate, event: AuditExpiryEvent): AuditExpiryAggregate {
  const recorded = event.data.runs.reduce((n, run) => n + leavesOfRun(run), 0)
  return { project_id: event.data.project_id, leaves: (state?.leaves ?? 0) + recorded }
}

/** Every event records more leaves: the first creates the record, so none can come before its creation. */
export const auditExpiryDecider: Decider<AuditExpiryCommand, AuditExpiryEvent, AuditExpiryAggregate> = {
  initialState: null,
  decide,
  evolve,
}
