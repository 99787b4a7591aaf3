import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { startHarness } from '../support/harness.ts'
import { freePort } from './support.ts'

// The Python SDK's own tests (python3 -m unittest, standard library only) against a real service
// started here: the address, a key and a port the dispatcher may deliver webhooks to go in the
// environment. The heartbeat module waits out a 30 s timeout and the named consumers' a 5 s lease,
// so they run beside the others. The replay test counts every job.created of a time range, so it
// gets a project of its own, where the other process creates no job meanwhile; so does the audit
// client's, whose checkpoints and attested export hold only its own work.
const receiverPort = await freePort()
const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler', 'dispatcher'],
  tunables: { reaper_grace_ms: 1_000 },
  config: { webhookAllowHosts: [`127.0.0.1:${receiverPort}`] },
})
const replayProject = await h.newProject()
const auditProject = await h.newProject()
const sdkDir = fileURLToPath(new URL('../../sdk/python/', import.meta.url))

function unittest(modules: string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      'python3',
      ['-m', 'unittest', '-v', ...modules],
      {
        cwd: sdkDir,
        env: {
          ...process.env,
          JOBSVC_URL: h.url,
          JOBSVC_API_KEY: h.apiKey,
          JOBSVC_REPLAY_API_KEY: replayProject.apiKey,
          JOBSVC_AUDIT_API_KEY: auditProject.apiKey,
          JOBSVC_TEST_RECEIVER_PORT: String(receiverPort),
          PYTHONDONTWRITEBYTECODE: '1',
        },
        timeout: 120_000,
      },
      (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    )
  })
}

const runs = {
  'client, event feed, worker, webhook verification, replay and the audit client': unittest([
    'tests.test_client',
    'tests.test_events',
    'tests.test_worker',
    'tests.test_cancel',
    'tests.test_bulk',
    'tests.test_webhook',
    'tests.test_replay',
    'tests.test_audit_client',
    'tests.test_outage',
    'tests.test_typing',
  ]),
  'heartbeats and named consumers': unittest(['tests.test_heartbeat', 'tests.test_consumers']),
  // Offline: the audit-log verifier needs no service, only files (and node, to compare with).
  'audit-log verifier': unittest(['tests.test_audit']),
}

for (const [name, run] of Object.entries(runs)) {
  t.test(`python3 -m unittest: ${name}`, async (t) => {
    const { code, output } = await run
    const ran = Number(/Ran (\d+) tests?/.exec(output)?.[1] ?? 0)
    t.equal(code, 0, `the Python tests passed${code === 0 ? '' : `:\n${output}`}`)
    t.ok(ran > 0, `${ran} Python tests ran`)
    t.notMatch(output, /skipped/, 'none was skipped')
  })
}
