import {
  checkSigned,
  fail,
  hashOfLeaf,
  isRecord,
  isUtcMillis,
  manifestMessage,
  toKeys,
  toLeafObject,
  toSignature,
  verifyCheckpoint,
  verifyConsistency,
  verifyMultiInclusion,
  type AuditKey,
  type AuditKeys,
  type Checkpoint,
  type ConsistencyProof,
  type ProofRange,
} from './audit.js'

export interface VerifyExportOptions {
  /** A checkpoint of the same project kept from earlier: the export's tree must extend it. */
  storedCheckpoint?: Checkpoint
  /** From `storedCheckpoint`'s size to the export's (`GET /jobsvc/v1/audit/proofs/consistency`); needed when the export's tree is larger. */
  consistencyProof?: ConsistencyProof
}

/** What a verified export holds. */
export interface ExportVerification {
  projectId: string
  kind: 'audit_log' | 'jobs'
  from: unknown
  until: unknown
  checkpoint: Checkpoint
  key: AuditKey
  /** The export's lines besides the manifest. */
  lines: number
  /** The distinct leaves those lines carry, each proven in the checkpoint's tree. */
  leaves: number
  /** Lines with `"leaf_index": null` (an account event of the audit log, in no project's tree): nothing proves them. */
  unattestedLines: number
  /** How the export's tree relates to `storedCheckpoint`, when one was given. */
  stored: { treeSize: number; relation: 'same' | 'extends' } | null
}

interface Manifest {
  version: 1
  project_id: string
  kind: 'audit_log' | 'jobs'
  from: unknown
  until: unknown
  checkpoint: unknown
  lines: number
  leaves: number[]
  proof: ProofRange[]
  signed_at: string
  key_id: string
  signature: string
}

/**
 * Checks an attested NDJSON export (docs/audit.md, "Attested exports"): every line's leaf, the
 * manifest's checkpoint against `keys`, its multi-leaf proof, and, with `storedCheckpoint`, that the
 * export's tree is that one or extends it (a smaller tree is the newest events truncated; a larger
 * one needs `consistencyProof`). `input` is the whole text, or its lines as they arrive (only the
 * leaves' hashes are kept). Resolves to what was verified, or rejects with {@link AuditVerificationError}.
 */
