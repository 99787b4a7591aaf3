import { createHash, createPrivateKey, createPublicKey, hkdfSync, sign, type KeyObject } from 'node:crypto'
import { checkpointSignedText, exportManifestSignedText, type Checkpoint } from '../../../domain/audit-checkpoint.ts'
import type { Config } from '../../infrastructure/config.ts'

/** DER of an Ed25519 PKCS #8 private key up to its 32-byte seed (RFC 8410). */
const pkcs8Ed25519Prefix = Buffer.from('302e020100300506032b657004220420', 'hex')

/**
 * The key that signs this install's audit checkpoints (docs/audit.md, "Keys"): the configured
 * seed, or one derived from JOBSVC_SECRET by HKDF, so every process of an install signs with the
 * same key without another secret to distribute, and rotating JOBSVC_AUDIT_SIGNING_KEY (or the
 * secret) is a rotation of the key.
 */
export class AuditSigner {
  readonly keyId: string
  /** The 32 raw bytes of the public key, standard base64. */
  readonly publicKey: string
  readonly #privateKey: KeyObject

  constructor(seed: Buffer) {
    this.#privateKey = createPrivateKey({ key: Buffer.concat([pkcs8Ed25519Prefix, seed]), format: 'der', type: 'pkcs8' })
    const raw = createPublicKey(this.#privateKey).export({ format: 'der', type: 'spki' }).subarray(-32)
    this.publicKey = raw.toString('base64')
    this.keyId = createHash('sha256').update(raw).digest('hex').slice(0, 16)
  }

  static fromConfig(config: Pick<Config, 'auditSigningKey' | 'secret'>): AuditSigner {
    if (config.auditSigningKey !== null) return new AuditSigner(Buffer.from(config.auditSigningKey, 'base64'))
    return new AuditSigner(Buffer.from(hkdfSync('sha256', config.secret, 'jobsvc', 'audit-signing-key-v1', 32)))
  }

  sign(unsigned: Omit<Checkpoint, 'signature' | 'key_id'>): Checkpoint {
    const body = { ...unsigned, key_id: this.keyId }
    return { ...body, signature: this.#signText(checkpointSignedText(body)) }
  }

  /** An export's manifest, signed with `signed_at` (docs/audit.md, "Attested exports"). */
  signManifest<M extends object>(manifest: M, signedAt: string): M & { signed_at: string; key_id: string; signature: string } {
    const body = { ...manifest, signed_at: signedAt, key_id: this.keyId }
    return { ...body, signature: this.#signText(exportManifestSignedText(body)) }
  }

  #signText(text: string): string {
    return sign(null, Buffer.from(text), this.#privateKey).toString('base64')
  }
}
