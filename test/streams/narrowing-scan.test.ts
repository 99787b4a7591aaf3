import { RetentionPolicy, StorageType } from '@nats-io/jetstream'
import t from 'tap'
import { firstStoredOn, lastStoredOn, LogScan } from '../../streams/log-scan.ts'
import { subjectMatcher } from '../../streams/names.ts'
import { NarrowingScan } from '../../streams/narrowing-scan.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

/**
 * The scan the tenants' feed and webhook replays read the log with (streams/narrowing-scan.ts),
 * on a stream of its own laid out as the events stream is: subjects per aggregate, one project
 * with half the messages, seven sharing the rest, each subject's messages spread apart. That
 * layout is where NATS 2.9 counts a filtered consumer's pending messages wrongly from a start
 * inside a block, so a scan that trusted its "nothing more" would stop early or wait.
 */

const { names, nats } = await openIsolatedStore(t, import.meta.filename, { database: false })
const stream = `${names.namespace}_scan`
const prefix = `${names.namespace}.scan`
await nats.jsm.streams.add({ name: stream, subjects: [`${prefix}.>`], storage: StorageType.File, retention: RetentionPolicy.Limits })
t.teardown(() => nats.jsm.streams.delete(stream).then(() => undefined))

/** Every stored message's subject, by sequence. */
const subjects: string[] = []

async function append(count: number, subjectAt: (i: number) => string): Promise<void> {
  const base = subjects.length
  const pending: Promise<unknown>[] = []
  for (let i = 0; i < count; i++) {
    const subject = subjectAt(base + i)
    pending.push(nats.js.publish(subject, new TextEncoder().encode(`{"i":${base + i}}`)).then((ack) => (subjects[ack.seq] = subject)))
    if (pending.length >= 256) await Promise.all(pending.splice(0))
  }
  await Promise.all(pending)
}

// Half of the messages are p0's; the rest are spread over p1..p7; a job's messages are 16 apart.
const layout = (i: number) => `${prefix}.${i % 2 === 0 ? 'p0' : `p${1 + ((i >> 1) % 7)}`}.job.j${Math.floor(i / 16)}`
await append(6_000, layout)

/** The sequences of stored messages on `filter` from `start`, in order. */
function expected(filter: string, start: number): number[] {
  const matches = subjectMatcher(filter)
  const seqs: number[] = []
  for (let seq = Math.max(1, start); seq < subjects.length; seq++) if (subjects[seq] !== undefined && matches(subjects[seq]!)) seqs.push(seq)
  return seqs
}

/** Reads a scan until it says it is at the end (failing after too many empty reads that did not say so). */
async function readAll(scan: NarrowingScan): Promise<number[]> {
  const seqs: number[] = []
  for (let empty = 0; empty < 3;) {
    const batch = await scan.read(256)
    seqs.push(...batch.map((m) => m.seq))
    if (batch.length > 0) continue
    if (scan.atEnd) return seqs
    empty++
  }
  throw new Error('the scan never said it reached the end')
}

t.test('from any start, a scan hands over every message on its filter, in order, once, and knows when it reached the end', async (t) => {
  const filters = [`${prefix}.p0.>`, `${prefix}.p3.>`, `${prefix}.p5.job.*`, `${prefix}.*.job.j42`, `${prefix}.nobody.>`]
  // Skimming only (the filtered consumer never asked for), switching part-way, and filtered from the start.
  const narrowAfters = [1_000_000, 40, 0]
  let cases = 0
  for (let k = 0; k < 36; k++) {
    const filter = filters[k % filters.length]!
    const narrowAfter = narrowAfters[k % narrowAfters.length]!
    const start = 1 + Math.floor(Math.random() * (subjects.length - 1))
    const scan = await NarrowingScan.open(nats.nc, stream, filter, { seq: start }, { narrowAfter })
    try {
      const seqs = await readAll(scan)
      t.strictSame(seqs, expected(filter, start), `${filter} from ${start}, narrowing after ${narrowAfter}`)
      cases++
    } finally {
      scan.close()
    }
  }
  t.equal(cases, 36)
})