export async function verifyExport(
  input: string | Iterable<string> | AsyncIterable<string>,
  keys: AuditKeys,
  options: VerifyExportOptions = {},
): Promise<ExportVerification> {
  const { storedCheckpoint, consistencyProof } = options
  if (consistencyProof !== undefined && storedCheckpoint === undefined)
    throw new TypeError('consistencyProof needs the storedCheckpoint it starts from')
  const stored = storedCheckpoint === undefined ? undefined : verifyCheckpoint(storedCheckpoint, keys, 'your stored checkpoint').checkpoint

  const { leaves, projects, styles, manifest, lines, unattestedLines } = await readLines(input)
  if (manifest === undefined) fail('no_manifest', 'the export has no manifest line: it was cut short, or exported without attest=true')
  const m = toManifest(manifest)
  // The signature binds what the export claims to hold (its leaves, its line count, its window):
  // the proof alone shows only that the leaves given are in the tree, not that none was taken out.
  checkSigned(toKeys(keys), { ...m, signedAt: m.signed_at, message: signedBytes(manifest as Record<string, unknown>) }, 'the manifest')
  const otherStyle = m.kind === 'jobs' ? styles.audit_log : styles.jobs
  if (otherStyle) fail('malformed', `line ${otherStyle} is not a line of a ${m.kind} export`)
  if (m.lines !== lines) fail('lines_mismatch', `the manifest counts ${m.lines} lines, the export has ${lines}: lines were deleted or added`)
  const { checkpoint, key } = verifyCheckpoint(m.checkpoint as Checkpoint, keys, "the export's checkpoint")
  if (checkpoint.project_id !== m.project_id) {
    fail('project_mismatch', `the manifest is of project ${m.project_id}, its checkpoint of project ${checkpoint.project_id}`)
  }
  for (const [project, line] of projects) {
    if (project !== m.project_id) fail('project_mismatch', `line ${line}'s leaf belongs to project ${project}, not to the export's ${m.project_id}`)
  }
  for (const index of m.leaves) {
    if (!leaves.has(index))
      fail(
        'leaves_mismatch',
        `leaf ${index} is listed in the manifest but no line of the export carries it: a line was deleted, or its leaf_index changed`,
      )
  }
  const listed = new Set(m.leaves)
  for (const [index, { line }] of leaves) {
    if (!listed.has(index)) fail('leaves_mismatch', `line ${line} names leaf ${index}, which the manifest does not list`)
  }
  verifyMultiInclusion(new Map([...leaves].map(([index, { hash }]) => [index, hash])), m.proof, checkpoint)

  let relation: ExportVerification['stored'] = null
  if (stored !== undefined) {
    if (stored.project_id !== checkpoint.project_id) {
      fail('project_mismatch', `your stored checkpoint is of project ${stored.project_id}, the export of project ${checkpoint.project_id}`)
    }
    if (stored.tree_size > 0 && stored.tree_size < checkpoint.tree_size && consistencyProof === undefined) {
      fail(
        'consistency_proof_needed',
        `the export's tree (${checkpoint.tree_size} leaves) is larger than your stored checkpoint's (${stored.tree_size}): ` +
          `give the consistency proof from ${stored.tree_size} to ${checkpoint.tree_size} (GET /jobsvc/v1/audit/proofs/consistency?first=${stored.tree_size}&second=${checkpoint.tree_size})`,
      )
    }
    // An empty tree is a prefix of every tree: there is nothing to prove, and the service answers no proof from 0.
    if (stored.tree_size > 0) {
      verifyConsistency(stored, checkpoint, consistencyProof ?? { first: stored.tree_size, second: checkpoint.tree_size, consistency_path: [] })
    }
    relation = { treeSize: stored.tree_size, relation: stored.tree_size === checkpoint.tree_size ? 'same' : 'extends' }
  }
  return {
    projectId: m.project_id,
    kind: m.kind,
    from: m.from,
    until: m.until,
    checkpoint,
    key,
    lines,
    leaves: leaves.size,
    unattestedLines,
    stored: relation,
  }
}

interface ExportLines {
  /** Leaf index → its hash and the first line that names it. */
  leaves: Map<number, { hash: Buffer; line: number }>
  /** Each leaf's project → the first line that names it. */
  projects: Map<string, number>
  /** The first line of each kind of export (0: none). */
  styles: { audit_log: number; jobs: number }
  manifest: unknown
  lines: number
  unattestedLines: number
}

/** Reads the lines up to the manifest, keeping only the leaves' hashes. */
async function readLines(input: string | Iterable<string> | AsyncIterable<string>): Promise<ExportLines> {
  const read: ExportLines = {
    leaves: new Map(),
    projects: new Map(),
    styles: { audit_log: 0, jobs: 0 },
    manifest: undefined,
    lines: 0,
    unattestedLines: 0,
  }
  let manifestLine = 0
  let number = 0
  for await (const text of linesOf(input)) {
    number++
    if (text.trim() === '') continue
    if (read.manifest !== undefined) fail('malformed', `line ${number} follows the manifest (line ${manifestLine}), which must be the last line`)
    let row: unknown
    try {
      row = JSON.parse(text)
    } catch {
      fail('malformed', `line ${number} is not JSON`)
    }
    if (!isRecord(row)) fail('malformed', `line ${number} is not a JSON object`)
    const members = Object.keys(row)
    if (members.length === 1 && members[0] === 'manifest') {
      read.manifest = row.manifest ?? null
      manifestLine = number
    } else {
      read.lines++
      readRow(read, row, number)
    }
  }
  return read
}

