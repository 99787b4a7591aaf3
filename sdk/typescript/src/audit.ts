import { createHash, createPublicKey, verify as verifySignature } from 'node:crypto'
import { canonicalJson } from './canonical-json.js'

// The offline half of docs/audit.md: hashes, checkpoints and proofs of a project's Merkle log,
// checked with node:crypto and nothing else, so that a verifier trusts only the keys it is given.

/** Why a verification failed; `message` says it for a person. */
export type AuditFailureCode =
  | 'malformed'
  | 'unknown_key'
  | 'invalid_signature'
  | 'outside_key_window'
  | 'project_mismatch'
  | 'inclusion_failed'
  | 'consistency_failed'
  | 'tree_shrank'
  | 'root_differs'
  | 'root_mismatch'
  | 'invalid_proof_range'
  | 'leaf_not_covered'
  | 'leaf_out_of_range'
  | 'leaf_conflict'
  | 'leaves_mismatch'
  | 'lines_mismatch'
  | 'unattested_line'
  | 'no_manifest'
  | 'consistency_proof_needed'

/** A refused checkpoint, proof or export. Branch on `code`; show `message`. */
export class AuditVerificationError extends Error {
  override name = 'AuditVerificationError'
  constructor(
    readonly code: AuditFailureCode,
    message: string,
  ) {
    super(message)
  }
}

/** An event of the feed without `cursor`, `state` and `leaf_index`: what a leaf hashes. */
export interface LeafObject {
  aggregate: string
  aggregate_id: string
  data: unknown
  id: string
  occurred_at: string
  project_id: string
  type: string
}

export interface Checkpoint {
  project_id: string
  tree_size: number
  root_hash: string
  issued_at: string
  key_id: string
  signature: string
}

/** What the proofs are checked against: a checkpoint's size and root (its signature checked apart). */
export type TreeHead = Pick<Checkpoint, 'tree_size' | 'root_hash'>

export interface AuditKey {
  key_id: string
  algorithm: string
  public_key: string
  valid_from: string
  valid_until: string | null
}

/** The answer of `GET /jobsvc/v1/audit/keys` as it came (or its `data` array). */
export type AuditKeys = { data: AuditKey[] } | AuditKey[]

export interface InclusionProof {
  leaf_index: number
  tree_size: number
  inclusion_path: string[]
}

export interface ConsistencyProof {
  first: number
  second: number
  consistency_path: string[]
}

/** One hash of a multi-leaf proof: `MTH(D[start:end])`. */
export interface ProofRange {
  start: number
  end: number
  hash: string
}

export interface VerifiedCheckpoint {
  checkpoint: Checkpoint
  key: AuditKey
}

export { canonicalJson }

const LEAF_MEMBERS = ['aggregate', 'aggregate_id', 'data', 'id', 'occurred_at', 'project_id', 'type'] as const
const FEED_ONLY_MEMBERS = ['cursor', 'state', 'leaf_index']
const SIGNING_CONTEXT = 'jobsvc-audit-checkpoint-v1\n'
const EXPORT_SIGNING_CONTEXT = 'jobsvc-audit-export-v1\n'

const sha256 = (...parts: Uint8Array[]): Buffer => {
  const hash = createHash('sha256')
  for (const part of parts) hash.update(part)
  return hash.digest()
}

/** `SHA-256(0x00 ‖ bytes)`: the hash of a leaf given as its bytes (RFC 6962 §2.1). */
export function leafHashOfBytes(bytes: Uint8Array): Buffer {
  return sha256(Uint8Array.of(0), bytes)
}

/** The hash of a leaf object: `SHA-256(0x00 ‖ UTF-8(JCS(leaf)))`. */
export function leafHash(leaf: LeafObject | Record<string, unknown>): Buffer {
  return leafHashOfBytes(Buffer.from(canonicalJson(leaf), 'utf8'))
}

/** `SHA-256(0x01 ‖ left ‖ right)`: the hash of an inner node (RFC 6962 §2.1). */
export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  return sha256(Uint8Array.of(1), left, right)
}

/** `MTH({})`, the root of the empty tree: `SHA-256("")`. */
export const EMPTY_TREE_HASH: string = sha256().toString('hex')

/** A key's id: the first 16 hex characters of `SHA-256(raw public key)`. */
export function keyIdOf(publicKey: Uint8Array): string {
  return sha256(publicKey).toString('hex').slice(0, 16)
}

