import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { auditLogExport, ndjson, projectLog, signCheckpoint, signingKey } from './audit-support.ts'

// `jobsvc-verify` end to end: the built bin of @jobsvc/sdk run with plain node on files in a temp
// folder, with an environment that holds nothing but PATH (no credentials, no service to reach).

const sdkRoot = join(dirname(fileURLToPath(import.meta.resolve('@jobsvc/sdk'))), '..')
const manifest = JSON.parse(await readFile(join(sdkRoot, 'package.json'), 'utf8')) as { bin: Record<string, string> }
const bin = join(sdkRoot, manifest.bin['jobsvc-verify']!)
const dir = await mkdtemp(join(tmpdir(), 'jobsvc-verify-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))

interface Run {
  code: number
  stdout: string
  stderr: string
}
function verify(...args: string[]): Promise<Run> {
  return new Promise((resolve) =>
    execFile(process.execPath, [bin, ...args], { cwd: dir, env: { PATH: process.env.PATH! }, timeout: 30_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code) : 0, stdout, stderr }),
    ),
  )
}
async function write(name: string, value: unknown): Promise<string> {
  await writeFile(join(dir, name), typeof value === 'string' ? value : JSON.stringify(value, null, 2))
  return name
}

const keyA = signingKey('2026-01-01T00:00:00.000Z', '2026-07-01T00:00:00.000Z')
const keyB = signingKey('2026-07-01T00:00:00.000Z', null)
const log = projectLog(150)
const checkpoint = (size: number, key = keyB, issued_at = '2026-11-26T23:00:00.000Z') =>
  signCheckpoint(key, { tree_size: size, root_hash: log.tree.root(size), issued_at })
await write('keys.json', { data: [keyA.entry, keyB.entry] })
await write('cp-120.json', checkpoint(120))
await write('cp-90-old-key.json', checkpoint(90, keyA, '2026-06-15T08:00:00.000Z'))
await write('cp-150.json', checkpoint(150))

