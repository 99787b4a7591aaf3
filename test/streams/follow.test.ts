import t from 'tap'
import { ulid } from 'ulid'
import { eventTypesOf, followEvents, rawHeaderBlock, type FollowedEvent } from '../../streams/consume.ts'
import { eventHeaders, type AggregateRef, type StoredEvent } from '../../streams/event-store.ts'
import { aggregateKindFilter, eventsStreamName } from '../../streams/names.ts'
import { eventually, type TestLike } from '../support/harness.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

const { names, nats, store } = await openIsolatedStore(t, import.meta.filename, { database: false })
const stream = eventsStreamName(names.namespace)

const jobRef = (): AggregateRef => ({ aggregate: 'job', projectId: 'prj_follow', id: `job_${ulid()}` })
const event = (type: string): StoredEvent => ({ type, data: {}, id: `evt_${ulid()}`, time: new Date().toISOString() })

/** Follows job events from `startSeq` into `seen` until the test ends. */
function follow(t: TestLike, startSeq: number, onLive?: (live: boolean) => void): FollowedEvent[] {
  const seen: FollowedEvent[] = []
  const stop = new AbortController()
  const done = followEvents(
    nats,
    { stream, filterSubject: aggregateKindFilter(names.namespace, 'job'), startSeq, onLive },
    (e) => seen.push(e),
    stop.signal,
    () => undefined,
  )
  t.teardown(async () => {
    stop.abort()
    await done
  })
  return seen
}

t.test('the header a follower routes on is read from the raw block, and equals what nats.js parses', async (t) => {
  const ref = jobRef()
  const created = await store.append(ref, [event('job_created')], { n: 1 }, 0)
  await store.append(ref, [event('job_child_attached'), event('job_claimed')], { n: 2 }, created.seq)
  const consumer = await nats.js.consumers.get(stream, { filter_subjects: store.subjectOf(ref), opt_start_seq: created.seq })
  t.teardown(() => consumer.delete().catch(() => undefined))
  for (const expected of ['job_created', 'job_child_attached,job_claimed']) {
    const m = await consumer.next({ expires: 5_000 })
    t.ok(m !== null && rawHeaderBlock(m) !== null, "nats.js's raw header block is where this reads it (an upgrade that moves it fails here)")
    t.equal(eventTypesOf(m!), expected)
    t.equal(eventTypesOf(m!), m!.headers!.get(eventHeaders.eventTypes), 'the same as the parsed header')
  }
})

t.test('a follower hands over every job message from its start, in order, and only job messages', async (t) => {
  const before = jobRef()
  const skipped = await store.append(before, [event('job_created')], {}, 0)
  const seen = follow(t, skipped.seq + 1)
  const appended: number[] = []
  for (let i = 0; i < 20; i++) {
    const ref = jobRef()
    appended.push((await store.append(ref, [event('job_created')], { i }, 0)).seq)
    await store.append({ aggregate: 'project', projectId: `prj_f${i}`, id: `prj_f${i}` }, [event('project_created')], {}, 0)
  }
  await eventually(async () => seen.length >= appended.length, 15_000, 'every job message')
  t.same(
    seen.map((e) => e.seq),
    appended,
    'each job message once, in order, none before the start, no project message',
  )
  t.same(seen[3]!.decode().state, { i: 3, traceparent: null }, 'the body decodes on demand, upgraded as every job state is read')
  t.ok(seen.every((e) => e.eventTypes === 'job_created' && e.size > 0))
})

t.test('a follower whose consumer is deleted on the server starts again where it stopped', async (t) => {
  const start = (await store.lastSequence()) + 1
  const states: boolean[] = []
  const seen = follow(t, start, (live) => states.push(live))
  const first = (await store.append(jobRef(), [event('job_created')], {}, 0)).seq
  await eventually(async () => seen.length === 1, 15_000, 'the first message')
  const ephemeral: string[] = []
  for await (const info of nats.jsm.consumers.list(stream)) if (info.config.durable_name === undefined) ephemeral.push(info.name)
  t.equal(ephemeral.length, 1)
  await nats.jsm.consumers.delete(stream, ephemeral[0]!)
  const during: number[] = []
  for (let i = 0; i < 10; i++) during.push((await store.append(jobRef(), [event('job_created')], {}, 0)).seq)
  await eventually(async () => seen.length >= 11, 15_000, 'the messages appended while the consumer was gone')
  t.same(
    seen.map((e) => e.seq),
    [first, ...during],
    'none lost, none twice, in order',
  )
  t.same(states.slice(0, 2), [false, true], 'it reported the stall, then that it follows again')
})