/** The bytes a checkpoint's Ed25519 signature covers: `"jobsvc-audit-checkpoint-v1\n" ‖ JCS(the five signed members)`. */
export function checkpointMessage(checkpoint: Omit<Checkpoint, 'signature'>): Buffer {
  const { issued_at, key_id, project_id, root_hash, tree_size } = checkpoint
  return Buffer.from(SIGNING_CONTEXT + canonicalJson({ issued_at, key_id, project_id, root_hash, tree_size }), 'utf8')
}

/** The bytes an attested export's manifest signature covers: `"jobsvc-audit-export-v1\n" ‖ JCS(the manifest without its signature)`. */
export function manifestMessage(manifest: Record<string, unknown>): Buffer {
  const { signature: _signature, ...signed } = manifest
  return Buffer.from(EXPORT_SIGNING_CONTEXT + canonicalJson(signed), 'utf8')
}

/**
 * The leaf object of a feed event (or of a leaf object itself): its seven members, without the
 * `cursor`, `state` and `leaf_index` the feed adds. A missing member, or one the feed never has, is
 * refused rather than hashed, so that the reason is not a bare root mismatch.
 */
export function toLeafObject(event: unknown, what = 'the leaf'): LeafObject {
  if (!isRecord(event)) fail('malformed', `${what} is not a JSON object`)
  const missing = LEAF_MEMBERS.filter((m) => !Object.hasOwn(event, m))
  if (missing.length > 0) fail('malformed', `${what} lacks ${missing.join(', ')}: it is not an event of the feed`)
  const foreign = Object.keys(event).filter((m) => !(LEAF_MEMBERS as readonly string[]).includes(m) && !FEED_ONLY_MEMBERS.includes(m))
  if (foreign.length > 0) fail('malformed', `${what} has ${foreign.join(', ')}, which no leaf object has`)
  return Object.fromEntries(LEAF_MEMBERS.map((m) => [m, event[m]])) as unknown as LeafObject
}

/**
 * Checks a checkpoint against the keys document: its key is listed, its Ed25519 signature over
 * {@link checkpointMessage} verifies with that key, and `issued_at` is inside the key's window
 * (`valid_from ≤ issued_at < valid_until`, compared as instants). Answers the checkpoint and its key,
 * or throws {@link AuditVerificationError}.
 */
export function verifyCheckpoint(checkpoint: Checkpoint, keys: AuditKeys, what = 'the checkpoint'): VerifiedCheckpoint {
  const parsed = toCheckpoint(checkpoint, what)
  const key = checkSigned(toKeys(keys), { ...parsed, signedAt: parsed.issued_at, message: checkpointMessage(parsed) }, what, 'issued')
  return { checkpoint: parsed, key }
}

/**
 * Checks an Ed25519 signature of the log (a checkpoint's or an export manifest's): `key_id` is
 * listed, the signature over `message` verifies with its key, and `signedAt` is inside the key's
 * window (`valid_from ≤ signedAt < valid_until`, compared as instants). Answers the key.
 */
export function checkSigned(
  keys: AuditKey[],
  signed: { key_id: string; signature: string; signedAt: string; message: Buffer },
  what: string,
  verb = 'signed',
): AuditKey {
  const key = keys.find((k) => k.key_id === signed.key_id)
  if (key === undefined) {
    const known = keys.map((k) => k.key_id).join(', ') || 'none'
    fail('unknown_key', `${what} is signed by unknown key ${signed.key_id} (the keys document lists ${known})`)
  }
  if (key.algorithm !== 'Ed25519') fail('unknown_key', `${what} is signed by key ${key.key_id}, an ${key.algorithm} key; this verifier knows Ed25519`)
  const publicKey = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.public_key, 'base64').toString('base64url') },
    format: 'jwk',
  })
  if (!verifySignature(null, signed.message, publicKey, Buffer.from(signed.signature, 'base64'))) {
    fail('invalid_signature', `${what}'s signature does not verify with key ${key.key_id}: its members were changed, or another key signed it`)
  }
  const at = Date.parse(signed.signedAt)
  const window = `[${key.valid_from}, ${key.valid_until ?? 'open'})`
  if (at < Date.parse(key.valid_from) || (key.valid_until !== null && at >= Date.parse(key.valid_until))) {
    fail('outside_key_window', `${what} was ${verb} at ${signed.signedAt}, outside the window ${window} of its key ${key.key_id}`)
  }
  return key
}

