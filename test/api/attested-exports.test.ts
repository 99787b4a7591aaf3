import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { httpRequest, repoRoot } from '../support/harness.ts'
import { newVerifiedUser, startPlatformHarness } from '../support/platform.ts'

/**
 * Attested exports (issue 27, docs/audit.md "Attested exports"): the jobs and audit-log exports
 * with `attest=true`, checked by both SDKs' offline verifiers (python3 -m jobsvc.audit and
 * jobsvc-verify, run as a customer would run them, with nothing but the published keys), and
 * refused once edited.
 */
const run = promisify(execFile)
const h = await startPlatformHarness(t, import.meta.filename)
const owner = await newVerifiedUser(h)
const dir = await mkdtemp(join(tmpdir(), 'jobsvc-attest-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))

const asOwner = (method: string, path: string, body?: unknown) => httpRequest(h.url, owner.apiKey, method, path, body)

/** Runs a verifier's command line; the answer of both SDKs' verifiers, which must agree. */
async function runVerifier(command: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string }> {
  try {
    const { stdout } = await run(command, args, { env: { ...process.env, ...env } })
    return { code: 0, out: stdout.trim() }
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string }
    return { code: e.code, out: `${e.stdout}${e.stderr}`.trim() }
  }
}

/** `python -m jobsvc.audit …` and `jobsvc-verify …`: the same exit code, or the answer says which differs. */
async function verify(...args: string[]): Promise<{ code: number; out: string }> {
  const python = await runVerifier('python3', ['-m', 'jobsvc.audit', ...args], { PYTHONPATH: `${repoRoot}sdk/python` })
  const typescript = await runVerifier(process.execPath, [`${repoRoot}sdk/typescript/dist/verify-cli.js`, ...args])
  if (python.code !== typescript.code)
    return { code: -1, out: `the verifiers disagree: python ${python.code} ${python.out}; typescript ${typescript.code} ${typescript.out}` }
  return { code: python.code, out: `python: ${python.out}; typescript: ${typescript.out}` }
}

const from = new Date(Date.now() - 3_600_000).toISOString()
const until = new Date(Date.now() + 3_600_000).toISOString()

// Work: jobs created, some claimed, succeeded or failed, so rows have histories of several events.
for (let i = 0; i < 8; i++) await asOwner('POST', '/jobsvc/v1/jobs', { job_type: 'attest.job', queue: 'attest', payload: { i } })
const polled = await asOwner('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['attest'], capacity: 5, wait_seconds: 0 })
for (const [i, job] of (polled.body.jobs as Array<{ id: string }>).entries()) {
  await asOwner('POST', '/jobsvc/v1/workers/ack', {
    job_id: job.id,
    worker_id: 'w',
    status: i % 2 === 0 ? 'succeeded' : 'failed',
    ...(i % 2 === 0 ? {} : { error: { type: 'E', message: 'no', stack_trace: '' } }),
  })
}
// A checkpoint kept by the customer before the export: the export must extend it.
const stored = await asOwner('POST', '/jobsvc/v1/audit/checkpoints')
if (stored.status !== 201) throw new Error(`checkpoint: ${stored.status} ${JSON.stringify(stored.body)}`)
await writeFile(join(dir, 'stored.json'), JSON.stringify(stored.body))
// Work after it, so the export's checkpoint must be a newer one.
for (let i = 8; i < 10; i++) await asOwner('POST', '/jobsvc/v1/jobs', { job_type: 'attest.job', queue: 'attest', payload: { i } })
await writeFile(join(dir, 'keys.json'), JSON.stringify((await httpRequest(h.url, null, 'GET', '/jobsvc/v1/audit/keys')).body))

const lines = (text: string) => text.split('\n').filter((l) => l !== '')

t.test('an attested jobs export verifies offline, and extends a checkpoint kept earlier', async (t) => {
  const res = await asOwner('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&attest=true`)
  t.equal(res.status, 200)
  const text = typeof res.body === 'string' ? res.body : String(res.body)
  const rows = lines(text)
  t.equal(rows.length, 11, 'ten jobs and the manifest')
  const manifest = JSON.parse(rows.at(-1)!).manifest
  t.equal(manifest.kind, 'jobs')
  t.ok(manifest.checkpoint.tree_size > stored.body.tree_size, 'the manifest is signed over a tree that grew since the kept checkpoint')
  const first = JSON.parse(rows[0]!)
  t.equal(first.attestation.created.leaf.type, 'job_created')
  t.equal(first.attestation.created.leaf.aggregate_id, first.id)
  await writeFile(join(dir, 'jobs.ndjson'), text)
  const consistency = await asOwner(
    'GET',
    `/jobsvc/v1/audit/proofs/consistency?first=${stored.body.tree_size}&second=${manifest.checkpoint.tree_size}`,
  )
  await writeFile(join(dir, 'consistency.json'), JSON.stringify(consistency.body))

  const plain = await verify('export', join(dir, 'jobs.ndjson'), '--keys', join(dir, 'keys.json'))
  t.equal(plain.code, 0, plain.out)
  t.match(plain.out, /^python: OK.*; typescript: OK/)
  const extended = await verify(
    'export',
    join(dir, 'jobs.ndjson'),
    '--keys',
    join(dir, 'keys.json'),
    '--checkpoint',
    join(dir, 'stored.json'),
    '--consistency',
    join(dir, 'consistency.json'),
  )
  t.equal(extended.code, 0, extended.out)

  // One payload edited in a leaf: the verifier refuses the export.
  const edited = rows.map((l, i) => (i === 2 ? l.replace('"payload":{"i":', '"payload":{"i":1') : l))
  const tampered = JSON.parse(edited[2]!)
  tampered.attestation.created.leaf.data.payload = { i: 99 }
  edited[2] = JSON.stringify(tampered)
  await writeFile(join(dir, 'jobs-edited.ndjson'), edited.join('\n') + '\n')
  const refused = await verify('export', join(dir, 'jobs-edited.ndjson'), '--keys', join(dir, 'keys.json'))
  t.equal(refused.code, 1, refused.out)
  t.match(refused.out, /^python: FAILED.*; typescript: FAILED/)
})

t.test('an attested audit-log export gives each row its event and verifies offline', async (t) => {
  const res = await h.platform('GET', `/jobsvc/v1/projects/${owner.projectId}/audit-log/export?from=${from}&until=${until}&attest=true`, undefined, {
    jwt: owner.jwt,
  })
  t.equal(res.status, 200, typeof res.body === 'string' ? res.body.slice(0, 200) : JSON.stringify(res.body))
  const text = typeof res.body === 'string' ? res.body : String(res.body)
  const rows = lines(text)
  t.ok(rows.length >= 2, `${rows.length} lines`)
  for (const line of rows.slice(0, -1)) {
    const row = JSON.parse(line)
    t.equal(row.leaf.id, `evt_${row.id}`, `row ${row.id} carries its own event`)
    t.type(row.leaf_index, 'number')
  }
  await writeFile(join(dir, 'audit.ndjson'), text)
  const ok = await verify('export', join(dir, 'audit.ndjson'), '--keys', join(dir, 'keys.json'))
  t.equal(ok.code, 0, ok.out)
  // The newest line dropped, manifest kept: a leaf the manifest names is missing.
  await writeFile(join(dir, 'audit-cut.ndjson'), [...rows.slice(0, -2), rows.at(-1)].join('\n') + '\n')
  const cut = await verify('export', join(dir, 'audit-cut.ndjson'), '--keys', join(dir, 'keys.json'))
  t.equal(cut.code, 1, cut.out)
})

t.test('attest is JSONL only, true or false, and needs admin on the jobs export', async (t) => {
  const csv = await asOwner('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&attest=true&format=csv`)
  t.equal(csv.status, 400)
  t.equal(csv.body.error.code, 'invalid_format')
  const odd = await asOwner('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&attest=yes`)
  t.equal(odd.status, 400)
  t.equal(odd.body.error.code, 'invalid_request')
})
