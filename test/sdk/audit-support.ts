import { generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto'
import {
  checkpointMessage,
  EMPTY_TREE_HASH,
  keyIdOf,
  leafHash,
  manifestMessage,
  nodeHash,
  type AuditKey,
  type Checkpoint,
  type LeafObject,
  type ProofRange,
} from '@jobsvc/sdk'

// The service's side of docs/audit.md, small and in memory, for the verifier's tests: a tree built
// from RFC 9162's recursive definitions (§2.1.1, §2.1.3.1, §2.1.4.1), so that the SDK's iterative
// verifiers are checked against an independent statement of the same tree, and signing keys.

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex')

/** The largest power of two below `n` (n > 1). */
function split(n: number): number {
  let k = 1
  while (k * 2 < n) k *= 2
  return k
}

/** An RFC 6962 tree over leaf hashes; every size up to the leaves' count can be asked for. */
export class MerkleTree {
  private readonly memo = new Map<string, Buffer>()
  constructor(readonly leafHashes: Buffer[]) {}

  /** MTH(D[start:end]). */
  hash(start: number, end: number): Buffer {
    const key = `${start}:${end}`
    let hash = this.memo.get(key)
    if (hash === undefined) {
      if (end - start === 1) hash = this.leafHashes[start]!
      else {
        const k = split(end - start)
        hash = nodeHash(this.hash(start, start + k), this.hash(start + k, end))
      }
      this.memo.set(key, hash)
    }
    return hash
  }

  root(size: number): string {
    return size === 0 ? EMPTY_TREE_HASH : hex(this.hash(0, size))
  }

  /** PATH(m, D[0:size]). */
  inclusionPath(m: number, size: number): string[] {
    const path = (m: number, start: number, end: number): string[] => {
      if (end - start === 1) return []
      const k = split(end - start)
      return m < k
        ? [...path(m, start, start + k), hex(this.hash(start + k, end))]
        : [...path(m - k, start + k, end), hex(this.hash(start, start + k))]
    }
    return path(m, 0, size)
  }

  /** PROOF(first, D[0:second]). */
  consistencyPath(first: number, second: number): string[] {
    const subproof = (m: number, start: number, end: number, whole: boolean): string[] => {
      if (m === end - start) return whole ? [] : [hex(this.hash(start, end))]
      const k = split(end - start)
      return m <= k
        ? [...subproof(m, start, start + k, whole), hex(this.hash(start + k, end))]
        : [...subproof(m - k, start + k, end, false), hex(this.hash(start, start + k))]
    }
    return subproof(first, 0, second, true)
  }

  /** The multi-leaf proof of docs/audit.md: the ranges the recursion visits that hold none of `exported`. */
  rangeProof(size: number, exported: Iterable<number>): ProofRange[] {
    const set = new Set(exported)
    const proof: ProofRange[] = []
    const visit = (start: number, end: number) => {
      let holds = false
      for (const i of set) if (i >= start && i < end) holds = true
      if (!holds) proof.push({ start, end, hash: hex(this.hash(start, end)) })
      else if (end - start > 1) {
        const k = split(end - start)
        visit(start, start + k)
        visit(start + k, end)
      }
    }
    if (size > 0) visit(0, size)
    return proof
  }
}

/** A tree of `n` random leaf hashes. */
export const randomTree = (n: number) => new MerkleTree(Array.from({ length: n }, () => randomBytes(32)))

export interface SigningKey {
  privateKey: KeyObject
  entry: AuditKey
}

/** A fresh Ed25519 key and its entry of the keys document, valid from `validFrom` until `validUntil`. */
export function signingKey(validFrom = '2026-01-01T00:00:00.000Z', validUntil: string | null = null): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519')
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url')
  return {
    privateKey,
    entry: { key_id: keyIdOf(raw), algorithm: 'Ed25519', public_key: raw.toString('base64'), valid_from: validFrom, valid_until: validUntil },
  }
}

