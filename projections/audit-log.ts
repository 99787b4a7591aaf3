import { hash } from 'node:crypto'
import type { Checkpoint } from '../domain/audit-checkpoint.ts'
import {
  appendLeaf,
  auditLeafOf,
  auditLeafText,
  changedTiles,
  consistencyRanges,
  edgeOf,
  edgeTiles,
  exportProofRanges,
  inclusionRanges,
  isAuditLeafMessage,
  rangeHash,
  rootRange,
  tileName,
  tilesForRanges,
  tileWidth,
  type LeafRange,
  type MerkleHasher,
  type TileKey,
  type TreeEdge,
  type Tiles,
} from '../domain/audit-log.ts'
import type { AuditSigningKey } from '../domain/audit-signing-key.ts'
import { maxLeavesPerRecord, type AuditExpiryEvent, type ExpiredLeafRun } from '../domain/audit-expiry.ts'
import { feedAggregates, feedEventTypes } from '../domain/event-feed.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable, Tx } from './database.ts'
import { readModel, snapshotRows } from './projection.ts'

/** One-shot SHA-256 (`crypto.hash`): about twice as fast as a Hash object for inputs this small. */
function sha256(...parts: Uint8Array[]): Uint8Array {
  return hash('sha256', parts.length === 1 ? parts[0]! : Buffer.concat(parts), 'buffer')
}

const leafPrefix = Uint8Array.of(0)
const nodePrefix = Uint8Array.of(1)

/** RFC 6962's hashes on node:crypto. */
export const auditHasher: MerkleHasher = {
  leaf: (bytes) => sha256(leafPrefix, bytes),
  node: (left, right) => sha256(nodePrefix, left, right),
  empty: sha256(),
}

export const toHex = (hash: Uint8Array): string => Buffer.from(hash).toString('hex')

/** A tile's stored bytes: its hashes one after another. */
function tileBytes(hashes: readonly Uint8Array[]): Buffer {
  return Buffer.concat(hashes)
}

function hashesOf(bytes: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = []
  for (let i = 0; i + 32 <= bytes.length; i += 32) out.push(bytes.subarray(i, i + 32))
  return out
}

async function readTiles(db: Queryable, projects: readonly string[], keys: readonly TileKey[]): Promise<Map<string, Map<string, Uint8Array[]>>> {
  const out = new Map<string, Map<string, Uint8Array[]>>()
  if (keys.length === 0) return out
  const rows = await db<{ project_id: string; level: number; idx: string; hashes: Buffer }[]>`
    SELECT t.project_id, t.level, t.idx, t.hashes
    FROM unnest(${projects as string[]}::text[], ${keys.map((k) => k.level)}::int[], ${keys.map((k) => k.index)}::bigint[]) AS w(project_id, level, idx)
    JOIN audit_tiles t ON t.project_id = w.project_id AND t.level = w.level AND t.idx = w.idx`
  for (const row of rows) {
    let tiles = out.get(row.project_id)
    if (tiles === undefined) out.set(row.project_id, (tiles = new Map()))
    tiles.set(tileName({ level: row.level, index: Number(row.idx) }), hashesOf(row.hashes))
  }
  return out
}

/**
 * The leaf hash of each event of a leaf message, in order: SHA-256 of 0x00 and the leaf's text,
 * hashed as one string ("\u0000" is the byte 0x00 in UTF-8), so no buffer is made per leaf.
 */
function leafHashesOf(record: EventRecord): Uint8Array[] {
  return record.message.events.map((event) => hash('sha256', '\u0000' + auditLeafText(auditLeafOf(record.message, event)), 'buffer'))
}

/**
 * Appends each project's new leaves: reads its tree's size and newest tiles once per batch,
 * appends every event of its messages after the tree's `last_seq` (so a message applied again
 * appends nothing), and writes back the tiles that changed, the positions and the size.
 */
