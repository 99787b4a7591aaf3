import { readdirSync, readFileSync } from 'node:fs'
import t from 'tap'
import { ConfigError, loadConfig } from '../../services/infrastructure/config.ts'
import {
  assertWritesGuarded,
  exactExpectationsSince,
  isVersionBefore,
  needsWriteLocks,
  UnguardedWrites,
  WriteGuard,
} from '../../services/infrastructure/write-guard.ts'
import { connectNats } from '../../streams/connection.ts'
import { ensureStreams, openHeartbeatBucket, StreamSettingsMismatch } from '../../streams/definitions.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { isolatedNames, removeIsolated, repoRoot, spawnService } from '../support/harness.ts'

const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222'
const secret = { JOBSVC_SECRET: 'test-secret-test-secret-test-secret' }

t.test('JOBSVC_REPLICAS is 1 or 3, 1 by default', async (t) => {
  t.equal(loadConfig(secret).replicas, 1)
  t.equal(loadConfig({ ...secret, JOBSVC_REPLICAS: '3' }).replicas, 3)
  t.throws(() => loadConfig({ ...secret, JOBSVC_REPLICAS: '2' }), ConfigError)
  t.throws(() => loadConfig({ ...secret, JOBSVC_REPLICAS: 'three' }), /JOBSVC_REPLICAS must be 1 or 3/)
})

