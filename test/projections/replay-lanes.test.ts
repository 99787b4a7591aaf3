import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Projection } from '../../projections/projection.ts'
import { batchSize, ReplayLanes } from '../../services/roles/projector/rebuild.ts'
import type { EventRecord } from '../../streams/event-store.ts'

// Issue 31: a replay's lanes (services/roles/projector/rebuild.ts). The jobs' lane writes several
// of the reading's batches per transaction; every lane still takes every record once, in order.
const projection = (name: string) => ({ name }) as unknown as Projection
const record = (seq: number) => ({ seq, subject: `s.${seq}`, message: {} }) as unknown as EventRecord

t.test('each lane takes every record once, in order; a gathering lane writes its batches together', async (t) => {
  const jobs = projection('jobs')
  const others = projection('others')
  const writes = new Map<string, number[][]>([
    ['jobs', []],
    ['others', []],
  ])
  let inFlight = 0
  let mostInFlight = 0
  const lanes = new ReplayLanes(
    [
      { projections: [jobs], batchesPerWrite: 3 },
      { projections: [others], batchesPerWrite: 1 },
    ],
    async (projections, records) => {
      inFlight++
      mostInFlight = Math.max(mostInFlight, inFlight)
      await sleep(projections[0] === jobs ? 5 : 1)
      writes.get(projections[0]!.name)!.push(records.map((r) => r.seq))
      inFlight--
      return records.at(-1)!.seq
    },
  )
  let seq = 0
  // Full batches, then a partial one (the reading hands over what has arrived), then full ones.
  const sizes = [batchSize, batchSize, 250, batchSize, batchSize, batchSize, batchSize, 40]
  for (const size of sizes) await lanes.add(Array.from({ length: size }, () => record(++seq)))
  t.equal(await lanes.finish(), seq, 'finish answers the last sequence every lane reached')
  const all = Array.from({ length: seq }, (_, i) => i + 1)
  for (const [name, lane] of writes) t.same(lane.flat(), all, `${name}: every record once, in order`)
  t.same(
    writes.get('others')!.map((w) => w.length),
    sizes,
    'a lane writing batch by batch writes each as it came',
  )
  const jobWrites = writes.get('jobs')!.map((w) => w.length)
  t.ok(
    jobWrites.slice(0, -1).every((n) => n >= 3 * batchSize),
    `the gathering lane writes at least three batches' records at a time (${jobWrites.join(', ')})`,
  )
  t.ok(jobWrites.length < sizes.length, 'in fewer transactions than batches')
  t.ok(mostInFlight <= 2 + 4, 'writes in flight stay bounded')
})

t.test('a failed write fails the replay: at the next wait or at the end', async (t) => {
  const lanes = new ReplayLanes([{ projections: [projection('jobs')], batchesPerWrite: 1 }], async () => {
    throw new Error('statement failed')
  })
  let seq = 0
  const adding = (async () => {
    for (let i = 0; i < 8; i++) await lanes.add(Array.from({ length: batchSize }, () => record(++seq)))
    await lanes.finish()
  })()
  await t.rejects(adding, /statement failed/)
})