/**
 * Checks that a leaf (its object, or its hash as bytes or hex) is at `proof.leaf_index` of the tree
 * whose size and root `checkpoint` gives (RFC 9162 §2.1.3.2). The checkpoint's signature is
 * {@link verifyCheckpoint}'s business. Throws {@link AuditVerificationError}.
 */
export function verifyInclusion(leaf: LeafObject | Uint8Array | string, proof: InclusionProof, checkpoint: TreeHead): void {
  const head = toTreeHead(checkpoint, 'the checkpoint')
  if (!isRecord(proof)) fail('malformed', 'the inclusion proof is not a JSON object')
  const index = toIndex(proof.leaf_index, "the inclusion proof's leaf_index")
  const size = toIndex(proof.tree_size, "the inclusion proof's tree_size")
  const path = toHashList(proof.inclusion_path, "the inclusion proof's inclusion_path")
  const hash = toLeafHash(leaf)
  if (size !== head.tree_size) fail('inclusion_failed', `the inclusion proof is for a tree of ${size} leaves, the checkpoint's has ${head.tree_size}`)
  if (index >= size) fail('leaf_out_of_range', `leaf ${index} is beyond the tree of ${size} leaves`)
  const expected = inclusionPathLength(index, size)
  if (path.length !== expected) {
    fail('inclusion_failed', `the inclusion path has ${hashes(path.length)}; leaf ${index} of a tree of ${size} leaves needs ${expected}`)
  }
  // RFC 9162 §2.1.3.2 as written, its own guards included: the length check above refuses the
  // same paths first, only to say how long the path should have been.
  let fn = index
  let sn = size - 1
  let r = hash
  for (const p of path) {
    if (sn === 0) fail('inclusion_failed', `the inclusion path is too long for leaf ${index} of a tree of ${size} leaves`)
    const up = climb(fn, sn)
    r = up.siblingOnLeft ? nodeHash(p, r) : nodeHash(r, p)
    fn = up.fn
    sn = up.sn
  }
  if (sn !== 0) fail('inclusion_failed', `the inclusion path is too short for leaf ${index} of a tree of ${size} leaves`)
  if (!r.equals(head.root)) {
    fail(
      'inclusion_failed',
      `the leaf and its inclusion path lead to root ${short(r)}, not the checkpoint's ${short(head.root)}: the leaf is not at index ${index}`,
    )
  }
}

/**
 * Checks that the tree of `newHead` extends the tree of `oldHead` (RFC 9162 §2.1.4.2), with every
 * index guarded: a smaller newer tree, equal sizes with different roots, a first size of 0, a proof
 * whose sizes are not the checkpoints', and a path one hash too long or too short are all refused.
 * The checkpoints' signatures are {@link verifyCheckpoint}'s business. Throws {@link AuditVerificationError}.
 */
