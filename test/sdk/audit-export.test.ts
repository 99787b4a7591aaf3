import { randomBytes } from 'node:crypto'
import { AuditVerificationError, leafHash, verifyExport, type AuditFailureCode, type LeafObject } from '@jobsvc/sdk'
import t, { type Test } from 'tap'
import { auditLogExport, copy, leafEvent, logOf, ndjson, projectLog, signCheckpoint, signingKey, signManifest } from './audit-support.ts'

// verifyExport (docs/audit.md, "Attested exports") on exports written as the service writes them,
// then tampered with as someone holding the file, or a log that lost or rewrote events, would.

// Key A signed until the rotation on July 1st, key B since: both stay listed.
const rotation = '2026-07-01T00:00:00.000Z'
const keyA = signingKey('2026-01-01T00:00:00.000Z', rotation)
const keyB = signingKey(rotation, null)
const keys = { data: [keyA.entry, keyB.entry] }

const log = projectLog(120)
const checkpointAt = (size: number, key = keyB, issued_at = '2026-11-26T23:00:00.000Z', tree = log.tree) =>
  signCheckpoint(key, { tree_size: size, root_hash: tree.root(size), issued_at })
const exported = [3, 17, 18, 40, 41, 42, 100, 119]
const intact = auditLogExport({ key: keyB, ...log, exported, checkpoint: checkpointAt(120), unattested: 2 })

async function refuses(t: Test, verifying: Promise<unknown>, code: AuditFailureCode, message: RegExp) {
  const error = await verifying.then(
    () => null,
    (e: unknown) => e,
  )
  t.type(error, AuditVerificationError, 'refused')
  t.equal((error as AuditVerificationError).code, code, (error as Error).message)
  t.match((error as Error).message, message)
}

/** The export with line `i` (0-based, among those before the manifest) changed by `change`. */
function withLine(i: number, change: (line: Record<string, any>) => void, e = intact) {
  const lines = copy(e.lines)
  change(lines[i]!)
  return ndjson(lines, e.manifest)
}

t.test('an intact export verifies, as text, as lines, or as an async iterable of lines', async (t) => {
  const text = ndjson(intact.lines, intact.manifest)
  const result = await verifyExport(text, keys)
  t.match(result, {
    projectId: 'prj_audit',
    kind: 'audit_log',
    from: '2026-06-01T00:00:00.000Z',
    lines: 10,
    leaves: 8,
    unattestedLines: 2,
    stored: null,
    checkpoint: { tree_size: 120 },
    key: { key_id: keyB.entry.key_id },
  })
  t.same(await verifyExport(text.replaceAll('\n', '\r\n').split('\n'), keys), result, 'CRLF lines in an array')
  async function* arriving() {
    for (const line of text.split('\n')) yield line
  }
  t.same(await verifyExport(arriving(), keys), result, 'lines as they arrive')
  const none = auditLogExport({ key: keyB, ...log, exported: [], checkpoint: checkpointAt(120) })
  t.match(await verifyExport(ndjson(none.lines, none.manifest), keys), { lines: 0, leaves: 0 }, 'an export of no line: the proof is the root')
})

