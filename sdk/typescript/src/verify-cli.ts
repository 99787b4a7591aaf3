#!/usr/bin/env node
import { createReadStream } from 'node:fs'
import { access, readFile } from 'node:fs/promises'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { verifyExport } from './audit-export.js'
import {
  AuditVerificationError,
  fail,
  toLeafObject,
  verifyCheckpoint,
  verifyConsistency,
  verifyInclusion,
  type AuditKeys,
  type Checkpoint,
  type ConsistencyProof,
  type InclusionProof,
} from './audit.js'

// `jobsvc-verify`: docs/audit.md's "What the verifiers check", offline. It reads only the files it
// is given (no credentials, no network) and ends with one line: `OK: …` (exit 0) or
// `FAILED: <reason>` (exit 1) on standard output; a wrong invocation is exit 2 on standard error.

const usage = `usage: jobsvc-verify checkpoint <checkpoint.json> --keys <keys.json>
       jobsvc-verify inclusion <leaf.json> <proof.json> <checkpoint.json> --keys <keys.json>
       jobsvc-verify consistency <old.json> <new.json> <proof.json> --keys <keys.json>
       jobsvc-verify export <export.ndjson> --keys <keys.json> [--checkpoint <stored.json> [--consistency <proof.json>]]`

/** A wrong invocation (exit 2); with no message, `--help` (exit 0). */
class UsageError extends Error {}

const arity: Record<string, number> = { checkpoint: 1, inclusion: 3, consistency: 3, export: 1 }