t.test('streams and buckets are made with the replicas asked for; other counts are refused with what to do', async (t) => {
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const nats = await connectNats(natsUrl, 'jobsvc-test-replicas')
  t.teardown(() => nats.nc.close())
  await ensureStreams(nats.jsm, names.namespace, 1)
  await openHeartbeatBucket(nats.nc, names.namespace, 1)
  t.equal((await nats.jsm.streams.info(eventsStreamName(names.namespace))).config.num_replicas, 1)
  await ensureStreams(nats.jsm, names.namespace, 1)
  t.pass('the same replicas again: nothing to do')

  const refused = await ensureStreams(nats.jsm, names.namespace, 3).catch((err: unknown) => err)
  t.ok(refused instanceof StreamSettingsMismatch, 'another replica count is refused')
  const message = (refused as Error).message
  t.match(message, `${eventsStreamName(names.namespace)} has 1`, 'names the stream and its count')
  t.match(message, `KV_${names.namespace}_heartbeats has 1`, 'KV buckets too')
  t.match(message, /JOBSVC_REPLICAS=3 .*nats stream edit <stream> --replicas 3/, 'says what to do')
  t.notMatch(message, /\n/, 'one line')

  await t.test('the service refuses to start with that line and exit code 1', async (t) => {
    const started = await spawnService({ JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl, JOBSVC_REPLICAS: '3' }, [
      '--role',
      'api',
    ]).then(
      async (svc) => {
        await svc.stop()
        return 'started'
      },
      (err: Error) => err.message,
    )
    t.match(started, /^service exited with 1:/, 'exit code 1, as the other start-up refusals')
    const lines = started.split('\n').filter((l) => l.includes('jobsvc failed to start'))
    t.equal(lines.length, 1, 'one error line')
    t.match(lines[0], /^jobsvc failed to start: JOBSVC_REPLICAS=3 but this install's streams were made with other replica counts/)
  })
})

t.test('three replicas on a single server are refused with what to do', async (t) => {
  const names = isolatedNames(import.meta.filename, '_r3')
  t.teardown(() => removeIsolated(names))
  const nats = await connectNats(natsUrl, 'jobsvc-test-replicas')
  t.teardown(() => nats.nc.close())
  const refused = await ensureStreams(nats.jsm, names.namespace, 3).catch((err: unknown) => err)
  t.ok(refused instanceof StreamSettingsMismatch)
  t.match((refused as Error).message, /JOBSVC_REPLICAS=3 needs a JetStream cluster of at least 3 servers/)
})

t.test('guarded writes take locks where the server needs them: replicas on nats-server before 2.9.21', async (t) => {
  for (const [version, before] of [
    ['2.9.10', true],
    ['2.9.20', true],
    ['2.9.21-RC.1', true],
    ['2.9.21', false],
    ['2.9.25', false],
    ['2.10.0', false],
    ['2.12.15', false],
    ['v2.14.5', false],
    ['unknown', true],
  ] as const) {
    t.equal(isVersionBefore(version, exactExpectationsSince), before, `${version} ${before ? 'is' : 'is not'} before ${exactExpectationsSince}`)
  }
  t.ok(needsWriteLocks(3, '2.9.10'), 'three replicas on 2.9.10: locks')
  t.notOk(needsWriteLocks(3, '2.9.21'), 'three replicas on 2.9.21: none')
  t.notOk(needsWriteLocks(1, '2.9.10'), 'one replica: none, whatever the version')
})

t.test('the start-up check refuses replicas on such a server unless every store and bucket writes through the locks', async (t) => {
  const names = isolatedNames(import.meta.filename, '_guard')
  t.teardown(() => removeIsolated(names))
  const nats = await connectNats(natsUrl, 'jobsvc-test-replicas')
  t.teardown(() => nats.nc.close())
  const raw = await openHeartbeatBucket(nats.nc, names.namespace, 1)
  const locking = new WriteGuard(names.databaseUrl, true, 'jobsvc-test')
  t.teardown(() => locking.close())
  const guarded = { store: locking.eventStore(names.namespace, nats.nc, nats.jsm), heartbeats: locking.bucket(raw, 'heartbeats') }
  t.doesNotThrow(() => assertWritesGuarded(guarded, locking, 3, '2.9.10'), 'every store and bucket through the guard: admitted')

  const bypass = { ...guarded, sessions: raw }
  const refused = (() => {
    try {
      assertWritesGuarded(bypass, locking, 3, '2.9.10')
      return null
    } catch (err) {
      return err
    }
  })()
  t.ok(refused instanceof UnguardedWrites, 'a bucket beside them without the guard: refused')
  t.ok(refused instanceof ConfigError, 'as a configuration error: one line, exit code 1 (services/roles/main.ts)')
  t.match(
    (refused as Error).message,
    /^JOBSVC_REPLICAS=3 against nats-server 2\.9\.10, which is older than 2\.9\.21 .*but sessions writes without it/,
  )
  t.doesNotThrow(() => assertWritesGuarded(bypass, locking, 3, '2.9.21'), 'on 2.9.21 the server is exact: admitted')
  t.doesNotThrow(() => assertWritesGuarded(bypass, locking, 1, '2.9.10'), 'with one replica: admitted')

  const off = new WriteGuard(names.databaseUrl, false)
  const unlocked = { store: off.eventStore(names.namespace, nats.nc, nats.jsm), heartbeats: off.bucket(raw, 'heartbeats') }
  t.throws(() => assertWritesGuarded(unlocked, off, 3, '2.9.10'), UnguardedWrites, 'a guard without its locks: refused')
  t.doesNotThrow(() => assertWritesGuarded(unlocked, off, 1, '2.9.10'), 'which one replica does not need')
})

/** Every TypeScript file of the service (not the tests), with its source. */
function serviceSources(): Array<{ path: string; text: string }> {
  return ['domain', 'streams', 'projections', 'services', 'tools'].flatMap((dir) =>
    readdirSync(`${repoRoot}${dir}`, { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts'))
      .map((file) => ({ path: `${dir}/${file}`, text: readFileSync(`${repoRoot}${dir}/${file}`, 'utf8') })),
  )
}

t.test('no write that expects a sequence bypasses the guard', async (t) => {
  const files = serviceSources()
  const where = (pattern: RegExp) => files.filter((f) => pattern.test(f.text)).map((f) => f.path)
  t.same(
    // The header set by name, or built as a [name, value] pair (the event store's headers).
    where(/(\.set\(|\[)\s*['"]Nats-Expected-Last-Subject-Sequence['"]\s*,|ExpectedLastSubjectSequence|lastSubjectSequence\s*:/),
    ['streams/event-store.ts'],
    "only the event store's append sets an expected sequence, and it goes through the guard's serializer",
  )
  t.same(where(/new EventStore\(/), ['services/infrastructure/write-guard.ts'], 'event stores are made by the guard only')
  t.same(where(/new Kvm\(/), ['streams/definitions.ts'], 'buckets are opened in one place')
  const openers = files.filter((f) => f.path !== 'streams/definitions.ts' && /open\w+Bucket\(/.test(f.text))
  t.same(
    openers.map((f) => f.path),
    ['services/infrastructure/runtime.ts'],
    'and handed out by the runtime only',
  )
  const calls = openers.flatMap((f) => f.text.match(/[\w.]*\(?await open\w+Bucket\(/g) ?? [])
  t.ok(calls.length >= 3, `${calls.length} buckets opened`)
  t.ok(
    calls.every((c) => c.startsWith('guard.bucket(')),
    'each through the guard',
  )
})