/** A checkpoint of `project_id`'s tree, signed by `key` (or claiming `key_id` while another signs). */
export function signCheckpoint(
  key: SigningKey,
  head: { project_id?: string; tree_size: number; root_hash: string; issued_at?: string; key_id?: string },
): Checkpoint {
  const unsigned = {
    project_id: head.project_id ?? 'prj_audit',
    tree_size: head.tree_size,
    root_hash: head.root_hash,
    issued_at: head.issued_at ?? '2026-06-01T12:00:00.000Z',
    key_id: head.key_id ?? key.entry.key_id,
  }
  return { ...unsigned, signature: sign(null, checkpointMessage(unsigned), key.privateKey).toString('base64') }
}

/** Leaf `i` of a project's log: a job's event, as the feed gives it without cursor and state. */
export function leafEvent(i: number, projectId = 'prj_audit', jobId = `job_${i}`, type = 'job_created'): LeafObject {
  return {
    id: `evt_${String(i).padStart(26, '0')}`,
    type,
    occurred_at: new Date(Date.UTC(2026, 5, 1, 0, 0, i)).toISOString(),
    project_id: projectId,
    aggregate: 'job',
    aggregate_id: jobId,
    data: { job_type: 'send-email', queue: 'emails', payload: { to: 'ada@example.com', n: i, ratio: i / 8 } },
  }
}

/** A project's log: its leaf objects, and the tree over their hashes. */
export const projectLog = (n: number, projectId = 'prj_audit') => logOf(Array.from({ length: n }, (_, i) => leafEvent(i, projectId)))

/** A log of the given events: them, and the tree over their hashes. */
export const logOf = (events: LeafObject[]) => ({ events, tree: new MerkleTree(events.map((e) => leafHash(e))) })

/** `manifest` (without `signed_at`, `key_id` and `signature`) signed by `key`. */
export function signManifest(key: SigningKey, manifest: Record<string, unknown>, signedAt = '2026-11-26T23:00:00.500Z'): Record<string, unknown> {
  const { signature: _signature, ...rest } = manifest
  const unsigned = { ...rest, signed_at: signedAt, key_id: key.entry.key_id }
  return { ...unsigned, signature: sign(null, manifestMessage(unsigned), key.privateKey).toString('base64') }
}

/**
 * An attested audit-log export as the service writes it: one line per exported leaf (plus the
 * `unattested` account lines, with null leaves, after the first), then the manifest, signed by `key`.
 */
export function auditLogExport(options: {
  key: SigningKey
  events: LeafObject[]
  tree: MerkleTree
  exported: number[]
  checkpoint: Checkpoint
  unattested?: number
}): { lines: Record<string, unknown>[]; manifest: Record<string, unknown> } {
  const { key, events, tree, exported, checkpoint } = options
  const lines: Record<string, unknown>[] = exported.map((i) => ({
    id: `act_${i}`,
    created_at: events[i]!.occurred_at,
    kind: 'job_created',
    summary: `job ${events[i]!.aggregate_id} created`,
    leaf_index: i,
    leaf: events[i],
  }))
  for (let u = 0; u < (options.unattested ?? 0); u++)
    lines.splice(1, 0, { id: `act_account_${u}`, kind: 'password_changed', leaf_index: null, leaf: null })
  const manifest = signManifest(key, {
    version: 1,
    project_id: checkpoint.project_id,
    kind: 'audit_log',
    from: '2026-06-01T00:00:00.000Z',
    until: '2026-06-02T00:00:00.000Z',
    checkpoint,
    lines: lines.length,
    leaves: [...new Set(exported)].sort((a, b) => a - b),
    proof: tree.rangeProof(checkpoint.tree_size, exported),
  })
  return { lines, manifest }
}

/** The NDJSON text of an export's lines and manifest. */
export function ndjson(lines: unknown[], manifest?: unknown): string {
  return [...lines, ...(manifest === undefined ? [] : [{ manifest }])].map((l) => JSON.stringify(l) + '\n').join('')
}

/** A deep copy, to change one member of a fixture without touching the others. */
export const copy = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T

/** `hash` (hex) with one bit flipped, as hex or `encoding`. */
export function flipBit(hash: string, bit: number, encoding: BufferEncoding = 'hex'): string {
  const bytes = Buffer.from(hash, 'hex')
  bytes.writeUInt8(bytes.readUInt8(bit >> 3) ^ (1 << (bit & 7)), bit >> 3)
  return bytes.toString(encoding)
}