async function run(argv: string[]): Promise<string> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { keys: { type: 'string' }, checkpoint: { type: 'string' }, consistency: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    })
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
  const { values, positionals } = parsed
  const [command, ...files] = positionals
  if (values.help) throw new UsageError('')
  if (command === undefined || !(command in arity)) throw new UsageError(command === undefined ? 'no command given' : `unknown command ${command}`)
  if (files.length !== arity[command])
    throw new UsageError(`${command} takes ${arity[command]} file${arity[command] === 1 ? '' : 's'}, not ${files.length}`)
  if (values.keys === undefined) throw new UsageError('--keys <keys.json> is required (the saved answer of GET /jobsvc/v1/audit/keys)')
  if (command !== 'export' && (values.checkpoint !== undefined || values.consistency !== undefined)) {
    throw new UsageError('--checkpoint and --consistency belong to the export command')
  }
  if (values.consistency !== undefined && values.checkpoint === undefined)
    throw new UsageError('--consistency needs --checkpoint, the checkpoint it starts from')
  for (const file of [values.keys, values.checkpoint, values.consistency, ...files]) {
    if (file !== undefined) await access(file).catch(() => Promise.reject(new UsageError(`cannot read ${file}`)))
  }
  const keys = await readJson<AuditKeys>(values.keys)

  if (command === 'checkpoint') {
    const { checkpoint, key } = verifyCheckpoint(await readJson<Checkpoint>(files[0]!), keys)
    return `checkpoint of ${checkpoint.project_id}: ${checkpoint.tree_size} leaves, root ${checkpoint.root_hash}, ${signedBy(checkpoint, key.key_id)}`
  }
  if (command === 'inclusion') {
    const [leafFile, proofFile, checkpointFile] = files as [string, string, string]
    const event = await readJson<Record<string, unknown>>(leafFile)
    const proof = await readJson<InclusionProof>(proofFile)
    const { checkpoint, key } = verifyCheckpoint(await readJson<Checkpoint>(checkpointFile), keys)
    const leaf = toLeafObject(event, `the leaf in ${leafFile}`)
    // A feed event saved whole carries its own index: it must be the one the proof is for.
    if (event.leaf_index !== undefined && event.leaf_index !== proof.leaf_index) {
      fail('inclusion_failed', `the event in ${leafFile} is leaf ${String(event.leaf_index)}, the proof is for leaf ${String(proof.leaf_index)}`)
    }
    if (leaf.project_id !== checkpoint.project_id)
      fail('project_mismatch', `the leaf is of project ${leaf.project_id}, the checkpoint of ${checkpoint.project_id}`)
    verifyInclusion(leaf, proof, checkpoint)
    return `leaf ${proof.leaf_index} (${leaf.id}, ${leaf.type}) is in the tree of ${checkpoint.tree_size} leaves of ${checkpoint.project_id}, ${signedBy(checkpoint, key.key_id)}`
  }
  if (command === 'consistency') {
    const [oldFile, newFile, proofFile] = files as [string, string, string]
    const older = verifyCheckpoint(await readJson<Checkpoint>(oldFile), keys, 'the older checkpoint').checkpoint
    const newer = verifyCheckpoint(await readJson<Checkpoint>(newFile), keys, 'the newer checkpoint').checkpoint
    if (older.project_id !== newer.project_id)
      fail('project_mismatch', `the checkpoints are of two projects, ${older.project_id} and ${newer.project_id}`)
    verifyConsistency(older, newer, await readJson<ConsistencyProof>(proofFile))
    const how = older.tree_size === newer.tree_size ? 'is the same tree as' : 'extends'
    return `the tree of ${newer.tree_size} leaves of ${newer.project_id} (issued ${newer.issued_at}) ${how} its tree of ${older.tree_size} leaves (issued ${older.issued_at})`
  }
  const options = {
    ...(values.checkpoint !== undefined && { storedCheckpoint: await readJson<Checkpoint>(values.checkpoint) }),
    ...(values.consistency !== undefined && { consistencyProof: await readJson<ConsistencyProof>(values.consistency) }),
  }
  // No await between opening the file and handing its lines over: readline drops the lines it
  // emits before someone iterates them.
  const result = await verifyExport(createInterface({ input: createReadStream(files[0]!, 'utf8'), crlfDelay: Infinity }), keys, options)
  const parts = [
    `${result.lines} lines of the ${result.kind} export of ${result.projectId} (from ${String(result.from)} until ${String(result.until)})`,
    `${result.leaves} leaves proven in its tree of ${result.checkpoint.tree_size} leaves, ${signedBy(result.checkpoint, result.key.key_id)}`,
  ]
  if (result.unattestedLines > 0) {
    const n = result.unattestedLines
    parts.push(`${n} ${n === 1 ? 'line carries' : 'lines carry'} no event of the tree (account events) and ${n === 1 ? 'is' : 'are'} not proven`)
  }
  if (result.stored !== null) {
    parts.push(`${result.stored.relation === 'same' ? 'the same tree as' : 'extends'} your stored checkpoint of ${result.stored.treeSize} leaves`)
  }
  return parts.join('; ')
}

const signedBy = (checkpoint: Checkpoint, keyId: string) => `issued ${checkpoint.issued_at}, signed by key ${keyId}`

async function readJson<T>(file: string): Promise<T> {
  const text = await readFile(file, 'utf8')
  try {
    return JSON.parse(text) as T
  } catch {
    return fail('malformed', `${file} is not JSON`)
  }
}

let answered = false
// Exit 0 only after an OK line: should the run end without a verdict, that is a failure too.
process.on('exit', () => {
  if (answered) return
  process.stdout.write('FAILED: the verifier stopped before reaching a verdict\n')
  process.exitCode = 1
})
try {
  process.stdout.write(`OK: ${await run(process.argv.slice(2))}\n`)
} catch (error) {
  if (error instanceof UsageError && error.message === '') {
    process.stdout.write(`${usage}\n`)
  } else if (error instanceof UsageError) {
    process.stderr.write(`jobsvc-verify: ${error.message}\n${usage}\n`)
    process.exitCode = 2
  } else {
    // Anything else, a bug of this verifier included, is a verification that did not succeed.
    const reason = error instanceof AuditVerificationError ? error.message : `could not verify: ${(error as Error).message ?? String(error)}`
    process.stdout.write(`FAILED: ${reason}\n`)
    process.exitCode = 1
  }
}
answered = true
