import t from 'tap'
import { runSerialPerKey } from '../../services/use-cases/jobs/serial-per-key.ts'

/** runSerialPerKey: indices of one key one after another, in order; at most `limit` at once. */

t.test('indices sharing a key run in order, one at a time; the others alongside, up to the limit', async (t) => {
  const keys = ['a', 'b', 'a', null, null, 'a']
  const log: string[] = []
  let running = 0
  let most = 0
  const busy = new Set<string>()
  let overlapped = false
  await runSerialPerKey(keys, 2, async (i) => {
    const key = keys[i] ?? `null-${i}`
    if (busy.has(key)) overlapped = true
    busy.add(key)
    most = Math.max(most, ++running)
    await new Promise((r) => setTimeout(r, 5))
    log.push(`${i}`)
    busy.delete(key)
    running--
  })
  t.notOk(overlapped, 'no two indices of one key at once')
  t.equal(most, 2, 'the limit is reached and kept')
  t.same(
    log.filter((i) => keys[Number(i)] === 'a'),
    ['0', '2', '5'],
    "a key's indices in index order",
  )
  t.same([...log].sort(), ['0', '1', '2', '3', '4', '5'], 'every index once')
})

t.test('a throwing work rejects the run', async (t) => {
  await t.rejects(
    runSerialPerKey(['a'], 1, async () => {
      throw new Error('boom')
    }),
    { message: 'boom' },
  )
})