t.test('the bin is dist/verify-cli.js, a node script', async (t) => {
  t.equal(manifest.bin['jobsvc-verify'], './dist/verify-cli.js')
  t.match(await readFile(bin, 'utf8'), /^#!\/usr\/bin\/env node\n/)
})

t.test('it imports nothing that reaches a network', async (t) => {
  // The modules it loads, followed from the bin: only node:crypto, node:fs, node:readline and node:util.
  const seen = new Set<string>()
  const builtins = new Set<string>()
  const follow = async (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    for (const [, spec] of (await readFile(file, 'utf8')).matchAll(/^(?:import|export)[^'"]*from '([^']+)'/gm)) {
      if (spec!.startsWith('.')) await follow(join(dirname(file), spec!))
      else builtins.add(spec!)
    }
  }
  await follow(bin)
  t.same([...builtins].sort(), ['node:crypto', 'node:fs', 'node:fs/promises', 'node:readline', 'node:util'])
})

t.test('checkpoint', async (t) => {
  const ok = await verify('checkpoint', 'cp-120.json', '--keys', 'keys.json')
  t.equal(ok.code, 0, ok.stdout + ok.stderr)
  t.match(
    ok.stdout,
    new RegExp(
      `^OK: checkpoint of prj_audit: 120 leaves, root ${log.tree.root(120)}, issued 2026-11-26T23:00:00.000Z, signed by key ${keyB.entry.key_id}\\n$`,
    ),
  )
  const stranger = signingKey()
  const unknown = await verify(
    'checkpoint',
    await write('stranger.json', signCheckpoint(stranger, { tree_size: 3, root_hash: log.tree.root(3) })),
    '--keys',
    'keys.json',
  )
  t.equal(unknown.code, 1)
  t.match(unknown.stdout, new RegExp(`^FAILED: the checkpoint is signed by unknown key ${stranger.entry.key_id} \\(the keys document lists`))
  const late = await verify('checkpoint', await write('late.json', checkpoint(120, keyA)), '--keys', 'keys.json')
  t.equal(late.code, 1)
  t.match(
    late.stdout,
    /^FAILED: the checkpoint was issued at 2026-11-26T23:00:00.000Z, outside the window \[2026-01-01T00:00:00.000Z, 2026-07-01T00:00:00.000Z\)/,
  )
  const notJson = await verify('checkpoint', await write('broken.json', '{"tree_size": '), '--keys', 'keys.json')
  t.same([notJson.code, notJson.stdout], [1, 'FAILED: broken.json is not JSON\n'])
})

t.test('inclusion, with a leaf object or a feed event saved whole', async (t) => {
  const proof = await write('incl.json', { leaf_index: 42, tree_size: 120, inclusion_path: log.tree.inclusionPath(42, 120) })
  const ok = await verify('inclusion', await write('leaf.json', log.events[42]), proof, 'cp-120.json', '--keys', 'keys.json')
  t.equal(ok.code, 0, ok.stdout)
  t.match(
    ok.stdout,
    /^OK: leaf 42 \(evt_0+42, job_created\) is in the tree of 120 leaves of prj_audit, issued 2026-11-26T23:00:00.000Z, signed by key/,
  )
  const event = { ...log.events[42], cursor: 'c42', state: { state: 'pending' }, leaf_index: 42 }
  t.equal((await verify('inclusion', await write('event.json', event), proof, 'cp-120.json', '--keys', 'keys.json')).code, 0, 'a feed event')
  const wrongIndex = await verify(
    'inclusion',
    await write('event-43.json', { ...event, leaf_index: 43 }),
    proof,
    'cp-120.json',
    '--keys',
    'keys.json',
  )
  t.same([wrongIndex.code, wrongIndex.stdout], [1, 'FAILED: the event in event-43.json is leaf 43, the proof is for leaf 42\n'])
  const altered = await verify(
    'inclusion',
    await write('altered.json', { ...log.events[42], type: 'job_cancelled' }),
    proof,
    'cp-120.json',
    '--keys',
    'keys.json',
  )
  t.equal(altered.code, 1)
  t.match(altered.stdout, /^FAILED: the leaf and its inclusion path lead to root \S+, not the checkpoint's \S+: the leaf is not at index 42\n$/)
})

t.test('consistency, across a key rotation', async (t) => {
  const proof = await write('cons.json', { first: 90, second: 120, consistency_path: log.tree.consistencyPath(90, 120) })
  const ok = await verify('consistency', 'cp-90-old-key.json', 'cp-120.json', proof, '--keys', 'keys.json')
  t.equal(ok.code, 0, ok.stdout)
  t.equal(
    ok.stdout,
    'OK: the tree of 120 leaves of prj_audit (issued 2026-11-26T23:00:00.000Z) extends its tree of 90 leaves (issued 2026-06-15T08:00:00.000Z)\n',
  )
  const shrank = await verify('consistency', 'cp-120.json', 'cp-90-old-key.json', proof, '--keys', 'keys.json')
  t.same([shrank.code, shrank.stdout], [1, 'FAILED: tree shrank from 120 to 90 leaves: the newest events were truncated\n'])
  const forged = await write('forged.json', { first: 120, second: 120, consistency_path: [] })
  const rewritten = await write(
    'cp-120-rewritten.json',
    signCheckpoint(keyB, { tree_size: 120, root_hash: log.tree.root(121), issued_at: '2026-11-27T00:00:00.000Z' }),
  )
  const differs = await verify('consistency', 'cp-120.json', rewritten, forged, '--keys', 'keys.json')
  t.equal(differs.code, 1)
  t.match(differs.stdout, /^FAILED: both checkpoints claim 120 leaves but their roots differ/)
})

t.test('export, alone and against a checkpoint kept earlier', async (t) => {
  const e = auditLogExport({ key: keyB, ...log, exported: [1, 2, 60, 119], checkpoint: checkpoint(120), unattested: 1 })
  const file = await write('export.ndjson', ndjson(e.lines, e.manifest))
  const ok = await verify('export', file, '--keys', 'keys.json')
  t.equal(ok.code, 0, ok.stdout)
  t.equal(
    ok.stdout,
    `OK: 5 lines of the audit_log export of prj_audit (from 2026-06-01T00:00:00.000Z until 2026-06-02T00:00:00.000Z); 4 leaves proven in its tree of 120 leaves, issued 2026-11-26T23:00:00.000Z, signed by key ${keyB.entry.key_id}; 1 line carries no event of the tree (account events) and is not proven\n`,
  )
  const cons = await write('cons-90.json', { first: 90, second: 120, consistency_path: log.tree.consistencyPath(90, 120) })
  const extends_ = await verify('export', file, '--keys', 'keys.json', '--checkpoint', 'cp-90-old-key.json', '--consistency', cons)
  t.equal(extends_.code, 0, extends_.stdout)
  t.match(extends_.stdout, /; extends your stored checkpoint of 90 leaves\n$/)
  const truncated = await verify('export', file, '--keys', 'keys.json', '--checkpoint', 'cp-150.json')
  t.same([truncated.code, truncated.stdout], [1, 'FAILED: tree shrank from 150 to 120 leaves: the newest events were truncated\n'])
  const lines = e.lines.map((l) => (l.leaf_index === 60 ? { ...l, leaf: { ...log.events[60], type: 'job_cancelled' } } : l))
  const altered = await verify('export', await write('altered.ndjson', ndjson(lines, e.manifest)), '--keys', 'keys.json')
  t.equal(altered.code, 1)
  t.match(altered.stdout, /^FAILED: the exported leaves and the proof lead to root \S+, not the checkpoint's \S+: an exported event was altered/)
  const cut = await verify('export', await write('cut.ndjson', ndjson(e.lines)), '--keys', 'keys.json')
  t.match(cut, { code: 1, stdout: /^FAILED: the export has no manifest line/ })
})

t.test("the SDK README's verifyExport example, run as written on the files it names", async (t) => {
  const readme = await readFile(join(sdkRoot, 'README.md'), 'utf8')
  const example = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!).find((code) => code.includes('verifyExport('))!
  // Beside the SDK, so that `@jobsvc/sdk` resolves as in a project that installed it; run in the temp folder.
  const script = join(sdkRoot, '..', '.readme-audit-example.ts')
  await writeFile(script, example)
  t.teardown(() => rm(script, { force: true }))
  const e = auditLogExport({ key: keyB, ...log, exported: [5, 6, 7], checkpoint: checkpoint(120) })
  await write('audit-log.ndjson', ndjson(e.lines, e.manifest))
  await write('kept-checkpoint.json', checkpoint(90, keyA, '2026-06-15T08:00:00.000Z'))
  await write('consistency-proof.json', { first: 90, second: 120, consistency_path: log.tree.consistencyPath(90, 120) })
  const run = (): Promise<Run> =>
    new Promise((resolve) =>
      execFile(
        process.execPath,
        ['--import', import.meta.resolve('tsx'), script],
        { cwd: dir, env: { PATH: process.env.PATH! } },
        (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code) : 0, stdout, stderr }),
      ),
    )
  t.match(await run(), { code: 0, stdout: '3 events proven in the tree of 120 leaves\n' })
  await write('consistency-proof.json', { first: 90, second: 120, consistency_path: log.tree.consistencyPath(90, 120).slice(1) })
  t.match(await run(), { code: 1, stdout: /^refused \(consistency_failed\): the consistency path has/ })
})

t.test('usage errors exit 2 and say what is wrong on standard error', async (t) => {
  for (const [args, reason] of [
    [[], /no command given/],
    [['verify', 'cp-120.json', '--keys', 'keys.json'], /unknown command verify/],
    [['checkpoint', 'cp-120.json'], /--keys <keys.json> is required/],
    [['inclusion', 'cp-120.json', '--keys', 'keys.json'], /inclusion takes 3 files, not 1/],
    [['checkpoint', 'missing.json', '--keys', 'keys.json'], /cannot read missing.json/],
    [
      ['checkpoint', 'cp-120.json', '--keys', 'keys.json', '--checkpoint', 'cp-120.json'],
      /--checkpoint and --consistency belong to the export command/,
    ],
    [['export', 'x.ndjson', '--keys', 'keys.json', '--consistency', 'cons.json'], /--consistency needs --checkpoint/],
    [['checkpoint', 'cp-120.json', '--keys', 'keys.json', '--verbose'], /Unknown option '--verbose'/],
  ] as const) {
    const run = await verify(...args)
    t.equal(run.code, 2, args.join(' '))
    t.equal(run.stdout, '')
    t.match(run.stderr, reason)
    t.match(run.stderr, /usage: jobsvc-verify checkpoint <checkpoint.json> --keys <keys.json>/)
  }
  const help = await verify('--help')
  t.equal(help.code, 0)
  t.match(help.stdout, /^usage: jobsvc-verify checkpoint/)
})
