import { RetentionPolicy, StorageType } from '@nats-io/jetstream'
import t from 'tap'
import { connectNats } from '../../streams/connection.ts'
import { ensureStreams, StreamSettingsMismatch } from '../../streams/definitions.ts'
import { eventsStreamName, eventsSubjectFilter } from '../../streams/names.ts'
import { isolatedNames, removeIsolated } from '../support/harness.ts'

/**
 * `events_max_bytes` reaches the events stream at start, an existing one included, and never
 * below what the stream holds: JetStream deletes the oldest messages of a stream whose limit is
 * lowered under its size, whatever the discard policy, which would lose live jobs' history.
 */

const mib = 1024 * 1024

t.test('the limit is applied to a stream made without one, and never lowered under what the stream holds', async (t) => {
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const nats = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', 'jobsvc-test-log-limit')
  t.teardown(() => nats.nc.close())
  const stream = eventsStreamName(names.namespace)
  // As earlier versions made it: no max_bytes, discard old.
  await nats.jsm.streams.add({
    name: stream,
    subjects: [eventsSubjectFilter(names.namespace)],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    allow_direct: true,
  })
  const body = new Uint8Array(100 * 1024)
  for (let i = 0; i < 20; i++) await nats.js.publish(`${names.namespace}.evt.prj_1.job.job_${i}`, body)
  const held = (await nats.jsm.streams.info(stream)).state

  const refused = await ensureStreams(nats.jsm, names.namespace, 1, mib).catch((err: unknown) => err)
  t.ok(refused instanceof StreamSettingsMismatch, 'a limit under what the stream holds is refused')
  t.match((refused as Error).message, /events_max_bytes=1048576 is too small .* set events_max_bytes in JOBSVC_CONFIG to at least \d+/i)
  const after = await nats.jsm.streams.info(stream)
  t.equal(after.state.messages, held.messages, 'and no message was deleted')
  t.equal(after.config.max_bytes, -1, 'the stream keeps its limit')

  await ensureStreams(nats.jsm, names.namespace, 1, 64 * mib)
  const applied = await nats.jsm.streams.info(stream)
  t.equal(applied.config.max_bytes, 64 * mib, 'a limit above what it holds is applied')
  t.equal(applied.config.discard, 'new', 'with discard new')
  t.equal(applied.state.messages, held.messages)

  await ensureStreams(nats.jsm, names.namespace, 1, 128 * mib)
  t.equal((await nats.jsm.streams.info(stream)).config.max_bytes, 128 * mib, 'raised')
  await ensureStreams(nats.jsm, names.namespace, 1, 32 * mib)
  t.equal((await nats.jsm.streams.info(stream)).config.max_bytes, 32 * mib, 'and lowered while the stream holds well under it')
  t.equal((await nats.jsm.streams.info(stream)).state.messages, held.messages, 'deleting nothing')
})