function readRow(read: ExportLines, row: Record<string, unknown>, line: number) {
  const record = (pair: Record<string, unknown>, what: string) => {
    const index = pair.leaf_index
    if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0)
      fail('malformed', `line ${line}: ${what}leaf_index is not a leaf index`)
    const leaf = toLeafObject(pair.leaf, `line ${line}'s ${what}leaf`)
    const hash = hashOfLeaf(leaf, `line ${line}'s ${what}leaf`)
    const seen = read.leaves.get(index)
    if (seen !== undefined && !seen.hash.equals(hash))
      fail('leaf_conflict', `lines ${seen.line} and ${line} both name leaf ${index}, with different events`)
    if (seen === undefined) read.leaves.set(index, { hash, line })
    if (!read.projects.has(leaf.project_id)) read.projects.set(leaf.project_id, line)
    return leaf
  }
  if ('attestation' in row) {
    read.styles.jobs ||= line
    const attestation = row.attestation
    if (!isRecord(attestation) || !isRecord(attestation.created) || !isRecord(attestation.latest)) {
      fail('malformed', `line ${line}'s attestation is not {"created": {leaf_index, leaf}, "latest": {leaf_index, leaf}}`)
    }
    const created = record(attestation.created, 'created ')
    const latest = record(attestation.latest, 'latest ')
    // The proof covers the leaves; these tie them to the row they stand beside.
    if (created.type !== 'job_created' || created.aggregate_id !== row.id) {
      fail('malformed', `line ${line}'s created leaf is not the job_created of job ${String(row.id)}`)
    }
    if (latest.aggregate_id !== row.id) fail('malformed', `line ${line}'s latest leaf is not an event of job ${String(row.id)}`)
  } else if ('leaf_index' in row && 'leaf' in row) {
    read.styles.audit_log ||= line
    if (row.leaf_index === null && row.leaf === null) read.unattestedLines++
    else record(row, '')
  } else {
    fail('unattested_line', `line ${line} carries neither "leaf_index" and "leaf" nor "attestation": it is not a line of an attested export`)
  }
}

function toManifest(value: unknown): Manifest {
  if (!isRecord(value)) fail('malformed', 'the manifest is not a JSON object')
  const { version, project_id, kind, lines, leaves, proof, signed_at } = value
  if (version !== 1) fail('malformed', `the manifest is of version ${JSON.stringify(version)}; this verifier reads version 1`)
  if (typeof project_id !== 'string' || project_id === '') fail('malformed', "the manifest's project_id is not a project id")
  if (kind !== 'audit_log' && kind !== 'jobs') fail('malformed', `the manifest's kind is ${JSON.stringify(kind)}, neither "audit_log" nor "jobs"`)
  if (!Array.isArray(leaves)) fail('malformed', "the manifest's leaves is not an array")
  leaves.forEach((leaf: unknown, i) => {
    if (typeof leaf !== 'number' || !Number.isSafeInteger(leaf) || leaf < 0) fail('malformed', `the manifest's leaves[${i}] is not a leaf index`)
    if (i > 0 && leaf <= leaves[i - 1]) fail('malformed', "the manifest's leaves are not in ascending order, each once")
  })
  if (!Array.isArray(proof)) fail('malformed', "the manifest's proof is not an array")
  if (typeof lines !== 'number' || !Number.isSafeInteger(lines) || lines < 0) fail('malformed', "the manifest's lines is not a count of lines")
  if (!isUtcMillis(signed_at)) fail('malformed', "the manifest's signed_at is not an RFC 3339 UTC time with milliseconds")
  const { key_id, signature } = toSignature(value, 'the manifest')
  return {
    version,
    project_id,
    kind,
    from: value.from,
    until: value.until,
    checkpoint: value.checkpoint,
    lines,
    leaves,
    proof,
    signed_at,
    key_id,
    signature,
  }
}

function signedBytes(manifest: Record<string, unknown>): Buffer {
  try {
    return manifestMessage(manifest)
  } catch (error) {
    if (error instanceof TypeError) fail('malformed', `the manifest has no canonical JSON form: ${error.message}`)
    throw error
  }
}

async function* linesOf(input: string | Iterable<string> | AsyncIterable<string>): AsyncGenerator<string> {
  if (typeof input === 'string') {
    yield* input.split('\n').map((line) => line.replace(/\r$/, ''))
    return
  }
  for await (const line of input) yield line.replace(/\r$/, '')
}