t.test('a filtered LogScan read where messages remain ends by the server, with all of them', async (t) => {
  // The count NATS 2.9 gives a filtered consumer from inside a block is not what reads rely on.
  for (let k = 0; k < 12; k++) {
    const filter = `${prefix}.p${1 + (k % 7)}.>`
    const start = 1 + Math.floor(Math.random() * (subjects.length / 2))
    const want = expected(filter, start)
    const scan = await LogScan.open(nats.nc, stream, filter, { seq: start })
    try {
      const seqs: number[] = []
      while (seqs.length < want.length) {
        const batch = await scan.read(256)
        t.ok(batch.length > 0, 'a read while messages remain hands some over')
        if (batch.length === 0) break
        seqs.push(...batch.map((m) => m.seq))
      }
      t.strictSame(seqs, want, `${filter} from ${start}`)
    } finally {
      scan.close()
    }
  }
})

t.test('a wait hands over new messages on the filter only; a kept scan asked again reads what came since', async (t) => {
  const filter = `${prefix}.p6.>`
  const scan = await NarrowingScan.open(nats.nc, stream, filter, { seq: subjects.length - 200 })
  t.teardown(() => scan.close())
  t.strictSame(await readAll(scan), expected(filter, subjects.length - 200))
  const from = subjects.length
  const waited = scan.wait(256, 10_000)
  await append(40, (i) => `${prefix}.p${i === from + 30 ? 6 : 2}.job.late${i}`)
  t.strictSame(
    (await waited).map((m) => m.seq),
    expected(filter, from),
    'woken by its own message, not the 39 others',
  )
  const next = subjects.length
  await append(300, (i) => `${prefix}.p${i % 3 === 0 ? 6 : 4}.job.later${i}`)
  scan.askAgain()
  t.strictSame(await readAll(scan), expected(filter, next), 'the next page reads on from where the wait left it')
})

t.test('a scan from a time starts at the first message stored at or after it', async (t) => {
  const before = new Date(Date.now() - 1).toISOString()
  const from = subjects.length
  await append(20, (i) => `${prefix}.p${i % 2 === 0 ? 1 : 7}.job.timed${i}`)
  const scan = await NarrowingScan.open(nats.nc, stream, `${prefix}.p1.>`, { time: before })
  t.teardown(() => scan.close())
  t.strictSame(await readAll(scan), expected(`${prefix}.p1.>`, from))
})

t.test("the leader's lookups: a filter's last stored message, and the first from a sequence", async (t) => {
  const last = (filter: string) => expected(filter, 1).at(-1) ?? null
  for (const filter of [`${prefix}.p0.>`, `${prefix}.p3.job.*`]) {
    t.equal((await lastStoredOn(nats.nc, stream, [filter]))?.seq ?? null, last(filter), filter)
  }
  const literal = [`${prefix}.p0.job.j4`, `${prefix}.p2.job.j4`]
  t.equal((await lastStoredOn(nats.nc, stream, literal))?.seq, Math.max(last(literal[0]!)!, last(literal[1]!)!), 'the last of several subjects')
  t.equal(await lastStoredOn(nats.nc, stream, [`${prefix}.nobody.>`]), null, 'none on the filter')
  const first = await firstStoredOn(nats.nc, stream, `${prefix}.p3.>`, 1_000)
  t.equal(first?.seq, expected(`${prefix}.p3.>`, 1_000)[0])
  t.ok(first !== null && Math.abs(first.storedAtMs - Date.now()) < 10 * 60_000, 'when it was stored')
  t.equal(await firstStoredOn(nats.nc, stream, `${prefix}.p3.>`, subjects.length + 5), null, 'none after the end')
})
