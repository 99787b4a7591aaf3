import t from 'tap'
import { SlotPool } from '../../services/roles/dispatcher/slot-pool.ts'

const never = new AbortController().signal

/** Takes every slot `projectId` gets at once; the releases of those it got. */
async function takeAll(pool: SlotPool, projectId: string, tries: number): Promise<Array<() => void>> {
  const got: Array<() => void> = []
  const pending: Array<Promise<(() => void) | null>> = []
  const abort = new AbortController()
  for (let i = 0; i < tries; i++) pending.push(pool.acquire(projectId, abort.signal))
  await new Promise((r) => setImmediate(r))
  abort.abort()
  for (const release of await Promise.all(pending)) if (release) got.push(release)
  return got
}

t.test('a project alone gets three quarters of the slots, leaving room for the next one', async (t) => {
  const pool = new SlotPool(64, 4)
  const a = await takeAll(pool, 'a', 64)
  t.equal(a.length, 48)
  t.equal(pool.heldBy('a'), 48)
  const b = await pool.acquire('b', never)
  t.ok(b, 'a second project gets a slot at once')
  t.equal(pool.shareOf('b'), 24, 'two busy projects: the three quarters split between them')
  t.equal(pool.shareOf('c'), 16, 'and a third one')
})

t.test('a freed slot goes to the first waiter under its share, not to a project over it', async (t) => {
  const pool = new SlotPool(8, 1)
  const a = await takeAll(pool, 'a', 8)
  const b = await takeAll(pool, 'b', 8)
  t.same([a.length, b.length], [6, 2], 'a alone takes three quarters; b gets the rest')
  const order: string[] = []
  const waitA = pool.acquire('a', never).then((r) => (order.push('a'), r))
  const waitC = pool.acquire('c', never).then((r) => (order.push('c'), r))
  a[0]!()
  await new Promise((r) => setImmediate(r))
  t.same(order, ['c'], 'the slot a gave back goes to c, which holds none; a, first in the queue, is over its share')
  b[0]!()
  b[1]!()
  a[1]!()
  a[2]!()
  await new Promise((r) => setImmediate(r))
  t.same(order, ['c'], 'a, holding 3, is still at its share of a pool busy with a and c')
  a[3]!()
  await new Promise((r) => setImmediate(r))
  t.same(order, ['c', 'a'], 'a gets one once it is under its share')
  ;(await waitA)?.()
  ;(await waitC)?.()
})

t.test('a waiter that gives up leaves the queue', async (t) => {
  const pool = new SlotPool(1, 1)
  const first = await pool.acquire('a', never)
  const abort = new AbortController()
  const waiting = pool.acquire('b', abort.signal)
  abort.abort()
  t.equal(await waiting, null)
  const next = pool.acquire('c', never)
  first!()
  t.ok(await next, 'the slot went to the next waiter')
})