t.test('an altered event is refused', async (t) => {
  const altered = withLine(4, (line) => (line.leaf.data.payload.to = 'mallory@example.com'))
  await refuses(
    t,
    verifyExport(altered, keys),
    'root_mismatch',
    /^the exported leaves and the proof lead to root \S+, not the checkpoint's \S+: an exported event was altered/,
  )
  const moved = withLine(4, (line) => (line.leaf_index = 43))
  await refuses(
    t,
    verifyExport(moved, keys),
    'leaves_mismatch',
    /^leaf 18 is listed in the manifest but no line of the export carries it: a line was deleted, or its leaf_index changed$/,
  )
  const twice = withLine(5, (line) => (line.leaf_index = 17))
  await refuses(t, verifyExport(twice, keys), 'leaf_conflict', /^lines 4 and 6 both name leaf 17, with different events$/)
  const renamed = withLine(0, (line) => (line.leaf.cursor = 'c1'))
  await t.resolves(verifyExport(renamed, keys), 'a feed member beside the leaf is not hashed (the leaf object leaves it out)')
  const foreign = withLine(0, (line) => (line.leaf.note = 'x'))
  await refuses(t, verifyExport(foreign, keys), 'malformed', /line 1's leaf has note, which no leaf object has/)
})

t.test('a deleted event is refused: the line alone, or with the manifest fixed up', async (t) => {
  const lines = intact.lines.filter((l) => l.leaf_index !== 40)
  await refuses(
    t,
    verifyExport(ndjson(lines, intact.manifest), keys),
    'lines_mismatch',
    /^the manifest counts 10 lines, the export has 9: lines were deleted or added$/,
  )
  // Someone who edits the manifest too (its count, leaves and proof) breaks its signature...
  const { signature: _s, ...unsigned } = intact.manifest
  const fixed = {
    ...unsigned,
    lines: 9,
    leaves: exported.filter((i) => i !== 40),
    proof: log.tree.rangeProof(
      120,
      exported.filter((i) => i !== 40),
    ),
  }
  await refuses(
    t,
    verifyExport(ndjson(lines, { ...fixed, signature: intact.manifest.signature }), keys),
    'invalid_signature',
    /^the manifest's signature does not verify with key/,
  )
  // ...and, signed again by the key, without the line of leaf 40 in it: each step names the gap.
  const signedAgain = (m: Record<string, unknown>) => signManifest(keyB, m)
  await refuses(
    t,
    verifyExport(ndjson(lines, signedAgain({ ...unsigned, lines: 9 })), keys),
    'leaves_mismatch',
    /^leaf 40 is listed in the manifest but no line of the export carries it: a line was deleted, or its leaf_index changed$/,
  )
  await refuses(
    t,
    verifyExport(ndjson(lines, signedAgain({ ...unsigned, lines: 9, leaves: exported.filter((i) => i !== 40) })), keys),
    'leaf_not_covered',
    /^leaf 40 is neither in the export nor covered by the proof$/,
  )
  const unattested = intact.lines.filter((l) => l.leaf_index !== null || l.id !== 'act_account_0')
  await refuses(t, verifyExport(ndjson(unattested, intact.manifest), keys), 'lines_mismatch', /counts 10 lines, the export has 9/)
})

t.test('an export cut short, or with lines after its manifest, is refused', async (t) => {
  await refuses(t, verifyExport(ndjson(intact.lines), keys), 'no_manifest', /^the export has no manifest line: it was cut short/)
  await refuses(
    t,
    verifyExport(ndjson([...intact.lines, { manifest: intact.manifest }, intact.lines[0]]), keys),
    'malformed',
    /^line 12 follows the manifest \(line 11\)/,
  )
  await refuses(t, verifyExport(ndjson(intact.lines, intact.manifest) + '{"id":', keys), 'malformed', /^line 12 follows the manifest/)
  await refuses(t, verifyExport('{"id": "act_1"\n', keys), 'malformed', /^line 1 is not JSON$/)
  await refuses(
    t,
    verifyExport(ndjson([{ id: 'act_1', kind: 'job_created' }], intact.manifest), keys),
    'unattested_line',
    /^line 1 carries neither "leaf_index" and "leaf" nor "attestation"/,
  )
})

t.test('the newest events truncated, or the log rewritten, against a checkpoint kept earlier', async (t) => {
  const stored = checkpointAt(120, keyB, '2026-11-20T10:00:00.000Z')
  // The log lost its 20 newest events and signed again: its export, verified on its own, holds.
  const truncated = auditLogExport({ key: keyB, ...log, exported: [3, 17, 50], checkpoint: checkpointAt(100) })
  const text = ndjson(truncated.lines, truncated.manifest)
  await t.resolves(verifyExport(text, keys), 'on its own, a truncated log verifies: only a kept checkpoint tells')
  await refuses(
    t,
    verifyExport(text, keys, { storedCheckpoint: stored }),
    'tree_shrank',
    /^tree shrank from 120 to 100 leaves: the newest events were truncated$/,
  )

  // Event 50 deleted from the middle of the log and the tree built again: a tree of 119, then 120 again.
  const rewritten = logOf([...log.events.slice(0, 50), ...log.events.slice(51), leafEvent(120)])
  const forged = auditLogExport({ key: keyB, ...rewritten, exported: [3, 17], checkpoint: checkpointAt(120, keyB, undefined, rewritten.tree) })
  await refuses(
    t,
    verifyExport(ndjson(forged.lines, forged.manifest), keys, { storedCheckpoint: stored }),
    'root_differs',
    /^both checkpoints claim 120 leaves but their roots differ \(\S+, \S+\): the log was rewritten$/,
  )
  const grown = logOf([...rewritten.events, leafEvent(121), leafEvent(122)])
  const later = auditLogExport({ key: keyB, ...grown, exported: [3], checkpoint: checkpointAt(122, keyB, undefined, grown.tree) })
  await refuses(
    t,
    verifyExport(ndjson(later.lines, later.manifest), keys, {
      storedCheckpoint: stored,
      consistencyProof: { first: 120, second: 122, consistency_path: grown.tree.consistencyPath(120, 122) },
    }),
    'consistency_failed',
    /the newer tree does not extend the older|not the older checkpoint's root/,
  )
})

t.test('a larger tree needs a consistency proof from the kept checkpoint, across a key rotation', async (t) => {
  // Kept in June, signed by key A; the export is of November, signed by key B.
  const stored = checkpointAt(90, keyA, '2026-06-15T08:00:00.000Z')
  const text = ndjson(intact.lines, intact.manifest)
  const proof = { first: 90, second: 120, consistency_path: log.tree.consistencyPath(90, 120) }
  const result = await verifyExport(text, keys, { storedCheckpoint: stored, consistencyProof: proof })
  t.same(result.stored, { treeSize: 90, relation: 'extends' }, 'accepted: the rotated key signed inside its window')
  t.same((await verifyExport(text, keys, { storedCheckpoint: checkpointAt(120, keyB, '2026-11-26T20:00:00.000Z') })).stored, {
    treeSize: 120,
    relation: 'same',
  })
  await refuses(
    t,
    verifyExport(text, keys, { storedCheckpoint: stored }),
    'consistency_proof_needed',
    /^the export's tree \(120 leaves\) is larger than your stored checkpoint's \(90\): give the consistency proof from 90 to 120 \(GET \/jobsvc\/v1\/audit\/proofs\/consistency\?first=90&second=120\)$/,
  )
  const forged = { ...proof, consistency_path: proof.consistency_path.map((h, i) => (i === 1 ? randomBytes(32).toString('hex') : h)) }
  await refuses(
    t,
    verifyExport(text, keys, { storedCheckpoint: stored, consistencyProof: forged }),
    'consistency_failed',
    /does not extend|not the older checkpoint's root/,
  )
  await refuses(
    t,
    verifyExport(text, keys, { storedCheckpoint: stored, consistencyProof: { ...proof, first: 89 } }),
    'consistency_failed',
    /is from 89 to 120 leaves; the checkpoints have 90 and 120/,
  )
  const lateA = checkpointAt(90, keyA, '2026-07-02T00:00:00.000Z')
  await refuses(
    t,
    verifyExport(text, keys, { storedCheckpoint: lateA, consistencyProof: proof }),
    'outside_key_window',
    /^your stored checkpoint was issued at 2026-07-02T00:00:00.000Z, outside the window/,
  )
  const elsewhere = signCheckpoint(keyB, {
    project_id: 'prj_other',
    tree_size: 90,
    root_hash: log.tree.root(90),
    issued_at: '2026-11-01T00:00:00.000Z',
  })
  await refuses(
    t,
    verifyExport(text, keys, { storedCheckpoint: elsewhere, consistencyProof: proof }),
    'project_mismatch',
    /your stored checkpoint is of project prj_other, the export of project prj_audit/,
  )
  await t.rejects(
    verifyExport(text, keys, { consistencyProof: proof }),
    TypeError,
    'a consistency proof without the checkpoint it starts from is a mistake of the caller',
  )
})

t.test("the export's checkpoint and manifest must be signed by a listed key inside its window", async (t) => {
  const stranger = signingKey()
  const unknown = auditLogExport({
    key: keyB,
    ...log,
    exported,
    checkpoint: signCheckpoint(stranger, { tree_size: 120, root_hash: log.tree.root(120) }),
  })
  await refuses(
    t,
    verifyExport(ndjson(unknown.lines, unknown.manifest), keys),
    'unknown_key',
    new RegExp(`^the export's checkpoint is signed by unknown key ${stranger.entry.key_id}`),
  )
  const byStranger = auditLogExport({ key: stranger, ...log, exported, checkpoint: checkpointAt(120) })
  await refuses(t, verifyExport(ndjson(byStranger.lines, byStranger.manifest), keys), 'unknown_key', /^the manifest is signed by unknown key/)
  const stale = auditLogExport({ key: keyB, ...log, exported, checkpoint: checkpointAt(120, keyA, '2026-11-26T23:00:00.000Z') })
  await refuses(
    t,
    verifyExport(ndjson(stale.lines, stale.manifest), keys),
    'outside_key_window',
    /^the export's checkpoint was issued at 2026-11-26T23:00:00.000Z, outside the window \[2026-01-01T00:00:00.000Z, 2026-07-01T00:00:00.000Z\)/,
  )
  const unsigned = copy(intact.manifest)
  delete unsigned.signature
  await refuses(t, verifyExport(ndjson(intact.lines, unsigned), keys), 'malformed', /^the manifest's signature is not 64 bytes in standard base64$/)
  await refuses(
    t,
    verifyExport(ndjson(intact.lines, { ...intact.manifest, version: 2 }), keys),
    'malformed',
    /manifest is of version 2; this verifier reads version 1/,
  )
})

t.test("the manifest's proof and leaves: every refusal the document lists", async (t) => {
  const resigned = (change: (m: Record<string, any>) => void) => {
    const m = copy(intact.manifest)
    change(m)
    return ndjson(intact.lines, signManifest(keyB, m))
  }
  const leaf = (i: number) => leafHash(log.events[i]!).toString('hex')
  await refuses(
    t,
    verifyExport(
      resigned((m) => m.proof.push({ start: 17, end: 18, hash: leaf(17) })),
      keys,
    ),
    'invalid_proof_range',
    /proof range \[17, 18\) holds exported leaf 17: it would hide that leaf/,
  )
  await refuses(
    t,
    verifyExport(
      resigned((m) => m.proof.push({ start: 5, end: 7, hash: log.tree.hash(5, 7).toString('hex') })),
      keys,
    ),
    'invalid_proof_range',
    /\[5, 7\) is never visited by the recursion/,
  )
  await refuses(
    t,
    verifyExport(
      resigned((m) => m.proof.splice(0, 1)),
      keys,
    ),
    'leaf_not_covered',
    /^leaf 0 is neither in the export nor covered by the proof$/,
  )
  await refuses(
    t,
    verifyExport(
      resigned((m) => (m.leaves = [3, 17, 17, 18])),
      keys,
    ),
    'malformed',
    /leaves are not in ascending order, each once/,
  )
  const beyond = auditLogExport({ key: keyB, ...log, exported: [3, 100], checkpoint: checkpointAt(90) })
  await refuses(
    t,
    verifyExport(ndjson(beyond.lines, beyond.manifest), keys),
    'leaf_out_of_range',
    /^leaf 100 is beyond the checkpoint's tree of 90 leaves$/,
  )
  const other = projectLog(120, 'prj_other')
  const mixed = withLine(0, (line) => (line.leaf = other.events[3]))
  await refuses(t, verifyExport(mixed, keys), 'project_mismatch', /^line 1's leaf belongs to project prj_other, not to the export's prj_audit$/)
})

t.test('a jobs export: each row attests its job_created and its latest event', async (t) => {
  // Job 5 was created at leaf 5 and succeeded at leaf 9; job 7 has only its job_created.
  const events: LeafObject[] = log.events.map((e, i) => (i === 9 ? leafEvent(9, 'prj_audit', 'job_5', 'job_succeeded') : e))
  const jobs = logOf(events)
  const pair = (i: number) => ({ leaf_index: i, leaf: events[i] })
  const rows = [
    { id: 'job_5', state: 'succeeded', attestation: { created: pair(5), latest: pair(9) } },
    { id: 'job_7', state: 'pending', attestation: { created: pair(7), latest: pair(7) } },
  ]
  const manifest = signManifest(keyB, {
    version: 1,
    project_id: 'prj_audit',
    kind: 'jobs',
    from: '2026-06-01T00:00:00.000Z',
    until: '2026-06-02T00:00:00.000Z',
    checkpoint: checkpointAt(120, keyB, undefined, jobs.tree),
    lines: 2,
    leaves: [5, 7, 9],
    proof: jobs.tree.rangeProof(120, [5, 7, 9]),
  })
  t.match(await verifyExport(ndjson(rows, manifest), keys), { kind: 'jobs', lines: 2, leaves: 3, unattestedLines: 0 })
  const swapped = copy(rows)
  swapped[1]!.attestation.created = pair(5)
  await refuses(t, verifyExport(ndjson(swapped, manifest), keys), 'malformed', /^line 2's created leaf is not the job_created of job job_7$/)
  const latestOfOther = copy(rows)
  latestOfOther[1]!.attestation.latest = pair(9)
  await refuses(t, verifyExport(ndjson(latestOfOther, manifest), keys), 'malformed', /^line 2's latest leaf is not an event of job job_7$/)
  await refuses(t, verifyExport(ndjson([...rows, intact.lines[0]], { ...manifest }), keys), 'malformed', /^line 3 is not a line of a jobs export$/)
})