export function verifyConsistency(oldHead: TreeHead, newHead: TreeHead, proof: ConsistencyProof): void {
  const older = toTreeHead(oldHead, 'the older checkpoint')
  const newer = toTreeHead(newHead, 'the newer checkpoint')
  if (!isRecord(proof)) fail('malformed', 'the consistency proof is not a JSON object')
  const first = toIndex(proof.first, "the consistency proof's first")
  const second = toIndex(proof.second, "the consistency proof's second")
  const path = toHashList(proof.consistency_path, "the consistency proof's consistency_path")
  if (older.tree_size > newer.tree_size) {
    fail('tree_shrank', `tree shrank from ${older.tree_size} to ${newer.tree_size} leaves: the newest events were truncated`)
  }
  if (first !== older.tree_size || second !== newer.tree_size) {
    fail(
      'consistency_failed',
      `the consistency proof is from ${first} to ${second} leaves; the checkpoints have ${older.tree_size} and ${newer.tree_size}`,
    )
  }
  if (first === 0) fail('consistency_failed', 'a consistency proof from 0 leaves proves nothing (an empty tree is consistent with every tree)')
  if (first === second) {
    if (!older.root.equals(newer.root)) {
      fail(
        'root_differs',
        `both checkpoints claim ${first} leaves but their roots differ (${short(older.root)}, ${short(newer.root)}): the log was rewritten`,
      )
    }
    if (path.length !== 0)
      fail('consistency_failed', `a consistency proof between two trees of ${first} leaves must be empty; this one has ${hashes(path.length)}`)
    return
  }
  const expected = consistencyPathLength(first, second)
  if (path.length !== expected) {
    fail('consistency_failed', `the consistency path has ${hashes(path.length)}; from ${first} to ${second} leaves it needs ${expected}`)
  }
  // RFC 9162 §2.1.4.2 as written, its own guards included (see verifyInclusion).
  const steps = isPowerOfTwo(first) ? [older.root, ...path] : path
  let fn = first - 1
  let sn = second - 1
  while (isOdd(fn)) {
    fn = half(fn)
    sn = half(sn)
  }
  let fr = steps[0]!
  let sr = steps[0]!
  for (const c of steps.slice(1)) {
    if (sn === 0) fail('consistency_failed', `the consistency path is too long for ${first} to ${second} leaves`)
    const up = climb(fn, sn)
    if (up.siblingOnLeft) {
      fr = nodeHash(c, fr)
      sr = nodeHash(c, sr)
    } else {
      sr = nodeHash(sr, c)
    }
    fn = up.fn
    sn = up.sn
  }
  if (sn !== 0) fail('consistency_failed', `the consistency path is too short for ${first} to ${second} leaves`)
  if (!fr.equals(older.root)) {
    fail(
      'consistency_failed',
      `the consistency proof leads to ${short(fr)} for the first ${first} leaves, not the older checkpoint's root ${short(older.root)}`,
    )
  }
  if (!sr.equals(newer.root)) {
    fail(
      'consistency_failed',
      `the consistency proof leads to ${short(sr)} for the tree of ${second} leaves, not the newer checkpoint's root ${short(newer.root)}: the newer tree does not extend the older`,
    )
  }
}

/**
 * Checks a multi-leaf inclusion proof (docs/audit.md, "Attested exports"): the root computed from
 * `leafHashes` (leaf index → leaf hash) and the ranges of `proof` is the checkpoint's, each range is
 * one the RFC 6962 recursion visits and holds none of the leaves, and every leaf of the tree is one
 * of the two. Throws {@link AuditVerificationError}.
 */
export function verifyMultiInclusion(leafHashes: ReadonlyMap<number, Uint8Array>, proof: ProofRange[], checkpoint: TreeHead): void {
  const head = toTreeHead(checkpoint, 'the checkpoint')
  const size = head.tree_size
  const leaves = [...leafHashes.keys()].sort((a, b) => a - b)
  for (const index of leaves) {
    toIndex(index, 'a leaf index')
    if (index >= size) fail('leaf_out_of_range', `leaf ${index} is beyond the checkpoint's tree of ${size} leaves`)
  }
  if (!Array.isArray(proof)) fail('malformed', "the manifest's proof is not an array")
  const ranges = new Map<string, { start: number; end: number; hash: Buffer; visited: boolean }>()
  proof.forEach((range, i) => {
    if (!isRecord(range)) fail('malformed', `proof range ${i} is not a JSON object`)
    const start = toIndex(range.start, `proof range ${i}'s start`)
    const end = toIndex(range.end, `proof range ${i}'s end`)
    const hash = toHash(range.hash, `proof range ${i}'s hash`)
    if (start >= end || end > size) fail('invalid_proof_range', `proof range [${start}, ${end}) is not a range of the tree of ${size} leaves`)
    const key = `${start}:${end}`
    if (ranges.has(key)) fail('invalid_proof_range', `proof range [${start}, ${end}) is listed twice`)
    const hidden = firstLeafIn(leaves, start, end)
    if (hidden !== undefined) fail('invalid_proof_range', `proof range [${start}, ${end}) holds exported leaf ${hidden}: it would hide that leaf`)
    ranges.set(key, { start, end, hash, visited: false })
  })
  const root = (start: number, end: number): Buffer => {
    const range = ranges.get(`${start}:${end}`)
    if (range !== undefined) {
      range.visited = true
      return range.hash
    }
    if (end - start === 1) {
      const hash = leafHashes.get(start)
      if (hash === undefined) fail('leaf_not_covered', `leaf ${start} is neither in the export nor covered by the proof`)
      return Buffer.from(hash)
    }
    const k = largestPowerOfTwoBelow(end - start)
    return nodeHash(root(start, start + k), root(start + k, end))
  }
  const computed = size === 0 ? Buffer.from(EMPTY_TREE_HASH, 'hex') : root(0, size)
  for (const range of ranges.values()) {
    if (!range.visited) {
      fail(
        'invalid_proof_range',
        `proof range [${range.start}, ${range.end}) is never visited by the recursion over the tree of ${size} leaves (not one of its subtrees, or inside another range)`,
      )
    }
  }
  if (!computed.equals(head.root)) {
    fail(
      'root_mismatch',
      `the exported leaves and the proof lead to root ${short(computed)}, not the checkpoint's ${short(head.root)}: an exported event was altered, or the proof is wrong`,
    )
  }
}

