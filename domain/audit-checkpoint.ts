import { canonicalJson } from './canonical-json.ts'
import type { CommandMeta, Decider } from './decider.ts'
import { InvalidState } from './errors.ts'

/**
 * A project's signed checkpoints (docs/audit.md, "Checkpoints"): the aggregate `audit`, one per
 * project, whose every event is a checkpoint of the project's Merkle log. Appending them at the
 * aggregate's expected sequence orders them: a checkpoint never names a smaller tree than the one
 * before it, whichever process or timer issued it. Each is also a leaf of the tree it follows, so
 * the next checkpoint covers it and checkpoints chain.
 */

/** What a checkpoint signs, and its signature. */
export interface Checkpoint {
  project_id: string
  tree_size: number
  /** MTH of the first `tree_size` leaves, lower-case hex. */
  root_hash: string
  /** RFC 3339 UTC with milliseconds. */
  issued_at: string
  key_id: string
  /** Ed25519 over `checkpointSignedBytes`, standard base64. */
  signature: string
}

/** The text a checkpoint's signature covers: a fixed prefix, then the canonical JSON of its five fields. */
export function checkpointSignedText(c: Omit<Checkpoint, 'signature'>): string {
  const { issued_at, key_id, project_id, root_hash, tree_size } = c
  return 'jobsvc-audit-checkpoint-v1\n' + canonicalJson({ issued_at, key_id, project_id, root_hash, tree_size })
}

/** The text an attested export's manifest signature covers: a fixed prefix, then the manifest's canonical JSON without its signature. */
export function exportManifestSignedText(manifest: Record<string, unknown>): string {
  const { signature: _signature, ...signed } = manifest
  return 'jobsvc-audit-export-v1\n' + canonicalJson(signed)
}

export interface AuditTrail {
  project_id: string
  latest: Checkpoint
  issued: number
}

export type AuditTrailAggregate = AuditTrail | null

export type AuditTrailEvent = { type: 'checkpoint_issued'; data: Checkpoint }
export type AuditTrailEventType = AuditTrailEvent['type']

export type AuditTrailCommand = { type: 'issue_checkpoint'; data: Checkpoint; meta: CommandMeta }

function decide(command: AuditTrailCommand, state: AuditTrailAggregate): AuditTrailEvent[] {
  const next = command.data
  if (state !== null) {
    const latest = state.latest
    if (next.tree_size < latest.tree_size) {
      throw new InvalidState(`a checkpoint of ${next.tree_size} leaves cannot follow one of ${latest.tree_size}: the log only grows`)
    }
    // Nothing new since the latest one (its own leaf not yet taken in): it stands.
    if (next.tree_size === latest.tree_size) {
      if (next.root_hash !== latest.root_hash) throw new InvalidState(`two roots for a tree of ${next.tree_size} leaves`)
      return []
    }
  }
  return [{ type: 'checkpoint_issued', data: next }]
}

function evolve(state: AuditTrailAggregate, event: AuditTrailEvent): AuditTrailAggregate {
  switch (event.type) {
    case 'checkpoint_issued':
      return { project_id: event.data.project_id, latest: event.data, issued: (state?.issued ?? 0) + 1 }
  }
}

/** Every event of the trail is a checkpoint: the first creates it, so none can come before its creation. */
export const auditTrailDecider: Decider<AuditTrailCommand, AuditTrailEvent, AuditTrailAggregate> = { initialState: null, decide, evolve }