async function applyLeaves(tx: Tx, records: readonly EventRecord[]): Promise<void> {
  const byProject = new Map<string, EventRecord[]>()
  for (const r of records) {
    if (!isAuditLeafMessage(r.message)) continue
    const list = byProject.get(r.message.project_id)
    if (list === undefined) byProject.set(r.message.project_id, [r])
    else list.push(r)
  }
  if (byProject.size === 0) return
  const projects = [...byProject.keys()]
  const trees = new Map(
    (
      await tx<{ project_id: string; size: string; last_seq: string }[]>`
      SELECT project_id, size, last_seq FROM audit_trees WHERE project_id = ANY(${projects}) FOR UPDATE`
    ).map((t) => [t.project_id, { size: Number(t.size), lastSeq: Number(t.last_seq) }]),
  )
  const wanted = projects.flatMap((p) =>
    edgeTiles(trees.get(p)?.size ?? 0)
      .filter((k) => k.length > 0)
      .map((k) => ({ p, k })),
  )
  const stored = await readTiles(
    tx,
    wanted.map((w) => w.p),
    wanted.map((w) => w.k),
  )
  // Hashes travel as hex text: postgres.js sends an array of buffers as one bytea, not bytea[].
  const expired = await expiredAhead(tx, projects)
  const tileRows = { project: [] as string[], level: [] as number[], idx: [] as number[], hashes: [] as string[] }
  const positions = { project: [] as string[], seq: [] as number[], leaf: [] as number[], events: [] as number[], aggregate: [] as string[] }
  const treeRows = { project: [] as string[], size: [] as number[], lastSeq: [] as number[] }
  for (const [projectId, list] of byProject) {
    const tree = trees.get(projectId) ?? { size: 0, lastSeq: 0 }
    const edge = edgeOf(tree.size, stored.get(projectId) ?? new Map())
    const gaps = expired.get(projectId)
    let lastSeq = tree.lastSeq
    for (const record of list) {
      if (record.seq <= lastSeq) continue
      const hashes = leafHashesOf(record)
      // Rebuilding from a log that retention thinned: the leaves it removed go back in their places.
      if (gaps !== undefined) fillExpired(edge, gaps, hashes[0]!)
      positions.project.push(projectId)
      positions.seq.push(record.seq)
      positions.leaf.push(edge.size)
      positions.events.push(record.message.events.length)
      positions.aggregate.push(record.message.aggregate_id)
      for (const hash of hashes) appendLeaf(auditHasher, edge, hash)
      lastSeq = record.seq
    }
    if (lastSeq === tree.lastSeq) continue
    for (const tile of changedTiles(edge)) {
      tileRows.project.push(projectId)
      tileRows.level.push(tile.level)
      tileRows.idx.push(tile.index)
      tileRows.hashes.push(tileBytes(tile.hashes).toString('hex'))
    }
    treeRows.project.push(projectId)
    treeRows.size.push(edge.size)
    treeRows.lastSeq.push(lastSeq)
  }
  if (treeRows.project.length === 0) return
  await tx`
    INSERT INTO audit_tiles (project_id, level, idx, hashes)
    SELECT p, l, i, decode(h, 'hex') FROM unnest(${tileRows.project}::text[], ${tileRows.level}::smallint[], ${tileRows.idx}::bigint[], ${tileRows.hashes}::text[]) AS w(p, l, i, h)
    ON CONFLICT (project_id, level, idx) DO UPDATE SET hashes = excluded.hashes`
  await tx`
    INSERT INTO audit_positions (project_id, seq, leaf_index, events, aggregate_id)
    SELECT * FROM unnest(${positions.project}::text[], ${positions.seq}::bigint[], ${positions.leaf}::bigint[], ${positions.events}::int[],
      ${positions.aggregate}::text[])
    ON CONFLICT DO NOTHING`
  await tx`
    INSERT INTO audit_trees (project_id, size, last_seq)
    SELECT * FROM unnest(${treeRows.project}::text[], ${treeRows.size}::bigint[], ${treeRows.lastSeq}::bigint[])
    ON CONFLICT (project_id) DO UPDATE SET size = excluded.size, last_seq = excluded.last_seq`
}

/**
 * The expired leaves (retention's records) at or past each project's tree size: none while the
 * tree is the one retention read them from; when the tree is rebuilt from the log, those whose
 * messages are gone.
 */
async function expiredAhead(tx: Tx, projects: readonly string[]): Promise<Map<string, Map<number, Uint8Array>>> {
  const rows = await tx<{ project_id: string; leaf_index: string; hash: Buffer }[]>`
    SELECT e.project_id, e.leaf_index, e.hash FROM audit_expired_leaves e LEFT JOIN audit_trees t ON t.project_id = e.project_id
    WHERE e.project_id = ANY(${projects as string[]}) AND e.leaf_index >= coalesce(t.size, 0)`
  const out = new Map<string, Map<number, Uint8Array>>()
  for (const row of rows) {
    let gaps = out.get(row.project_id)
    if (gaps === undefined) out.set(row.project_id, (gaps = new Map()))
    gaps.set(Number(row.leaf_index), row.hash)
  }
  return out
}

