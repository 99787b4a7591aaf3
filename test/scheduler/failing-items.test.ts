import t from 'tap'
import { eachIsolated, FailingItems } from '../../services/infrastructure/failing-items.ts'

// Issue 23, item 3: what the scheduler's passes use to isolate their items (the reaper's case
// runs against the real service in poisoned-items.test.ts).

t.test('an item that keeps failing is held back for 1 s, 2 s, 4 s … at most 10 minutes, and starts afresh once handled', async (t) => {
  let now = 0
  const failing = new FailingItems({ now: () => now })
  t.same(
    [1, 2, 3, 4].map(() => failing.failed('a').heldBackMs),
    [1_000, 2_000, 4_000, 8_000],
  )
  t.ok(failing.isHeldBack('a'))
  t.same(failing.heldBack(), ['a'], 'a pass leaves it out of its query')
  now = 8_001
  t.same(failing.heldBack(), [], 'then tries it again')
  for (let i = 0; i < 20; i++) failing.failed('a')
  t.equal(failing.failed('a').heldBackMs, 600_000, 'the delay stops growing at 10 minutes')
  failing.succeeded('a')
  t.same(failing.failed('a'), { failures: 1, heldBackMs: 1_000 }, 'an item handled once starts afresh')
})

t.test('at most maxItems are kept, the one that failed longest ago let go first', async (t) => {
  const failing = new FailingItems({ now: () => 0, maxItems: 2 })
  failing.failed('a')
  failing.failed('b')
  failing.failed('c')
  t.same(failing.heldBack().sort(), ['b', 'c'])
})

t.test('eachIsolated: a throwing item is reported and the others go on; an outage stops the pass and is thrown', async (t) => {
  const done: number[] = []
  const failed: number[] = []
  await eachIsolated(
    [1, 2, 3, 4, 5, 6],
    2,
    async (n) => {
      if (n % 2 === 0) throw new Error(`bad ${n}`)
      done.push(n)
    },
    (n) => failed.push(n),
  )
  t.same(done.sort(), [1, 3, 5], 'every good item ran')
  t.same(failed.sort(), [2, 4, 6], 'every bad one was reported')

  const started: number[] = []
  const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })
  await t.rejects(
    eachIsolated(
      [1, 2, 3, 4, 5, 6],
      1,
      async (n) => {
        started.push(n)
        if (n === 2) throw refused
      },
      () => t.fail('an outage is no item’s failure'),
    ),
    refused,
  )
  t.same(started, [1, 2], 'no item starts after an outage')
})
