/**
 * A project's Merkle log (docs/audit.md): every event of its feed is a leaf, in log order, and
 * the tree is RFC 6962's. Pure: the hash functions come from the edge (node:crypto), and the
 * stored nodes are read through the functions below, which say which nodes they need first so
 * that the edge fetches them in one read.
 *
 * Storage is by tiles, as Tessera stores its trees: a tile of level `t` holds up to 256 hashes of
 * the tree's nodes of height `8·t` (tile level 0: the leaf hashes), so a node of any height is
 * one tile away (a node of height `8·t + r` is `2^r` hashes of one tile reduced), a proof reads
 * O(log₂₅₆ n) tiles, and appending a batch rewrites one tile per tile level, not one row per node.
 */

import { canonicalJson } from './canonical-json.ts'
import { feedAggregates, readableByTenant, type FeedAggregate, type FeedEvent } from './event-feed.ts'

/**
 * A leaf: an event as the project's feed shows it (an API key's or an admin's reading), without
 * what is presentation (`cursor`, `state`, `leaf_index`). Its bytes are its canonical JSON
 * (RFC 8785), so anyone can recompute a leaf's hash from an exported event.
 */
export interface AuditLeaf {
  aggregate: FeedAggregate
  aggregate_id: string
  data: unknown
  id: string
  occurred_at: string
  project_id: string
  type: string
}

/**
 * Whether a message's events are leaves of its project's tree: every message of the feed's
 * aggregates of a project (`_platform`, streams/names.ts, is the scope of what belongs to none).
 */
export function isAuditLeafMessage(message: { aggregate: string; project_id: string }): boolean {
  return (feedAggregates as readonly string[]).includes(message.aggregate) && message.project_id !== '_platform'
}

/** A stored event's leaf (`message` must be a leaf message, `isAuditLeafMessage`). */
export function auditLeafOf(
  message: { aggregate: string; aggregate_id: string; project_id: string },
  event: { id: string; type: string; time: string; data: unknown },
): AuditLeaf {
  const aggregate = message.aggregate as FeedAggregate
  return {
    aggregate,
    aggregate_id: message.aggregate_id,
    data: readableByTenant(aggregate, event.data),
    id: event.id,
    occurred_at: event.time,
    project_id: message.project_id,
    type: event.type,
  }
}

/** The leaf of an event as the feed gave it. */
export function auditLeafOfFeedEvent(e: FeedEvent): AuditLeaf {
  return {
    aggregate: e.aggregate,
    aggregate_id: e.aggregate_id,
    data: e.data,
    id: e.id,
    occurred_at: e.occurred_at,
    project_id: e.project_id,
    type: e.type,
  }
}

/** The text whose UTF-8 bytes are hashed as the leaf. */
export function auditLeafText(leaf: AuditLeaf): string {
  return canonicalJson(leaf)
}

/** SHA-256 as RFC 6962 uses it, supplied by the edge. */
export interface MerkleHasher {
  /** SHA-256(0x00 ‖ bytes) */
  leaf(bytes: Uint8Array): Uint8Array
  /** SHA-256(0x01 ‖ left ‖ right) */
  node(left: Uint8Array, right: Uint8Array): Uint8Array
  /** SHA-256 of nothing: the root of the empty tree. */
  readonly empty: Uint8Array
}

/** Hashes per tile; 8 heights of the tree per tile level. */
export const tileWidth = 256
const tileHeight = 8

/** `[start, end)` of the leaves: the hash of such a range is MTH(D[start:end]). */
export interface LeafRange {
  start: number
  end: number
}

/** A complete subtree: `2^height` leaves from `index · 2^height`. */
export interface TreeNode {
  height: number
  index: number
}

/** Where a tile is: its level (heights `8·level`) and its place along that level. */
export interface TileKey {
  level: number
  index: number
}

/** The hashes of the tiles a computation needs, by `tileName`; a tile may hold fewer than 256 (the newest). */
export type Tiles = ReadonlyMap<string, readonly Uint8Array[]>

export function tileName(key: TileKey): string {
  return `${key.level}/${key.index}`
}

/** The largest power of two below `n` (n ≥ 2): where RFC 6962 splits a range of `n` leaves. */
export function splitPoint(n: number): number {
  let k = 1
  while (k * 2 < n) k *= 2
  return k
}

