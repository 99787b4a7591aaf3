import t from 'tap'
import { ulid } from 'ulid'
import { ensureDurable } from '../../streams/consume.ts'
import type { AggregateRef, EventRecord, StoredEvent } from '../../streams/event-store.ts'
import { aggregateKindFilter, eventsStreamName } from '../../streams/names.ts'
import { eventually } from '../support/harness.ts'
import { consumeDuringTest, openIsolatedStore } from '../support/isolated-store.ts'

// Issue 31, item 1: a reader that keeps few messages (the dispatcher's fan-out) takes the log's
// headers alone and reads the bodies of those it keeps by sequence.
const { names, nats, store } = await openIsolatedStore(t, import.meta.filename, { database: false })
const stream = eventsStreamName(names.namespace)
const filterSubject = aggregateKindFilter(names.namespace, 'job')

const jobRef = (): AggregateRef => ({ aggregate: 'job', projectId: 'prj_headers', id: `job_${ulid()}` })
const event = (type: string, data: Record<string, unknown> = {}): StoredEvent => ({ type, data, id: `evt_${ulid()}`, time: new Date().toISOString() })

t.test('a headers-only consumer hands over the kept messages whole, in order, and acks the rest unread', async (t) => {
  const durable = `ho_${ulid().toLowerCase()}`
  const kept: EventRecord[] = []
  const seen: string[] = []
  consumeDuringTest(
    t,
    nats,
    {
      stream,
      durable,
      filterSubject,
      maxBatch: 50,
      headersOnly: true,
      accept: ({ eventTypes }) => {
        seen.push(eventTypes)
        return eventTypes.includes('job_succeeded')
      },
    },
    async (records) => void kept.push(...records),
  )
  const expected: number[] = []
  for (let i = 0; i < 40; i++) {
    const ref = jobRef()
    const created = await store.append(ref, [event('job_created', { i })], { i, step: 'created' }, 0)
    const claimed = await store.append(ref, [event('job_claimed')], { i, step: 'claimed' }, created.seq)
    const acked = await store.append(ref, [event('job_succeeded', { result: { i } })], { i, step: 'succeeded' }, claimed.seq)
    expected.push(acked.seq)
  }
  await eventually(async () => kept.length >= 40, 15_000, 'every kept message handed over')
  t.same(
    kept.map((r) => r.seq),
    expected,
    'the kept messages, in stream order',
  )
  t.same(
    kept.map((r) => [
      r.message.events[0]!.type,
      (r.message.state as { step: string }).step,
      (r.message.events[0]!.data as { result: { i: number } }).result.i,
    ]),
    expected.map((_, i) => ['job_succeeded', 'succeeded', i]),
    'each with its body: events and state',
  )
  t.equal(seen.length, 120, 'every message was offered by its header')
  const info = await nats.jsm.consumers.info(stream, durable)
  t.equal(info.config.headers_only, true, 'the consumer delivers headers alone')
  await eventually(async () => (await nats.jsm.consumers.info(stream, durable)).ack_floor.stream_seq >= expected.at(-1)!, 15_000, 'all acked')
})

t.test('a headers-only durable that replaces an earlier one starts where that one stood, and leaves it to expire', async (t) => {
  const former = `ho_${ulid().toLowerCase()}`
  const durable = `${former}_jobs`
  const ref = jobRef()
  const first = await store.append(ref, [event('job_created')], { step: 1 }, 0)
  const second = await store.append(ref, [event('job_claimed')], { step: 2 }, first.seq)
  await ensureDurable(nats, { stream, durable: former, filterSubject }, first.seq)
  t.teardown(async () => {
    await nats.jsm.consumers.delete(stream, former).catch(() => undefined)
    await nats.jsm.consumers.delete(stream, durable).catch(() => undefined)
  })
  // The earlier version handled and acked the first message.
  const old = await nats.js.consumers.get(stream, former)
  const handled = await old.next({ expires: 5_000 })
  t.equal(handled?.seq, first.seq)
  await handled!.ackAck()
  await ensureDurable(nats, { stream, durable, filterSubject, headersOnly: true, replaces: former })
  const info = await nats.jsm.consumers.info(stream, durable)
  t.equal(info.config.headers_only, true, 'the new durable delivers headers alone')
  t.equal(info.config.opt_start_seq, second.seq, "it starts after the earlier durable's ack floor")
  const m = await (await nats.js.consumers.get(stream, durable)).next({ expires: 5_000 })
  t.equal(m?.seq, second.seq, 'the first message it delivers is the first the earlier one had not acked')
  t.equal(m?.data.length, 0, 'without the body')
  t.ok(Number(m?.headers?.get('Nats-Msg-Size')) > 0, 'the size of the body left out is in its header')
  const left = await nats.jsm.consumers.info(stream, former)
  t.equal(left.config.headers_only ?? false, false, 'the earlier durable still serves processes of the earlier version as it did')
  t.equal(left.config.inactive_threshold, 10 * 60_000 * 1_000_000, 'and the server removes it once none pulls from it for 10 minutes')
  await ensureDurable(nats, { stream, durable, filterSubject, headersOnly: true, replaces: former })
  t.equal((await nats.jsm.consumers.info(stream, durable)).config.opt_start_seq, second.seq, 'a durable that exists is left as it is')
})