/** A checkpoint with every member in its documented form, or a `malformed` failure naming the member. */
export function toCheckpoint(value: unknown, what: string): Checkpoint {
  if (!isRecord(value)) fail('malformed', `${what} is not a JSON object`)
  const { project_id, issued_at } = value
  if (typeof project_id !== 'string' || project_id === '') fail('malformed', `${what}'s project_id is not a project id`)
  const { tree_size, root_hash } = toTreeHead(value as TreeHead, what)
  if (!isUtcMillis(issued_at)) fail('malformed', `${what}'s issued_at is not an RFC 3339 UTC time with milliseconds`)
  return { project_id, tree_size, root_hash, issued_at, ...toSignature(value, what) }
}

function toTreeHead(value: TreeHead, what: string): TreeHead & { root: Buffer } {
  if (!isRecord(value)) fail('malformed', `${what} is not a JSON object`)
  const tree_size = toIndex(value.tree_size, `${what}'s tree_size`)
  const root = toHash(value.root_hash, `${what}'s root_hash`)
  if (tree_size === 0 && root.toString('hex') !== EMPTY_TREE_HASH) fail('malformed', `${what} has 0 leaves but a root other than the empty tree's`)
  return { tree_size, root_hash: root.toString('hex'), root }
}

export function toKeys(document: AuditKeys): AuditKey[] {
  const entries: unknown = Array.isArray(document) ? document : isRecord(document) ? document.data : undefined
  if (!Array.isArray(entries)) fail('malformed', 'the keys document is not the answer of GET /jobsvc/v1/audit/keys ({"data": [...]})')
  return entries.map((entry: unknown, i) => {
    const what = `key ${i} of the keys document`
    if (!isRecord(entry)) fail('malformed', `${what} is not a JSON object`)
    const { key_id, algorithm, public_key, valid_from, valid_until } = entry
    if (typeof key_id !== 'string' || !/^[0-9a-f]{16}$/.test(key_id)) fail('malformed', `${what} has no key_id of 16 lower-case hex characters`)
    if (typeof algorithm !== 'string') fail('malformed', `key ${key_id} has no algorithm`)
    const raw = typeof public_key === 'string' ? decodeBase64(public_key) : undefined
    if (raw?.length !== 32) fail('malformed', `key ${key_id}'s public_key is not 32 bytes in standard base64`)
    if (keyIdOf(raw) !== key_id) fail('malformed', `key ${key_id}'s public key has the id ${keyIdOf(raw)}: the keys document is inconsistent`)
    if (!isRfc3339(valid_from)) fail('malformed', `key ${key_id}'s valid_from is not an RFC 3339 time`)
    if (valid_until !== null && !isRfc3339(valid_until)) fail('malformed', `key ${key_id}'s valid_until is neither null nor an RFC 3339 time`)
    return { key_id, algorithm, public_key: public_key as string, valid_from, valid_until }
  })
}

/** {@link leafHash}, with a value that has no JCS form (`1e999` parses as Infinity) refused as `malformed`. */
export function hashOfLeaf(leaf: LeafObject, what: string): Buffer {
  try {
    return leafHash(leaf)
  } catch (error) {
    if (error instanceof TypeError) fail('malformed', `${what} has no canonical JSON form: ${error.message}`)
    throw error
  }
}

function toLeafHash(leaf: LeafObject | Uint8Array | string): Buffer {
  if (typeof leaf === 'string') return toHash(leaf, 'the leaf hash')
  if (!(leaf instanceof Uint8Array)) return hashOfLeaf(leaf, 'the leaf')
  if (leaf.length !== 32) fail('malformed', `the leaf hash is ${leaf.length} bytes, not 32`)
  return Buffer.from(leaf)
}

