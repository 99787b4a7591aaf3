import t from 'tap'
import { ulid } from 'ulid'
import type { AggregateRef, StoredEvent } from '../../streams/event-store.ts'
import { LogPruner } from '../../streams/log-pruner.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

const { names, nats, store } = await openIsolatedStore(t, import.meta.filename, { database: false })
const pruner = new LogPruner(nats.nc, names.namespace)
t.teardown(() => pruner.close())

const newRef = (): AggregateRef => ({ aggregate: 'job', projectId: 'prj_pruner', id: `job_${ulid()}` })
const event = (): StoredEvent => ({ type: 'job_progressed', data: {}, id: `evt_${ulid()}`, time: new Date().toISOString() })

/** Appends `count` messages to the aggregate, each at the sequence before it; resolves to their sequences. */
async function appendMessages(ref: AggregateRef, count: number): Promise<number[]> {
  const seqs: number[] = []
  for (let i = 0; i < count; i++) seqs.push((await store.append(ref, [event()], { step: i }, seqs.at(-1) ?? 0)).seq)
  return seqs
}

async function sequencesOn(ref: AggregateRef): Promise<number[]> {
  return (await store.history(ref)).map((r) => r.seq)
}

t.test('removes the messages up to the sequence given, walking the chain, and leaves later ones', async (t) => {
  const ref = newRef()
  const neighbour = newRef()
  const seqs: number[] = []
  const theirs: number[] = []
  // Interleaved with another aggregate's messages, which must stay.
  for (let i = 0; i < 4; i++) {
    seqs.push((await store.append(ref, [event()], {}, seqs.at(-1) ?? 0)).seq)
    theirs.push((await store.append(neighbour, [event()], {}, theirs.at(-1) ?? 0)).seq)
  }
  const result = await pruner.removeThrough(store.subjectOf(ref), seqs[2]!)
  t.same(result, { messages: 3, purgedBySubject: false }, 'three messages deleted by sequence')
  t.same(await sequencesOn(ref), [seqs[3]], 'the message after the one seen stays')
  t.same(await sequencesOn(neighbour), theirs, "the other aggregate's messages stay")
  t.same(
    await pruner.removeThrough(store.subjectOf(ref), seqs[2]!),
    { messages: 0, purgedBySubject: true },
    'again: the chain is gone, the purge finds nothing',
  )
})

t.test('a broken chain falls back to a purge by subject', async (t) => {
  const ref = newRef()
  const seqs = await appendMessages(ref, 3)
  await nats.jsm.streams.deleteMessage(store.stream, seqs[1]!, false)
  t.same(await pruner.removeThrough(store.subjectOf(ref), seqs[2]!), { messages: 2, purgedBySubject: true }, 'the two messages left are purged')
  t.same(await sequencesOn(ref), [])
})

t.test('a long chain is purged by subject in one request', async (t) => {
  const ref = newRef()
  const seqs = await appendMessages(ref, 40)
  t.same(await pruner.removeThrough(store.subjectOf(ref), seqs.at(-2)!), { messages: 39, purgedBySubject: true })
  t.same(await sequencesOn(ref), [seqs.at(-1)], 'the last message, not yet seen, stays')
})

t.test("a sequence on another subject deletes nothing of that subject's", async (t) => {
  const ref = newRef()
  const other = newRef()
  const mine = await appendMessages(ref, 2)
  const theirs = await appendMessages(other, 2)
  const result = await pruner.removeThrough(store.subjectOf(ref), theirs[1]!)
  t.equal(result.purgedBySubject, true, 'the walk stops at a message that is not on the subject')
  t.same(await sequencesOn(other), theirs, "the other aggregate's messages stay")
  t.same(await sequencesOn(ref), [], 'the subject itself is purged up to the sequence given')
  t.ok(
    mine.every((s) => s < theirs[1]!),
    'its own messages all came before that sequence',
  )
})

t.test('a row that saw no message removes nothing', async (t) => {
  const ref = newRef()
  const seqs = await appendMessages(ref, 2)
  t.same(await pruner.removeThrough(store.subjectOf(ref), 0), { messages: 0, purgedBySubject: false })
  t.same(await sequencesOn(ref), seqs)
})
