import type { Checkpoint } from '../../../domain/audit-checkpoint.ts'
import { auditLeafOf, isAuditLeafMessage, type AuditLeaf } from '../../../domain/audit-log.ts'
import { auditLog, type ExportProofRange } from '../../../projections/audit-log.ts'
import { jobHandler } from '../../../streams/aggregates.ts'
import type { EventRecord } from '../../../streams/event-store.ts'
import { projectSubjectsFilter } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { AuditCheckpoints } from './checkpoints.ts'

/** An exported row's event in the project's Merkle log: where it is, and what its leaf says. */
export interface AttestedLeaf {
  leaf_index: number
  leaf: AuditLeaf
}

/** The last line of an attested export (docs/audit.md, "Attested exports"). */
export interface ExportManifest {
  version: 1
  project_id: string
  kind: 'audit_log' | 'jobs'
  from: string
  until: string
  checkpoint: Checkpoint
  /** The lines before the manifest. */
  lines: number
  leaves: number[]
  proof: ExportProofRange[]
  signed_at: string
  key_id: string
  /** Ed25519 over the manifest's canonical JSON without it: a deleted line cannot pass (docs/audit.md). */
  signature: string
}

/** Messages read from the log at once while a batch of rows is attested. */
const readConcurrency = 32

async function eachConcurrently<T, R>(items: readonly T[], run: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length)
  let next = 0
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await run(items[i]!)
  }
  await Promise.all(Array.from({ length: Math.min(readConcurrency, items.length) }, worker))
  return out
}

/**
 * Attests an export as it streams (`?attest=true`): each batch of rows gets the leaves of the
 * events behind them, read from the log and placed by the Merkle log's positions, and the last line
 * is a manifest with a checkpoint covering every one of them and the multi-leaf proof that ties
 * them to its root. The leaves come from the log, not from the rows, so a verifier checks what the
 * log says; the rows were projected from it in the same transactions as the leaves, so every
 * leaf is in the tree by the time its row is read.
 */
export class ExportAttestation {
  readonly #deps: Deps
  readonly #checkpoints: AuditCheckpoints
  readonly #projectId: string
  readonly #leaves = new Set<number>()
  #lines = 0

  constructor(deps: Deps, checkpoints: AuditCheckpoints, projectId: string) {
    this.#deps = deps
    this.#checkpoints = checkpoints
    this.#projectId = projectId
  }

  /**
   * The leaf of the event behind each activity row (its id is the event's ULID, projections/activity.ts;
   * `seq` the sequence of its message), or null where the tree has none.
   */
  async ofEvents(events: readonly { activityId: string; seq: number }[]): Promise<(AttestedLeaf | null)[]> {
    this.#lines += events.length
    const seqs = [...new Set(events.map((e) => e.seq))]
    const records = await this.#messagesAt(seqs)
    const first = await auditLog.leafIndexes(
      this.#deps.sql,
      this.#projectId,
      [...records.values()].map((r) => ({ aggregateId: r.message.aggregate_id, seq: r.seq })),
    )
    return events.map((e) =>
      this.#leafOf(records.get(e.seq) ?? null, first.get(e.seq), (events) => events.findIndex((x) => x.id.replace(/^evt_/, '') === e.activityId)),
    )
  }

  /** Each job's `job_created` and the event of its row's message (`last_seq`, the newest the row holds). */
  async ofJobs(jobs: readonly { id: string; lastSeq: number }[]): Promise<{ created: AttestedLeaf | null; latest: AttestedLeaf | null }[]> {
    this.#lines += jobs.length
    const store = this.#deps.store
    const created = await eachConcurrently(jobs, (job) => jobHandler.next(store, jobHandler.ref(this.#projectId, job.id), 1))
    const latest = await eachConcurrently(jobs, (job) => jobHandler.at(store, jobHandler.ref(this.#projectId, job.id), job.lastSeq))
    const messages = [...created, ...latest].flatMap((r) => (r === null ? [] : [{ aggregateId: r.message.aggregate_id, seq: r.seq }]))
    const first = await auditLog.leafIndexes(this.#deps.sql, this.#projectId, messages)
    return jobs.map((_, i) => ({
      created: this.#leafOf(created[i] ?? null, created[i] ? first.get(created[i]!.seq) : undefined, (events) =>
        events.findIndex((e) => e.type === 'job_created'),
      ),
      latest: this.#leafOf(latest[i] ?? null, latest[i] ? first.get(latest[i]!.seq) : undefined, (events) => events.length - 1),
    }))
  }

  /**
   * The manifest: the newest checkpoint when it covers every leaf handed out, else a new one
   * (signed now, over the tree as projected), the proof of those leaves against it, and the count
   * of lines, all signed.
   */
  async manifest(kind: ExportManifest['kind'], window: { from: Date; until: Date }): Promise<ExportManifest> {
    const leaves = [...this.#leaves].sort((a, b) => a - b)
    const needed = leaves.length === 0 ? 0 : leaves[leaves.length - 1]! + 1
    let checkpoint = await auditLog.latestCheckpoint(this.#deps.sql, this.#projectId)
    if (checkpoint === null || checkpoint.tree_size < needed) checkpoint = (await this.#checkpoints.issue(this.#projectId)).checkpoint
    return this.#checkpoints.signManifest({
      version: 1 as const,
      project_id: this.#projectId,
      kind,
      from: window.from.toISOString(),
      until: window.until.toISOString(),
      checkpoint,
      lines: this.#lines,
      leaves,
      proof: await auditLog.exportProof(this.#deps.sql, this.#projectId, leaves, checkpoint.tree_size),
    })
  }

  #leafOf(
    record: EventRecord | null,
    firstLeaf: number | undefined,
    pick: (events: EventRecord['message']['events']) => number,
  ): AttestedLeaf | null {
    if (record === null || firstLeaf === undefined || !isAuditLeafMessage(record.message)) return null
    const index = pick(record.message.events)
    if (index < 0) return null
    const leafIndex = firstLeaf + index
    this.#leaves.add(leafIndex)
    return { leaf_index: leafIndex, leaf: auditLeafOf(record.message, record.message.events[index]!) }
  }

  /** The project's messages stored at these sequences (one direct get each, some at once). */
  async #messagesAt(seqs: readonly number[]): Promise<Map<number, EventRecord>> {
    const subjects = projectSubjectsFilter(this.#deps.config.namespace, this.#projectId)
    const records = await eachConcurrently(seqs, (seq) => this.#deps.store.nextOn(subjects, seq))
    return new Map(records.flatMap((r, i) => (r !== null && r.seq === seqs[i] ? [[r.seq, r] as const] : [])))
  }
}