/**
 * Appends the expired leaves that stand where the tree is now, up to the next message's first
 * leaf. A recorded leaf equal to that leaf is the message itself (recorded, then not removed: a
 * job whose removal failed): it is appended as the message's.
 */
function fillExpired(edge: TreeEdge, gaps: ReadonlyMap<number, Uint8Array>, next: Uint8Array): void {
  for (let gap = gaps.get(edge.size); gap !== undefined && !Buffer.from(gap).equals(next); gap = gaps.get(edge.size)) {
    appendLeaf(auditHasher, edge, gap)
  }
}

/** Retention's records of the leaves it removes: kept for a rebuild (`expiredAhead`). */
async function applyExpiredLeaves(tx: Tx, records: readonly EventRecord[]): Promise<void> {
  const rows = { project: [] as string[], index: [] as number[], hash: [] as string[] }
  for (const record of records) {
    if (record.message.aggregate !== 'audit_expiry') continue
    for (const event of record.message.events) {
      if (event.type !== 'leaves_expired') continue
      for (const run of (event.data as AuditExpiryEvent['data']).runs) {
        const bytes = Buffer.from(run.hashes, 'base64')
        for (let i = 0; i * 32 < bytes.length; i++) {
          rows.project.push(record.message.project_id)
          rows.index.push(run.from + i)
          rows.hash.push(bytes.subarray(i * 32, i * 32 + 32).toString('hex'))
        }
      }
    }
  }
  if (rows.project.length === 0) return
  await tx`
    INSERT INTO audit_expired_leaves (project_id, leaf_index, hash)
    SELECT p, i, decode(h, 'hex') FROM unnest(${rows.project}::text[], ${rows.index}::bigint[], ${rows.hash}::text[]) AS w(p, i, h)
    ON CONFLICT DO NOTHING`
}

/** Each checkpoint taken in: listed, and the tree's `checkpointed_size` for the hourly pass. */
async function applyCheckpoints(tx: Tx, records: readonly EventRecord[]): Promise<void> {
  for (const record of records) {
    if (record.message.aggregate !== 'audit') continue
    for (const event of record.message.events) {
      if (event.type !== 'checkpoint_issued') continue
      const c = event.data as Checkpoint
      await tx`
        INSERT INTO audit_checkpoints (project_id, tree_size, root_hash, issued_at, key_id, signature, seq)
        VALUES (${c.project_id}, ${c.tree_size}, ${c.root_hash}, ${c.issued_at}, ${c.key_id}, ${c.signature}, ${record.seq})
        ON CONFLICT DO NOTHING`
      await tx`
        UPDATE audit_trees SET checkpointed_size = ${c.tree_size}
        WHERE project_id = ${c.project_id} AND (checkpointed_size IS NULL OR checkpointed_size < ${c.tree_size})`
    }
  }
}

const applyKeyRows = snapshotRows<AuditSigningKey>('audit_key', (db, k, seq) => {
  return db`
    INSERT INTO audit_signing_keys (key_id, algorithm, public_key, valid_from, valid_until, last_seq)
    VALUES (${k.key_id}, ${k.algorithm}, ${k.public_key}, ${k.valid_from}, ${k.valid_until}, ${seq})
    ON CONFLICT (key_id) DO UPDATE SET valid_until = excluded.valid_until, last_seq = excluded.last_seq
    WHERE audit_signing_keys.last_seq < excluded.last_seq`
})

/** A tree's size and how far the log it was built from goes, or null before its first leaf. */
export interface AuditTree {
  size: number
  lastSeq: number
  checkpointedSize: number | null
}

async function tilesFor(db: Queryable, projectId: string, ranges: readonly LeafRange[]): Promise<Tiles> {
  const keys = tilesForRanges(ranges)
  return (
    (
      await readTiles(
        db,
        keys.map(() => projectId),
        keys,
      )
    ).get(projectId) ?? new Map()
  )
}

