import type { Checkpoint } from '../../../domain/audit-checkpoint.ts'
import { DomainError } from '../../../domain/errors.ts'
import type { AuditSigningKey } from '../../../domain/audit-signing-key.ts'
import { auditLog } from '../../../projections/audit-log.ts'
import { auditSigningKeyHandler, auditTrailHandler } from '../../../streams/aggregates.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { AuditSigner } from './audit-signer.ts'

/**
 * Issuing the signed checkpoints of the projects' Merkle logs (docs/audit.md): on demand
 * (`POST /jobsvc/v1/audit/checkpoints`) and every hour for the projects whose tree grew (the
 * scheduler). A checkpoint signs the tree as the projector has built it: its leaves up to the
 * size read, whose hashes never change once written, so reading the size and then the root needs
 * no snapshot. It is appended to the project's `audit` aggregate, whose expected sequence orders
 * the checkpoints of every process.
 */
export class AuditCheckpoints {
  readonly #deps: Deps
  readonly #signer: AuditSigner
  #activated: Promise<AuditSigningKey> | null = null
  /** Where the hourly pass's next page starts (project order). */
  #afterProject = ''

  constructor(deps: Deps) {
    this.#deps = deps
    this.#signer = AuditSigner.fromConfig(deps.config)
  }

  get keyId(): string {
    return this.#signer.keyId
  }

  /**
   * Publishes this process's key on the log once (every process of an install activates the same
   * key; the append at sequence 0 lets one of them write it) and closes the window of any other
   * key still open: a rotation. A key a newer one retired is refused (SigningKeyRetired): a
   * process left on an old key must not sign.
   */
  async activate(): Promise<AuditSigningKey> {
    this.#activated ??= this.#activateOnce().catch((err: unknown) => {
      this.#activated = null
      throw err
    })
    return this.#activated
  }

  async #activateOnce(): Promise<AuditSigningKey> {
    const deps = this.#deps
    const now = deps.now().toISOString()
    const result = await auditSigningKeyHandler.decide(deps, auditSigningKeyHandler.ref(this.#signer.keyId), {
      type: 'activate_signing_key',
      data: { key_id: this.#signer.keyId, public_key: this.#signer.publicKey },
      meta: { now },
    })
    const from = result.state?.valid_from ?? now
    for (const key of await auditLog.keys(deps.sql)) {
      if (key.key_id === this.#signer.keyId || key.valid_until !== null) continue
      await auditSigningKeyHandler.decide(deps, auditSigningKeyHandler.ref(key.key_id), {
        type: 'retire_signing_key',
        data: { valid_until: from },
        meta: { now },
      })
    }
    return result.state!
  }

  /**
   * The newest checkpoint when the tree has grown by nothing but that checkpoint's own leaf: a new
   * one would sign nothing new (the hourly pass skips such a tree as well), so it stands.
   */
  async #unchangedSince(projectId: string, size: number): Promise<{ checkpoint: Checkpoint; seq: number } | null> {
    const trail = await auditTrailHandler.load(this.#deps.store, auditTrailHandler.ref(projectId))
    const latest = trail.state?.latest
    if (latest === undefined || size !== latest.tree_size + 1) return null
    const own = (await auditLog.leafIndexes(this.#deps.sql, projectId, [{ aggregateId: projectId, seq: trail.seq }])).get(trail.seq)
    return own === latest.tree_size ? { checkpoint: latest, seq: trail.seq } : null
  }

  /** Activates this process's key, and refuses it (SigningKeyRetired) if a process with a newer key retired it since. */
  async #currentKey(): Promise<void> {
    await this.activate()
    const key = await auditSigningKeyHandler.load(this.#deps.store, auditSigningKeyHandler.ref(this.#signer.keyId))
    if (key.state?.valid_until !== null) {
      this.#activated = null
      await this.activate()
    }
  }

  /**
   * Every key that ever signed, oldest first: the read model's, with this process's own key even
   * before the projector has taken its activation in (a checkpoint it signs is answered at once).
   */
  async publishedKeys(): Promise<AuditSigningKey[]> {
    const own = await this.activate()
    const keys = await auditLog.keys(this.#deps.sql)
    return keys.some((k) => k.key_id === own.key_id) ? keys : [...keys, own]
  }

  /**
   * Signs the project's tree as projected now and appends the checkpoint; when the tree has not
   * grown since the newest checkpoint (by nothing, or by nothing but that checkpoint's own leaf),
   * that one stands and is answered with `issued: false`.
   */
  async issue(projectId: string): Promise<{ checkpoint: Checkpoint; issued: boolean; seq: number }> {
    const deps = this.#deps
    await this.#currentKey()
    const size = (await auditLog.tree(deps.sql, projectId))?.size ?? 0
    const unchanged = await this.#unchangedSince(projectId, size)
    if (unchanged !== null) return { checkpoint: unchanged.checkpoint, issued: false, seq: unchanged.seq }
    const root = await auditLog.root(deps.sql, projectId, size)
    const now = deps.now().toISOString()
    const checkpoint = this.#signer.sign({ project_id: projectId, tree_size: size, root_hash: root, issued_at: now })
    const result = await auditTrailHandler.decide(deps, auditTrailHandler.ref(projectId), {
      type: 'issue_checkpoint',
      data: checkpoint,
      meta: { now },
    })
    return { checkpoint: result.appended ? checkpoint : result.state!.latest, issued: result.appended, seq: result.seq }
  }

  /** Signs an export's manifest with the current key (activated, and not retired by a newer one). */
  async signManifest<M extends object>(manifest: M): Promise<M & { signed_at: string; key_id: string; signature: string }> {
    await this.#currentKey()
    return this.#signer.signManifest(manifest, this.#deps.now().toISOString())
  }

  /**
   * The hourly pass, a page of projects at a time: a checkpoint for each project whose tree grew
   * since its newest one. Pages go on in project order from where the last one stopped, so every
   * project gets its turn however many are due. True when the page was full (more may be due).
   */
  async issueDue(limit: number): Promise<boolean> {
    const due = await auditLog.uncheckpointed(this.#deps.sql, this.#afterProject, limit)
    for (const projectId of due) {
      try {
        await this.issue(projectId)
      } catch (err) {
        // A tree behind its newest checkpoint (the read models being rebuilt) or a key retired by
        // a newer process: that project waits for the next pass; the others are signed.
        if (!(err instanceof DomainError)) throw err
        this.#deps.log.warn({ err, project_id: projectId }, 'audit checkpoint pass: a project was not signed')
      }
    }
    this.#afterProject = due.length === limit ? due[due.length - 1]! : ''
    return due.length === limit
  }
}
