import { execFile } from 'node:child_process'
import postgres from 'postgres'
import t from 'tap'
import { connectNats } from '../../streams/connection.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { installEnv, isolatedNames, removeIsolated, repoRoot, testSecret } from '../support/harness.ts'

// Issue 26, item 6: a teardown. `cli install remove --confirm NAMESPACE` removes an install's
// streams, buckets and database; without the namespace repeated it removes nothing.

const names = isolatedNames(import.meta.filename)
t.teardown(() => removeIsolated(names))
const env = { ...process.env, ...installEnv({ ...names, secret: testSecret }) }

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) =>
    execFile(
      process.execPath,
      ['--import', 'tsx', 'services/roles/cli.ts', ...args],
      { cwd: repoRoot, env, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  )
}

const nats = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', 'jobsvc-test-install-remove')
t.teardown(() => nats.nc.close())
const streamExists = () =>
  nats.jsm.streams.info(eventsStreamName(names.namespace)).then(
    () => true,
    () => false,
  )
async function databaseExists(): Promise<boolean> {
  const admin = postgres('postgres://postgres@127.0.0.1:5432/postgres', { max: 1, onnotice: () => undefined })
  try {
    return (await admin`SELECT 1 FROM pg_database WHERE datname = ${names.namespace}`).length === 1
  } finally {
    await admin.end()
  }
}

t.test('an install made by the CLI is removed whole, and only with its namespace repeated', async (t) => {
  const created = await cli('project', 'create', '--name', 'doomed')
  t.equal(created.code, 0, created.stderr)
  t.ok((await streamExists()) && (await databaseExists()), 'the project created the streams and the database')

  const refused = await cli('install', 'remove', '--confirm', 'some_other_namespace')
  t.equal(refused.code, 2)
  t.match(refused.stderr, /--confirm must repeat the namespace/)
  t.ok((await streamExists()) && (await databaseExists()), 'a wrong confirmation removes nothing')

  const removed = await cli('install', 'remove', '--confirm', names.namespace)
  t.equal(removed.code, 0, removed.stderr)
  t.same(JSON.parse(removed.stdout), { removed_namespace: names.namespace, dropped_database: names.namespace })
  t.notOk(await streamExists(), 'the streams are gone')
  t.notOk(await databaseExists(), 'the database is gone')
})
