import t from 'tap'
import { decodeFeedCursor, encodeFeedCursor, isAfter } from '../../services/use-cases/events/feed-cursor.ts'

t.test('a cursor round-trips for its project and is refused for any other or when edited', async (t) => {
  for (const position of [
    { seq: 0, index: 'all' as const },
    { seq: 1, index: 0 },
    { seq: 123_456_789, index: 'all' as const },
    { seq: 2 ** 40, index: 7 },
  ]) {
    const cursor = encodeFeedCursor('prj_a', position)
    t.same(decodeFeedCursor('prj_a', cursor), position, cursor)
    t.equal(decodeFeedCursor('prj_b', cursor), null, "another project's")
  }
  const cursor = encodeFeedCursor('prj_a', { seq: 500, index: 'all' })
  const edited = cursor.replace(/^c1\.([0-9a-z]+)/, (_, s: string) => `c1.${(Number.parseInt(s, 36) + 1).toString(36)}`)
  t.equal(decodeFeedCursor('prj_a', edited), null, 'an edited sequence')
  for (const junk of ['', 'c1', 'c1...', 'c2.1.x.aaaaaaaaaa', 'c1.-1.x.aaaaaaaaaa', 'c1.1.x.' + 'a'.repeat(300)])
    t.equal(decodeFeedCursor('prj_a', junk), null, junk)
})

t.test('positions are ordered by sequence, then by event within the message, a whole message last', async (t) => {
  t.ok(isAfter({ seq: 2, index: 0 }, { seq: 1, index: 'all' }))
  t.ok(isAfter({ seq: 2, index: 1 }, { seq: 2, index: 0 }))
  t.ok(isAfter({ seq: 2, index: 'all' }, { seq: 2, index: 1 }))
  t.notOk(isAfter({ seq: 2, index: 0 }, { seq: 2, index: 'all' }))
  t.notOk(isAfter({ seq: 2, index: 1 }, { seq: 2, index: 1 }))
})