function isPowerOfTwo(n: number): boolean {
  return n > 0 && Number.isInteger(Math.log2(n))
}

/** The complete subtrees whose hashes make up MTH of a range the RFC 6962 recursion visits. */
export function nodesOfRange(range: LeafRange): TreeNode[] {
  const size = range.end - range.start
  if (size <= 0) return []
  if (isPowerOfTwo(size) && range.start % size === 0) return [{ height: Math.log2(size), index: range.start / size }]
  const k = splitPoint(size)
  return [...nodesOfRange({ start: range.start, end: range.start + k }), ...nodesOfRange({ start: range.start + k, end: range.end })]
}

/** The tile that holds the hashes a node is reduced from. */
export function tileOf(node: TreeNode): TileKey {
  const level = Math.floor(node.height / tileHeight)
  const below = node.height - level * tileHeight
  return { level, index: Math.floor((node.index * 2 ** below) / tileWidth) }
}

/** The tiles every range needs, each once. */
export function tilesForRanges(ranges: readonly LeafRange[]): TileKey[] {
  const keys = new Map<string, TileKey>()
  for (const range of ranges) for (const node of nodesOfRange(range)) keys.set(tileName(tileOf(node)), tileOf(node))
  return [...keys.values()]
}

/** MTH of `hashes` (a power of two of them, in order). */
function reduce(hasher: MerkleHasher, hashes: readonly Uint8Array[]): Uint8Array {
  let level = hashes
  while (level.length > 1) {
    const next: Uint8Array[] = []
    for (let i = 0; i < level.length; i += 2) next.push(hasher.node(level[i]!, level[i + 1]!))
    level = next
  }
  return level[0]!
}

/** A node's hash from its tile; throws when the tile does not hold it (a node not yet complete, or a tile not fetched). */
export function nodeHash(hasher: MerkleHasher, tiles: Tiles, node: TreeNode): Uint8Array {
  const key = tileOf(node)
  const tile = tiles.get(tileName(key))
  const below = node.height - key.level * tileHeight
  const width = 2 ** below
  const offset = (node.index * width) % tileWidth
  if (tile === undefined || tile.length < offset + width) {
    throw new Error(`audit log: node ${node.height}/${node.index} is not in tile ${tileName(key)}`)
  }
  return width === 1 ? tile[offset]! : reduce(hasher, tile.slice(offset, offset + width))
}

/** MTH(D[start:end]) of a range the RFC 6962 recursion visits. */
export function rangeHash(hasher: MerkleHasher, tiles: Tiles, range: LeafRange): Uint8Array {
  const size = range.end - range.start
  if (size === 0) return hasher.empty
  if (isPowerOfTwo(size) && range.start % size === 0) return nodeHash(hasher, tiles, { height: Math.log2(size), index: range.start / size })
  const k = splitPoint(size)
  return hasher.node(
    rangeHash(hasher, tiles, { start: range.start, end: range.start + k }),
    rangeHash(hasher, tiles, { start: range.start + k, end: range.end }),
  )
}

/** The root of the first `size` leaves: one range. */
export function rootRange(size: number): LeafRange {
  return { start: 0, end: size }
}

/**
 * The ranges whose hashes are the inclusion path of leaf `index` in a tree of `size` leaves, from
 * the leaf's sibling up (RFC 9162 §2.1.3.1, PATH(m, D[n])).
 */
export function inclusionRanges(index: number, size: number): LeafRange[] {
  const path: LeafRange[] = []
  let start = 0
  let end = size
  while (end - start > 1) {
    const k = splitPoint(end - start)
    if (index < start + k) {
      path.push({ start: start + k, end })
      end = start + k
    } else {
      path.push({ start, end: start + k })
      start += k
    }
  }
  return path.reverse()
}

/**
 * The ranges whose hashes prove that the tree of `first` leaves is a prefix of the tree of
 * `second` (RFC 9162 §2.1.4.1, PROOF(m, D[n])), in the RFC's order. Needs 0 < first ≤ second.
 */
export function consistencyRanges(first: number, second: number): LeafRange[] {
  const subproof = (m: number, start: number, end: number, whole: boolean): LeafRange[] => {
    const n = end - start
    if (m === n) return whole ? [] : [{ start, end }]
    const k = splitPoint(n)
    if (m <= k) return [...subproof(m, start, start + k, whole), { start: start + k, end }]
    return [...subproof(m - k, start + k, end, false), { start, end: start + k }]
  }
  return subproof(first, 0, second, true)
}

