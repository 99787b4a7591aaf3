import t from 'tap'
import { ulid } from 'ulid'
import type { AggregateRef, EventRecord, StoredEvent } from '../../streams/event-store.ts'
import { aggregateKindFilter, eventsStreamName } from '../../streams/names.ts'
import { eventually } from '../support/harness.ts'
import { consumeDuringTest, openIsolatedStore } from '../support/isolated-store.ts'

// Issue 31: the projector's batches wait a moment for more messages while the log is busy
// (`lingerMs`, the `projector_linger_ms` tunable), so a trickle of messages is written in a few
// transactions rather than one each; a message on a quiet log is handed over at once.
const { names, nats, store } = await openIsolatedStore(t, import.meta.filename, { database: false })
const stream = eventsStreamName(names.namespace)
const filterSubject = aggregateKindFilter(names.namespace, 'job')

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

const event = (type: string): StoredEvent => ({ type, data: {}, id: `evt_${ulid()}`, time: new Date().toISOString() })
const appendJob = async (): Promise<number> => {
  const ref: AggregateRef = { aggregate: 'job', projectId: 'prj_linger', id: `job_${ulid()}` }
  return (await store.append(ref, [event('job_created')], { step: 'created' }, 0)).seq
}

/** A consumer with `lingerMs` whose every batch is recorded as the sequences it held. */
function recordBatches(t: Tap, lingerMs: number): number[][] {
  const durable = `linger_${ulid().toLowerCase()}`
  const batches: number[][] = []
  consumeDuringTest(
    t,
    nats,
    { stream, durable, filterSubject, maxBatch: 1000, lingerMs, resumeFrom: async () => (await store.lastSequence()) + 1 },
    async (records: EventRecord[]) => void batches.push(records.map((r) => r.seq)),
  )
  return batches
}

t.test('messages that follow a batch closely are gathered for up to the linger; a quiet log is handed over at once', async (t) => {
  // A long linger, so that appends one after another on a loaded machine all fall inside it.
  const lingerMs = 3_000
  const batches = recordBatches(t, lingerMs)
  // The consumer is ready once it hands over a first message; the log was quiet before it.
  const first = await appendJob()
  await eventually(async () => batches.length === 1, 15_000, 'the first message handed over')
  t.same(batches[0], [first], 'a message on a quiet log is a batch of its own, handed over without waiting')

  // Appended right after that batch was handled: the log is busy, so the batch waits for more.
  const burst: number[] = []
  for (let i = 0; i < 10; i++) burst.push(await appendJob())
  await eventually(async () => batches.flat().length === 11, 15_000, 'the burst handed over')
  t.same(batches.slice(1), [burst], 'the ten messages that came within the linger are one batch')

  // Quiet again for longer than the linger: the next message is handed over alone.
  await new Promise((resolve) => setTimeout(resolve, lingerMs + 500))
  const late = await appendJob()
  await eventually(async () => batches.length === 3, 15_000, 'the late message handed over')
  t.same(batches[2], [late], 'after a quiet spell a message is handed over alone')
})

t.test('without a linger every batch is what had arrived when the previous one was handled', async (t) => {
  const batches = recordBatches(t, 0)
  const first = await appendJob()
  await eventually(async () => batches.length === 1, 15_000, 'the first message handed over')
  const burst: number[] = []
  for (let i = 0; i < 5; i++) {
    burst.push(await appendJob())
    // Each append waits until it was handed over: nothing is gathered.
    await eventually(async () => batches.flat().length === i + 2, 15_000, 'the message handed over')
  }
  t.same(batches, [[first], ...burst.map((seq) => [seq])], 'one batch per message when each comes after the previous was handled')
})
