import { createHash } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { appendLeaf, changedTiles, edgeOf, edgeTiles, tileName } from '../../domain/audit-log.ts'
import { auditHasher } from '../../projections/audit-log.ts'
import { openSql, type Sql } from '../../projections/database.ts'
import { percentileMs } from './percentiles.ts'

/**
 * `npm run bench -- --spawn --audit-leaves N`: checkpoints and proofs of a project's Merkle log of
 * N leaves. Appending a million events through the service takes most of an hour here, so the
 * leaves are seeded straight into the spawned service's tiles, after the project's own, by the
 * projector's tree code (domain/audit-log.ts: the same tiles it would have written); the routes
 * then read exactly what a live projector would have left.
 */

/** Leaves appended per transaction while seeding. */
const seedBatch = 65_536
/** Requests timed per proof route. */
const requests = 300

export interface AuditProofsResult {
  audit_leaves: number
  seed_s: number
  checkpoint_ms: number[]
  inclusion_p50_ms: number | null
  inclusion_p99_ms: number | null
  consistency_p50_ms: number | null
  consistency_p99_ms: number | null
}

async function readTiles(sql: Sql, projectId: string, size: number): Promise<Map<string, Uint8Array[]>> {
  const tiles = new Map<string, Uint8Array[]>()
  for (const key of edgeTiles(size).filter((k) => k.length > 0)) {
    const [row] = await sql<
      { hashes: Buffer }[]
    >`SELECT hashes FROM audit_tiles WHERE project_id = ${projectId} AND level = ${key.level} AND idx = ${key.index}`
    const hashes: Uint8Array[] = []
    for (let i = 0; row !== undefined && i < row.hashes.length; i += 32) hashes.push(row.hashes.subarray(i, i + 32))
    tiles.set(tileName(key), hashes)
  }
  return tiles
}

/** Appends `count` leaves to the project's tree, a batch per transaction, as the projector would. */
async function seed(sql: Sql, projectId: string, count: number, log: (line: string) => void): Promise<number> {
  const started = performance.now()
  const [tree] = await sql<{ size: string }[]>`SELECT size FROM audit_trees WHERE project_id = ${projectId}`
  let size = Number(tree?.size ?? 0)
  const target = size + count
  while (size < target) {
    const edge = edgeOf(size, await readTiles(sql, projectId, size))
    for (let i = 0; i < seedBatch && edge.size < target; i++) {
      appendLeaf(auditHasher, edge, auditHasher.leaf(createHash('sha256').update(`bench leaf ${edge.size}`).digest()))
    }
    const tiles = changedTiles(edge)
    await sql.begin(async (tx) => {
      await tx`
        INSERT INTO audit_tiles (project_id, level, idx, hashes)
        SELECT ${projectId}, l, i, decode(h, 'hex')
        FROM unnest(${tiles.map((t) => t.level)}::smallint[], ${tiles.map((t) => t.index)}::bigint[], ${tiles.map((t) => Buffer.concat(t.hashes).toString('hex'))}::text[]) AS w(l, i, h)
        ON CONFLICT (project_id, level, idx) DO UPDATE SET hashes = excluded.hashes`
      await tx`UPDATE audit_trees SET size = ${edge.size} WHERE project_id = ${projectId}`
    })
    size = edge.size
  }
  const seconds = (performance.now() - started) / 1000
  log(`bench: ${count} leaves seeded in ${seconds.toFixed(1)} s (tree of ${target})`)
  return seconds
}

async function timed(url: string, apiKey: string, method: string): Promise<{ ms: number; status: number; body: unknown }> {
  const started = performance.now()
  const res = await fetch(url, { method, headers: { authorization: `Bearer ${apiKey}` } })
  const body = await res.json()
  return { ms: performance.now() - started, status: res.status, body }
}

export async function benchAuditProofs(options: {
  baseUrl: string
  apiKey: string
  projectId: string
  databaseUrl: string
  leaves: number
  log: (line: string) => void
}): Promise<AuditProofsResult> {
  const { baseUrl, apiKey, projectId, log } = options
  const sql = openSql(options.databaseUrl, { max: 1, applicationName: 'jobsvc-bench-audit-seed' })
  let seedSeconds: number
  let size: number
  try {
    // The project's own events first (its creation, its key): the seeded leaves follow them.
    for (let tries = 0; tries < 100; tries++) {
      const [tree] = await sql<{ size: string }[]>`SELECT size FROM audit_trees WHERE project_id = ${projectId}`
      if (tree !== undefined) break
      await new Promise((r) => setTimeout(r, 100))
    }
    seedSeconds = await seed(sql, projectId, options.leaves, log)
    size = Number((await sql<{ size: string }[]>`SELECT size FROM audit_trees WHERE project_id = ${projectId}`)[0]!.size)
  } finally {
    await sql.end()
  }
  const checkpointMs: number[] = []
  for (let i = 0; i < 3; i++) {
    const res = await timed(`${baseUrl}/jobsvc/v1/audit/checkpoints`, apiKey, 'POST')
    if (res.status !== 201 && res.status !== 200) throw new Error(`checkpoint: ${res.status} ${JSON.stringify(res.body)}`)
    checkpointMs.push(Math.round(res.ms * 10) / 10)
  }
  log(`bench: checkpoint over ${size} leaves: ${checkpointMs.join(', ')} ms`)
  // A deterministic spread of leaves and sizes over the whole tree.
  const pick = (i: number, bound: number) => Math.floor((((i * 2654435761) % 4294967296) / 4294967296) * bound)
  const inclusion: number[] = []
  const consistency: number[] = []
  for (let i = 0; i < requests; i++) {
    const treeSize = size - pick(i, 1000)
    const a = await timed(`${baseUrl}/jobsvc/v1/audit/proofs/inclusion?leaf_index=${pick(i + 7, treeSize)}&tree_size=${treeSize}`, apiKey, 'GET')
    if (a.status !== 200) throw new Error(`inclusion: ${a.status} ${JSON.stringify(a.body)}`)
    inclusion.push(a.ms)
    const first = 1 + pick(i + 13, treeSize - 1)
    const b = await timed(`${baseUrl}/jobsvc/v1/audit/proofs/consistency?first=${first}&second=${treeSize}`, apiKey, 'GET')
    if (b.status !== 200) throw new Error(`consistency: ${b.status} ${JSON.stringify(b.body)}`)
    consistency.push(b.ms)
  }
  const result: AuditProofsResult = {
    audit_leaves: size,
    seed_s: Math.round(seedSeconds * 10) / 10,
    checkpoint_ms: checkpointMs,
    inclusion_p50_ms: percentileMs(inclusion, 50),
    inclusion_p99_ms: percentileMs(inclusion, 99),
    consistency_p50_ms: percentileMs(consistency, 50),
    consistency_p99_ms: percentileMs(consistency, 99),
  }
  log(
    `bench: inclusion proof p50 ${result.inclusion_p50_ms} ms, p99 ${result.inclusion_p99_ms} ms; consistency proof p50 ${result.consistency_p50_ms} ms, p99 ${result.consistency_p99_ms} ms (${requests} each, tree of ${size})`,
  )
  return result
}
