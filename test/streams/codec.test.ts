import { Packr, unpack } from 'msgpackr'
import t from 'tap'
import { decode, encode } from '../../streams/codec.ts'

const sample = {
  at: new Date('2024-02-29T23:59:59.999Z'),
  epoch: new Date(0),
  maxSafe: 2 ** 53 - 1,
  minSafe: -(2 ** 53 - 1),
  beyond32: 2 ** 40 + 7,
  negativeBeyond32: -(2 ** 40) - 7,
  fraction: -1234.5678,
  missing: undefined,
  nothing: null,
  nested: { list: [1, 'two', [3, { four: [true, false] }]], empty: {}, none: [] },
  text: 'naïve café ✓ 日本語 😀 \u0000 end',
}

t.test('values survive a round trip', async (t) => {
  const back = decode<typeof sample>(encode(sample))
  t.ok(back.at instanceof Date, 'a Date comes back as a Date')
  t.equal(back.at.toISOString(), '2024-02-29T23:59:59.999Z', 'with its milliseconds')
  t.equal(back.epoch.getTime(), 0)
  t.equal(back.maxSafe, 2 ** 53 - 1, '2^53-1 stays exact')
  t.equal(back.minSafe, -(2 ** 53 - 1), '-(2^53-1) stays exact')
  t.equal(back.beyond32, 2 ** 40 + 7)
  t.equal(back.negativeBeyond32, -(2 ** 40) - 7)
  t.equal(typeof back.maxSafe, 'number', '64-bit integers decode as numbers, not bigints')
  t.equal(back.fraction, -1234.5678)
  t.ok('missing' in back, 'a key holding undefined is kept')
  t.equal(back.missing, undefined)
  t.equal(back.nothing, null)
  t.strictSame(back.nested, sample.nested, 'nested objects and arrays')
  t.equal(back.text, sample.text, 'unicode, astral planes and NUL')
})

t.test('a bigint of 64 bits decodes as a number', async (t) => {
  t.equal(decode(encode(-(2n ** 62n))), -(2 ** 62))
})

t.test('the bytes of a value do not depend on what was encoded before', async (t) => {
  const first = Buffer.from(encode(sample))
  for (let i = 0; i < 50; i++) encode({ ...sample, maxSafe: i, nested: { list: [i], empty: {}, none: [] } })
  const again = Buffer.from(encode(sample))
  t.ok(first.equals(again), 'encoding the same value twice gives identical bytes')
  t.ok(Buffer.from(new Packr({ useRecords: false, moreTypes: false }).pack(sample)).equals(first), 'a fresh encoder gives the same bytes too')
})

t.test('the bytes are standard msgpack that other decoders read on their own', async (t) => {
  const isMap = (b: number) => (b >= 0x80 && b <= 0x8f) || b === 0xde || b === 0xdf
  const object = encode({ type: 'job_created', data: { job_id: 'job_1' } })
  t.ok(isMap(object[0]!), `an object is a msgpack map (first byte 0x${object[0]!.toString(16)}), not a msgpackr record`)
  const date = encode(new Date('2024-01-01T00:00:00.500Z'))
  t.ok([0xd6, 0xd7, 0xc7].includes(date[0]!), 'a Date is written as an extension')
  t.equal(date[0] === 0xc7 ? date[2] : date[1], 0xff, 'of type -1, the msgpack timestamp')
  const back = unpack(Buffer.from(encode({ type: 'job_created', data: { job_id: 'job_1', n: 2 ** 53 - 1 } })))
  t.strictSame(back, { type: 'job_created', data: { job_id: 'job_1', n: 2 ** 53 - 1 } }, 'a fresh decoder reads a single message')
})