/** Hashes of ranges of the first `size` leaves: all read in one statement. */
async function rangeHashes(db: Queryable, projectId: string, ranges: readonly LeafRange[]): Promise<Uint8Array[]> {
  const tiles = await tilesFor(db, projectId, ranges)
  return ranges.map((r) => rangeHash(auditHasher, tiles, r))
}

/** A message of a project: its aggregate's id and its stream sequence. */
export interface MessageAt {
  aggregateId: string
  seq: number
}

export interface ExportProofRange {
  start: number
  end: number
  hash: string
}

/**
 * The projects' Merkle logs (docs/audit.md): leaves, tiles, positions, checkpoints and signing
 * keys, and the queries the audit routes and exports answer from. Every query reads a few tiles,
 * whatever the tree's size.
 */
export const auditLog = readModel(
  {
    name: 'audit_log',
    handles: [
      ...new Set([
        ...feedAggregates.flatMap((a) => feedEventTypes[a]),
        'job_progressed',
        'signing_key_activated',
        'signing_key_retired',
        'leaves_expired',
      ]),
    ],
    tables: ['audit_trees', 'audit_tiles', 'audit_positions', 'audit_checkpoints', 'audit_signing_keys', 'audit_expired_leaves'],
    async apply(tx: Tx, records: readonly EventRecord[]) {
      await applyExpiredLeaves(tx, records)
      await applyLeaves(tx, records)
      await applyCheckpoints(tx, records)
      await applyKeyRows(tx, records)
    },
  },
  {
    tree: async (db: Queryable, projectId: string): Promise<AuditTree | null> => {
      const [row] = await db<{ size: string; last_seq: string; checkpointed_size: string | null }[]>`
        SELECT size, last_seq, checkpointed_size FROM audit_trees WHERE project_id = ${projectId}`
      if (row === undefined) return null
      return {
        size: Number(row.size),
        lastSeq: Number(row.last_seq),
        checkpointedSize: row.checkpointed_size === null ? null : Number(row.checkpointed_size),
      }
    },
    /** MTH of the first `size` leaves (`size` at most the tree's). */
    root: async (db: Queryable, projectId: string, size: number): Promise<string> => toHex((await rangeHashes(db, projectId, [rootRange(size)]))[0]!),
    inclusionPath: async (db: Queryable, projectId: string, leafIndex: number, size: number): Promise<string[]> =>
      (await rangeHashes(db, projectId, inclusionRanges(leafIndex, size))).map(toHex),
    consistencyPath: async (db: Queryable, projectId: string, first: number, second: number): Promise<string[]> =>
      (await rangeHashes(db, projectId, consistencyRanges(first, second))).map(toHex),
    /** The multi-leaf proof of an attested export (sorted, distinct `leaves`, each below `size`). */
    exportProof: async (db: Queryable, projectId: string, leaves: readonly number[], size: number): Promise<ExportProofRange[]> => {
      const ranges = exportProofRanges(leaves, size)
      const hashes = await rangeHashes(db, projectId, ranges)
      return ranges.map((r, i) => ({ start: r.start, end: r.end, hash: toHex(hashes[i]!) }))
    },
    /** The first leaf index of each of the project's messages (its aggregate's id, its sequence), by sequence; a message's events follow it. */
    leafIndexes: async (db: Queryable, projectId: string, messages: readonly MessageAt[]): Promise<Map<number, number>> => {
      if (messages.length === 0) return new Map()
      const rows = await db<{ seq: string; leaf_index: string }[]>`
        SELECT p.seq, p.leaf_index
        FROM unnest(${messages.map((m) => m.aggregateId)}::text[], ${messages.map((m) => m.seq)}::bigint[]) AS w(aggregate_id, seq)
        JOIN audit_positions p ON p.project_id = ${projectId} AND p.aggregate_id = w.aggregate_id AND p.seq = w.seq`
      return new Map(rows.map((r) => [Number(r.seq), Number(r.leaf_index)]))
    },
    /** Checkpoints issued in `[from, until)`, oldest first, at most `limit`, after tree size `afterSize`. */
    checkpoints: async (
      db: Queryable,
      projectId: string,
      from: string | null,
      until: string | null,
      afterSize: number,
      limit: number,
    ): Promise<Checkpoint[]> => {
      const rows = await db<(Checkpoint & { tree_size: string })[]>`
        SELECT project_id, tree_size, root_hash, issued_at, key_id, signature FROM audit_checkpoints
        WHERE project_id = ${projectId} AND tree_size > ${afterSize}
          AND (${from}::text IS NULL OR issued_at >= ${from}) AND (${until}::text IS NULL OR issued_at < ${until})
        ORDER BY tree_size LIMIT ${limit}`
      return rows.map((r) => ({ ...r, tree_size: Number(r.tree_size) }))
    },
    latestCheckpoint: async (db: Queryable, projectId: string): Promise<Checkpoint | null> => {
      const [row] = await db<(Checkpoint & { tree_size: string })[]>`
        SELECT project_id, tree_size, root_hash, issued_at, key_id, signature FROM audit_checkpoints
        WHERE project_id = ${projectId} ORDER BY tree_size DESC LIMIT 1`
      return row === undefined ? null : { ...row, tree_size: Number(row.tree_size) }
    },
    /** Projects after `afterProject` whose tree grew by more than their newest checkpoint's own leaf (the hourly pass), at most `limit`. */
    uncheckpointed: async (db: Queryable, afterProject: string, limit: number): Promise<string[]> =>
      (
        await db<{ project_id: string }[]>`
          SELECT project_id FROM audit_trees
          WHERE project_id > ${afterProject} AND (checkpointed_size IS NULL OR size > checkpointed_size + 1)
          ORDER BY project_id LIMIT ${limit}`
      ).map((r) => r.project_id),
    /**
     * The leaves of these aggregates' messages (a job's and its progress reports'), as runs of
     * consecutive leaves with their hashes, in records of at most `maxLeavesPerRecord`: what
     * retention records before it removes the messages.
     */
    expiringLeaves: async (db: Queryable, projectId: string, aggregateIds: readonly string[]): Promise<ExpiredLeafRun[][]> => {
      if (aggregateIds.length === 0) return []
      const messages = await db<{ leaf_index: string; events: number }[]>`
        SELECT leaf_index, events FROM audit_positions WHERE project_id = ${projectId} AND aggregate_id = ANY(${aggregateIds as string[]})
        ORDER BY leaf_index`
      const indices = messages.flatMap((m) => Array.from({ length: m.events }, (_, i) => Number(m.leaf_index) + i))
      const keys = [...new Set(indices.map((i) => Math.floor(i / tileWidth)))].map((index) => ({ level: 0, index }))
      const tiles =
        (
          await readTiles(
            db,
            keys.map(() => projectId),
            keys,
          )
        ).get(projectId) ?? new Map()
      const records: ExpiredLeafRun[][] = []
      let record: ExpiredLeafRun[] = []
      let inRecord = 0
      let run: { from: number; hashes: Uint8Array[] } | null = null
      const closeRun = () => {
        if (run !== null) record.push({ from: run.from, hashes: Buffer.concat(run.hashes).toString('base64') })
        run = null
      }
      for (const index of indices) {
        const hash = tiles.get(tileName({ level: 0, index: Math.floor(index / tileWidth) }))?.[index % tileWidth]
        if (hash === undefined) continue
        if (inRecord === maxLeavesPerRecord) {
          closeRun()
          records.push(record)
          record = []
          inRecord = 0
        }
        if (run === null || run.from + run.hashes.length !== index) {
          closeRun()
          run = { from: index, hashes: [] }
        }
        run.hashes.push(hash)
        inRecord++
      }
      closeRun()
      if (record.length > 0) records.push(record)
      return records
    },
    /** Keeps retention's records of expired leaves from these messages (a rebuild reads them first, `restoreExpiredLeaves`). */
    keepExpiredLeaves: (db: Tx, records: readonly EventRecord[]): Promise<void> => applyExpiredLeaves(db, records),
    /** Forgets where these aggregates' messages were (retention removed them; their leaves stay in the tree). */
    forgetPositions: async (db: Queryable, projectId: string, aggregateIds: readonly string[]): Promise<void> => {
      if (aggregateIds.length > 0)
        await db`DELETE FROM audit_positions WHERE project_id = ${projectId} AND aggregate_id = ANY(${aggregateIds as string[]})`
    },
    keys: async (db: Queryable): Promise<AuditSigningKey[]> =>
      db<AuditSigningKey[]>`SELECT key_id, algorithm, public_key, valid_from, valid_until FROM audit_signing_keys ORDER BY valid_from, key_id`,
  },
)