/**
 * The multi-leaf inclusion proof of an attested export (docs/audit.md, "Attested exports"): the
 * largest ranges of the RFC 6962 recursion over `size` leaves that hold none of `leaves` (sorted,
 * distinct, each below `size`), so that the root follows from those leaves and these hashes.
 */
export function exportProofRanges(leaves: readonly number[], size: number): LeafRange[] {
  const out: LeafRange[] = []
  const walk = (start: number, end: number, from: number, to: number): void => {
    // leaves[from..to) are the exported leaves within [start, end)
    if (from === to) {
      out.push({ start, end })
      return
    }
    if (end - start === 1) return
    const mid = start + splitPoint(end - start)
    let split = from
    while (split < to && leaves[split]! < mid) split++
    walk(start, mid, from, split)
    walk(mid, end, split, to)
  }
  if (size > 0) walk(0, size, 0, leaves.length)
  return out
}

/**
 * The newest tile of every level of a tree of `size` leaves: what appending needs, and all it
 * rewrites. Level `t` has ⌊size / 256^t⌋ complete nodes of height 8·t; its newest tile holds those
 * past the last full tile (none: a fresh tile, not stored yet).
 */
export function edgeTiles(size: number): (TileKey & { length: number })[] {
  const out: (TileKey & { length: number })[] = []
  for (let level = 0, count = size; count > 0; level++, count = Math.floor(count / tileWidth)) {
    out.push({ level, index: Math.floor(count / tileWidth), length: count % tileWidth })
  }
  return out
}

/**
 * The newest tiles of a tree, by level, as appends change them: `changed` names the levels whose
 * newest tile to write back, `filled` the tiles appends completed (written once, whole).
 */
export interface TreeEdge {
  size: number
  tiles: { index: number; hashes: Uint8Array[] }[]
  changed: Set<number>
  filled: (TileKey & { hashes: Uint8Array[] })[]
}

/** The tiles an edge's appends changed, each with every hash it holds now. */
export function changedTiles(edge: TreeEdge): (TileKey & { hashes: Uint8Array[] })[] {
  const newest = [...edge.changed].map((level) => ({ level, ...edge.tiles[level]! })).filter((t) => t.hashes.length > 0)
  return [...edge.filled, ...newest]
}

/** The edge of a tree of `size` leaves from its stored newest tiles (`tiles`: at least `edgeTiles(size)`). */
export function edgeOf(size: number, tiles: Tiles): TreeEdge {
  const edge: TreeEdge = { size, tiles: [], changed: new Set(), filled: [] }
  for (const key of edgeTiles(size)) {
    const stored = tiles.get(tileName(key)) ?? []
    if (stored.length < key.length) throw new Error(`audit log: tile ${tileName(key)} holds ${stored.length} hashes, ${key.length} expected`)
    edge.tiles[key.level] = { index: key.index, hashes: stored.slice(0, key.length) }
  }
  return edge
}

/** Appends a leaf hash: fills the newest tile of level 0, and a full tile's root goes one level up. */
export function appendLeaf(hasher: MerkleHasher, edge: TreeEdge, leafHash: Uint8Array): void {
  let hash = leafHash
  for (let level = 0; ; level++) {
    const tile = (edge.tiles[level] ??= { index: 0, hashes: [] })
    tile.hashes.push(hash)
    edge.changed.add(level)
    if (tile.hashes.length < tileWidth) break
    hash = reduce(hasher, tile.hashes)
    // The full tile is written as it is; the level goes on in a fresh one.
    edge.tiles[level] = { index: tile.index + 1, hashes: [] }
    edge.filled.push({ level, index: tile.index, hashes: tile.hashes })
  }
  edge.size++
}

/** The root of the tree an edge ends (its newest tiles hold every node the root is made of). */
export function edgeRoot(hasher: MerkleHasher, edge: TreeEdge): Uint8Array {
  const tiles = new Map<string, Uint8Array[]>()
  edge.tiles.forEach((tile, level) => tiles.set(tileName({ level, index: tile.index }), tile.hashes))
  return rangeHash(hasher, tiles, rootRange(edge.size))
}