/** The `key_id` and `signature` of a signed statement, in their documented forms. */
export function toSignature(value: Record<string, unknown>, what: string): { key_id: string; signature: string } {
  const { key_id, signature } = value
  if (typeof key_id !== 'string' || !/^[0-9a-f]{16}$/.test(key_id)) fail('malformed', `${what}'s key_id is not 16 lower-case hex characters`)
  if (typeof signature !== 'string' || decodeBase64(signature)?.length !== 64)
    fail('malformed', `${what}'s signature is not 64 bytes in standard base64`)
  return { key_id, signature }
}

/** The form of `issued_at` and `signed_at`: RFC 3339, UTC, with milliseconds. */
export function isUtcMillis(value: unknown): value is string {
  return typeof value === 'string' && /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(value) && !Number.isNaN(Date.parse(value))
}

function toIndex(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) fail('malformed', `${what} is not a non-negative integer`)
  return value
}

function toHash(value: unknown, what: string): Buffer {
  if (typeof value !== 'string' || !/^[0-9a-f]{64}$/.test(value)) fail('malformed', `${what} is not a hash (64 lower-case hex characters)`)
  return Buffer.from(value, 'hex')
}

function toHashList(value: unknown, what: string): Buffer[] {
  if (!Array.isArray(value)) fail('malformed', `${what} is not an array`)
  return value.map((item, i) => toHash(item, `${what}[${i}]`))
}

function decodeBase64(text: string): Buffer | undefined {
  // Buffer's decoder skips what is not base64; the documented form is checked first.
  if (text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return undefined
  return Buffer.from(text, 'base64')
}

function isRfc3339(value: unknown): value is string {
  return (
    typeof value === 'string' &&
    /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/.test(value) &&
    !Number.isNaN(Date.parse(value))
  )
}

/**
 * One step of RFC 9162's walk from a node up to the root (§2.1.3.2 step 4, §2.1.4.2 step 6): whether
 * the path's next hash is the left sibling, and `fn`, `sn` after the step.
 */
function climb(fn: number, sn: number): { siblingOnLeft: boolean; fn: number; sn: number } {
  const siblingOnLeft = isOdd(fn) || fn === sn
  if (siblingOnLeft && !isOdd(fn)) {
    while (!isOdd(fn) && fn !== 0) {
      fn = half(fn)
      sn = half(sn)
    }
  }
  return { siblingOnLeft, fn: half(fn), sn: half(sn) }
}

/** How many hashes the inclusion path of leaf `index` in a tree of `size` leaves holds. */
function inclusionPathLength(index: number, size: number): number {
  let at = { fn: index, sn: size - 1 }
  let length = 0
  for (; at.sn !== 0; length++) at = climb(at.fn, at.sn)
  return length
}

/** How many hashes the consistency path from `first` to `second` leaves holds (0 < first < second). */
function consistencyPathLength(first: number, second: number): number {
  let fn = first - 1
  let sn = second - 1
  while (isOdd(fn)) {
    fn = half(fn)
    sn = half(sn)
  }
  // The walk takes one step per hash after the first; the first is the old root when `first` is a
  // power of two, which the path then leaves out.
  return (isPowerOfTwo(first) ? 0 : 1) + inclusionPathLength(fn, sn + 1)
}

function firstLeafIn(sortedLeaves: number[], start: number, end: number): number | undefined {
  let low = 0
  let high = sortedLeaves.length
  while (low < high) {
    const mid = (low + high) >>> 1
    if (sortedLeaves[mid]! < start) low = mid + 1
    else high = mid
  }
  const leaf = sortedLeaves[low]
  return leaf !== undefined && leaf < end ? leaf : undefined
}

// Indices stay below 2^53: halving and parity by arithmetic, since `>>` and `&` cut at 32 bits.
const isOdd = (n: number): boolean => n % 2 === 1
const half = (n: number): number => Math.floor(n / 2)
const isPowerOfTwo = (n: number): boolean => n > 0 && 2 ** Math.floor(Math.log2(n)) === n

function largestPowerOfTwoBelow(n: number): number {
  let k = 1
  while (k * 2 < n) k *= 2
  return k
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

const hashes = (n: number): string => `${n} hash${n === 1 ? '' : 'es'}`
const short = (hash: Buffer): string => `${hash.toString('hex').slice(0, 12)}…`

export function fail(code: AuditFailureCode, message: string): never {
  throw new AuditVerificationError(code, message)
}
