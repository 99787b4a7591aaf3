import t from 'tap'
import { ConfigError, loadConfig } from '../../services/infrastructure/config.ts'
import { connectNats } from '../../streams/connection.ts'
import { ensureStreams, openHeartbeatBucket, StreamSettingsMismatch } from '../../streams/definitions.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { isolatedNames, removeIsolated, spawnService } from '../support/harness.ts'

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
