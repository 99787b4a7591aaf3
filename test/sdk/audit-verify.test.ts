import { randomBytes } from 'node:crypto'
import { isDeepStrictEqual } from 'node:util'
import {
  AuditVerificationError,
  canonicalJson,
  EMPTY_TREE_HASH,
  leafHash,
  leafHashOfBytes,
  nodeHash,
  verifyCheckpoint,
  verifyConsistency,
  verifyInclusion,
  verifyMultiInclusion,
  type AuditFailureCode,
  type ConsistencyProof,
  type InclusionProof,
  type ProofRange,
  type TreeHead,
} from '@jobsvc/sdk'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { copy, flipBit, MerkleTree, randomTree, signCheckpoint, signingKey } from './audit-support.ts'

// The offline verifier's pure functions (docs/audit.md): canonical JSON, RFC 6962 hashes against
// the Certificate Transparency test vectors, every proof of every tree up to 70 leaves with its
// mutations, checkpoints and their keys, and the consistency forgeries GHSA-672p-m5jq-mrh8 warns of.

/** Runs `verify` and answers the refusal's code and message, or null when it accepted. */
function refusal(verify: () => void): { code: AuditFailureCode; message: string } | null {
  try {
    verify()
    return null
  } catch (error) {
    if (error instanceof AuditVerificationError) return { code: error.code, message: error.message }
    throw error
  }
}

function refuses(t: Test, verify: () => void, code: AuditFailureCode, message: RegExp, what: string) {
  const r = refusal(verify)
  t.ok(r, `${what}: refused`)
  t.equal(r?.code, code, `${what}: ${r?.message}`)
  t.match(r?.message, message)
}

t.test('canonical JSON is RFC 8785', async (t) => {
  // RFC 8785 §3.2.3: sorted by UTF-16 code units, so the emoji (a surrogate pair) sorts before U+FB33.
  const sorting = { '\u20ac': 'Euro Sign', '\r': 'CR', '\ufb33': 'Dalet', '1': 'One', '\ud83d\ude00': 'Emoji', '\u0080': 'Control', '\u00f6': 'o' }
  t.equal(
    canonicalJson(sorting),
    '{"\\r":"CR","1":"One","\u0080":"Control","\u00f6":"o","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji","\ufb33":"Dalet"}',
  )
  // RFC 8785 §3.2.2's example, parsed from its JSON text.
  const example = JSON.parse(
    '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", "literals": [null, true, false]}',
  )
  t.equal(
    canonicalJson(example),
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
  )
  t.equal(canonicalJson([1.0, 1e-7, 1e21, -0, 0.1 + 0.2, 9007199254740993]), '[1,1e-7,1e+21,0,0.30000000000000004,9007199254740992]')
  t.equal(
    canonicalJson({ b: '\b\f\n\r\t\u0001\u001f\u007f\u2028', a: { d: [], c: {} } }),
    '{"a":{"c":{},"d":[]},"b":"\\b\\f\\n\\r\\t\\u0001\\u001f\u007f\u2028"}',
  )
  for (const [value, why] of [
    [NaN, /NaN/],
    [{ a: [Infinity] }, /\$\.a\[0\] is Infinity/],
    [JSON.parse('{"big": 1e999}'), /\$\.big is Infinity/],
    ['\ud800', /lone UTF-16 surrogate/],
    [{ '\udc00': 1 }, /lone UTF-16 surrogate/],
    [{ a: undefined }, /\$\.a is undefined/],
    [new Date(0), /instance of Date/],
    [10n, /a bigint/],
  ] as const) {
    t.throws(() => canonicalJson(value), { name: 'TypeError', message: why })
  }
  // Any JSON value: the same value back, whatever order its members were written in, and a fixed point.
  const reversed = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(reversed)
      : typeof v === 'object' && v !== null
        ? Object.fromEntries(
            Object.entries(v)
              .reverse()
              .map(([k, x]) => [k, reversed(x)]),
          )
        : v
  await fc.assert(
    fc.property(fc.jsonValue(), (value) => {
      const text = canonicalJson(value)
      const back = JSON.parse(text)
      return isDeepStrictEqual(back, JSON.parse(JSON.stringify(value))) && canonicalJson(reversed(value)) === text && canonicalJson(back) === text
    }),
  )
})

// Certificate Transparency's RFC 6962 vectors (transparency-dev/merkle, proof/verify_test.go):
// eight leaves, the roots of their first 1..8, and known paths (leaf indices here from 0).
const ctLeaves = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map((h) =>
  Buffer.from(h, 'hex'),
)
const ctRoots = [
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
]
const ctInclusion: Array<[number, number, string[]]> = [
  [0, 1, []],
  [
    0,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    5,
    8,
    [
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
  [2, 3, ['fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125']],
  [
    1,
    5,
    [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    ],
  ],
]
const ctConsistency: Array<[number, number, string[]]> = [
  [1, 1, []],
  [
    1,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    6,
    8,
    [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
  [2, 5, ['5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e', 'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b']],
  [
    6,
    7,
    [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
]
const head = (size: number, root = ctRoots[size - 1]!): TreeHead => ({ tree_size: size, root_hash: root })

t.test('RFC 6962 known answers: the Certificate Transparency vectors', async (t) => {
  t.equal(EMPTY_TREE_HASH, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'MTH({}) is SHA-256("")')
  const tree = new MerkleTree(ctLeaves.map((l) => leafHashOfBytes(l)))
  t.same(
    ctRoots.map((_, i) => tree.root(i + 1)),
    ctRoots,
    'the roots of sizes 1 to 8',
  )
  t.equal(nodeHash(leafHashOfBytes(ctLeaves[0]!), leafHashOfBytes(ctLeaves[1]!)).toString('hex'), ctRoots[1], 'node_hash of the first two leaves')
  for (const [index, size, path] of ctInclusion) {
    t.same(tree.inclusionPath(index, size), path, `the test tree builds the known path of leaf ${index} in ${size}`)
    const proof = { leaf_index: index, tree_size: size, inclusion_path: path }
    t.equal(
      refusal(() => verifyInclusion(leafHashOfBytes(ctLeaves[index]!), proof, head(size))),
      null,
      `leaf ${index} of ${size} verifies`,
    )
    t.ok(
      refusal(() => verifyInclusion(leafHashOfBytes(Buffer.from('WrongLeaf')), proof, head(size))),
      'another leaf does not',
    )
  }
  for (const [first, second, path] of ctConsistency) {
    t.same(tree.consistencyPath(first, second), path, `the test tree builds the known path from ${first} to ${second}`)
    const proof = { first, second, consistency_path: path }
    t.equal(
      refusal(() => verifyConsistency(head(first), head(second), proof)),
      null,
      `${first} to ${second} verifies`,
    )
    if (first !== second)
      t.ok(
        refusal(() => verifyConsistency(head(second), head(first), { ...proof, first: second, second: first })),
        'reversed, it does not',
      )
  }
})

const replaced = <T>(list: T[], i: number, item: T): T[] => list.map((x, j) => (j === i ? item : x))
const without = <T>(list: T[], i: number): T[] => list.filter((_, j) => j !== i)

/** The ways to spoil a path: each hash with a bit flipped or replaced, one hash fewer or more, two swapped. */
function spoiledPaths(path: string[], extras: string[]): Array<[string, string[]]> {
  const spoiled: Array<[string, string[]]> = []
  path.forEach((hash, i) => {
    spoiled.push([`hash ${i} with bit ${(i * 37) % 256} flipped`, replaced(path, i, flipBit(hash, (i * 37) % 256))])
    spoiled.push([`hash ${i} replaced`, replaced(path, i, randomBytes(32).toString('hex'))])
    spoiled.push([`hash ${i} removed`, without(path, i)])
    if (i > 0 && path[i - 1] !== hash) spoiled.push([`hashes ${i - 1} and ${i} swapped`, replaced(replaced(path, i, path[i - 1]!), i - 1, hash)])
  })
  for (const extra of extras) {
    spoiled.push([`${extra.slice(0, 6)}… appended`, [...path, extra]])
    spoiled.push([`${extra.slice(0, 6)}… prepended`, [extra, ...path]])
  }
  return spoiled
}

t.test('every inclusion proof of every tree of 1 to 70 leaves verifies, and every mutation of it is refused', async (t) => {
  const tree = randomTree(70)
  let proofs = 0
  const accepted: string[] = []
  for (let size = 1; size <= 70; size++) {
    const cp = { tree_size: size, root_hash: tree.root(size) }
    for (let index = 0; index < size; index++) {
      const leaf = tree.leafHashes[index]!
      const proof: InclusionProof = { leaf_index: index, tree_size: size, inclusion_path: tree.inclusionPath(index, size) }
      const r = refusal(() => verifyInclusion(leaf, proof, cp))
      if (r) accepted.push(`the genuine proof of ${index} in ${size} was refused: ${r.message}`)
      proofs++
      const mutations: Array<[string, () => void]> = [
        ...spoiledPaths(proof.inclusion_path, [cp.root_hash, leaf.toString('hex'), randomBytes(32).toString('hex')]).map(
          ([what, path]): [string, () => void] => [what, () => verifyInclusion(leaf, { ...proof, inclusion_path: path }, cp)],
        ),
        ['the leaf with a bit flipped', () => verifyInclusion(flipBit(leaf.toString('hex'), index % 256), proof, cp)],
        ['the root with a bit flipped', () => verifyInclusion(leaf, proof, { ...cp, root_hash: flipBit(cp.root_hash, 255 - (index % 256)) })],
        ['leaf_index - 1', () => verifyInclusion(leaf, { ...proof, leaf_index: index - 1 }, cp)],
        ['leaf_index + 1', () => verifyInclusion(leaf, { ...proof, leaf_index: index + 1 }, cp)],
        ['leaf_index ^ 2', () => verifyInclusion(leaf, { ...proof, leaf_index: index ^ 2 }, cp)],
        ['the proof for a size one larger', () => verifyInclusion(leaf, { ...proof, tree_size: size + 1 }, cp)],
        ['the proof for a size one smaller', () => verifyInclusion(leaf, { ...proof, tree_size: size - 1 }, cp)],
        ['the proof for twice the size', () => verifyInclusion(leaf, { ...proof, tree_size: size * 2 }, cp)],
      ]
      if (size > 1) mutations.push(['another leaf', () => verifyInclusion(tree.leafHashes[(index + 1) % size]!, proof, cp)])
      for (const [what, verify] of mutations) if (refusal(verify) === null) accepted.push(`leaf ${index} of ${size}, ${what}: accepted`)
    }
  }
  t.equal(proofs, (70 * 71) / 2)
  t.same(accepted, [], 'every genuine proof verified and no mutation did')
})

t.test('every consistency proof between trees of 1 to 70 leaves verifies, and every mutation of it is refused', async (t) => {
  const tree = randomTree(70)
  const accepted: string[] = []
  for (let second = 1; second <= 70; second++) {
    const newer = { tree_size: second, root_hash: tree.root(second) }
    for (let first = 1; first <= second; first++) {
      const older = { tree_size: first, root_hash: tree.root(first) }
      const proof: ConsistencyProof = { first, second, consistency_path: tree.consistencyPath(first, second) }
      const r = refusal(() => verifyConsistency(older, newer, proof))
      if (r) accepted.push(`the genuine proof from ${first} to ${second} was refused: ${r.message}`)
      const mutations: Array<[string, () => void]> = [
        ...spoiledPaths(proof.consistency_path, [older.root_hash, newer.root_hash, randomBytes(32).toString('hex')]).map(
          ([what, path]): [string, () => void] => [what, () => verifyConsistency(older, newer, { ...proof, consistency_path: path })],
        ),
        ['the older root with a bit flipped', () => verifyConsistency({ ...older, root_hash: flipBit(older.root_hash, first % 256) }, newer, proof)],
        ['the newer root with a bit flipped', () => verifyConsistency(older, { ...newer, root_hash: flipBit(newer.root_hash, second % 256) }, proof)],
        ['first + 1', () => verifyConsistency(older, newer, { ...proof, first: first + 1 })],
        ['first - 1', () => verifyConsistency(older, newer, { ...proof, first: first - 1 })],
        ['second + 1', () => verifyConsistency(older, newer, { ...proof, second: second + 1 })],
        ['second * 2', () => verifyConsistency(older, newer, { ...proof, second: second * 2 })],
      ]
      // Between equal sizes the genuine proof is the empty path, and the two checkpoints are one.
      if (first < second) {
        mutations.push(
          [
            'the checkpoints swapped',
            () => verifyConsistency(newer, older, { first: second, second: first, consistency_path: proof.consistency_path }),
          ],
          ['the roots swapped', () => verifyConsistency({ ...older, root_hash: newer.root_hash }, { ...newer, root_hash: older.root_hash }, proof)],
          ['an empty path', () => verifyConsistency(older, newer, { ...proof, consistency_path: [] })],
        )
      }
      for (const [what, verify] of mutations) if (refusal(verify) === null) accepted.push(`${first} to ${second}, ${what}: accepted`)
    }
  }
  t.same(accepted, [], 'every genuine proof verified and no mutation did')
})

t.test('forged consistency proofs (GHSA-672p-m5jq-mrh8) are refused, each with its reason', async (t) => {
  const tree = randomTree(120)
  const at = (size: number): TreeHead => ({ tree_size: size, root_hash: tree.root(size) })
  const other = { tree_size: 100, root_hash: randomBytes(32).toString('hex') }
  refuses(
    t,
    () => verifyConsistency(at(100), other, { first: 100, second: 100, consistency_path: [] }),
    'root_differs',
    /both checkpoints claim 100 leaves but their roots differ/,
    'equal sizes, different roots, empty path',
  )
  refuses(
    t,
    () => verifyConsistency(at(100), other, { first: 100, second: 100, consistency_path: [tree.root(100)] }),
    'root_differs',
    /roots differ/,
    'equal sizes, different roots, a path that would "prove" it',
  )
  refuses(
    t,
    () => verifyConsistency(at(100), at(100), { first: 100, second: 100, consistency_path: [tree.root(100)] }),
    'consistency_failed',
    /must be empty; this one has 1 hash$/,
    'equal sizes with a path',
  )
  refuses(
    t,
    () => verifyConsistency(at(120), at(100), { first: 120, second: 100, consistency_path: tree.consistencyPath(100, 120) }),
    'tree_shrank',
    /^tree shrank from 120 to 100 leaves: the newest events were truncated$/,
    'first > second',
  )
  refuses(
    t,
    () => verifyConsistency({ tree_size: 0, root_hash: EMPTY_TREE_HASH }, at(5), { first: 0, second: 5, consistency_path: [] }),
    'consistency_failed',
    /from 0 leaves proves nothing/,
    'first = 0',
  )
  const path = tree.consistencyPath(64, 100)
  refuses(
    t,
    () => verifyConsistency(at(64), at(100), { first: 64, second: 100, consistency_path: [tree.root(64), ...path] }),
    'consistency_failed',
    /has 2 hashes; from 64 to 100 leaves it needs 1$/,
    'the old root prepended to a power-of-two proof',
  )
  const path70 = tree.consistencyPath(70, 100)
  t.equal(path70.length, 7)
  refuses(
    t,
    () => verifyConsistency(at(70), at(100), { first: 70, second: 100, consistency_path: path70.slice(0, -1) }),
    'consistency_failed',
    /has 6 hashes; from 70 to 100 leaves it needs 7$/,
    'a hash missing',
  )
  refuses(
    t,
    () => verifyConsistency(at(70), at(100), { first: 70, second: 100, consistency_path: [...path70, tree.root(100)] }),
    'consistency_failed',
    /has 8 hashes; from 70 to 100 leaves it needs 7$/,
    'a hash too many',
  )
  // A verifier without the final "sn is 0" check accepts an empty remainder after the prepended old
  // root, for a newer "tree" whose root is the older root: the log claims to have grown without change.
  refuses(
    t,
    () => verifyConsistency(at(64), { tree_size: 100, root_hash: tree.root(64) }, { first: 64, second: 100, consistency_path: [] }),
    'consistency_failed',
    /has 0 hashes; from 64 to 100 leaves it needs 1$/,
    'a grown tree with the old root and no path',
  )
  refuses(
    t,
    () => verifyConsistency(at(70), at(100), { first: 70, second: 100, consistency_path: randomTree(100).consistencyPath(70, 100) }),
    'consistency_failed',
    /^the consistency proof leads to \S+ for the first 70 leaves, not the older checkpoint's root/,
    'the proof between the same sizes of another log',
  )
  refuses(
    t,
    () => verifyConsistency(at(50), at(100), { first: 50, second: 90, consistency_path: tree.consistencyPath(50, 90) }),
    'consistency_failed',
    /is from 50 to 90 leaves; the checkpoints have 50 and 100/,
    'a proof for other sizes',
  )
  refuses(
    t,
    () => verifyConsistency(at(50), at(100), { first: 50, second: 100, consistency_path: ['AB'.repeat(32)] }),
    'malformed',
    /not a hash \(64 lower-case hex/,
    'upper-case hex',
  )
  refuses(
    t,
    () => verifyConsistency(at(50), at(100), { first: 50.5, second: 100, consistency_path: [] }),
    'malformed',
    /first is not a non-negative integer/,
    'a fractional size',
  )
})

t.test('the inclusion verifier refuses indices outside the tree and says why', async (t) => {
  const tree = randomTree(20)
  const cp = { tree_size: 20, root_hash: tree.root(20) }
  const leaf = tree.leafHashes[3]!
  refuses(
    t,
    () => verifyInclusion(leaf, { leaf_index: 20, tree_size: 20, inclusion_path: tree.inclusionPath(3, 20) }, cp),
    'leaf_out_of_range',
    /leaf 20 is beyond the tree of 20 leaves/,
    'leaf_index = tree_size',
  )
  refuses(
    t,
    () => verifyInclusion(leaf, { leaf_index: -1, tree_size: 20, inclusion_path: [] }, cp),
    'malformed',
    /leaf_index is not a non-negative integer/,
    'a negative index',
  )
  refuses(
    t,
    () => verifyInclusion(leaf, { leaf_index: 3, tree_size: 21, inclusion_path: tree.inclusionPath(3, 20) }, cp),
    'inclusion_failed',
    /a tree of 21 leaves, the checkpoint's has 20/,
    'a proof of another size',
  )
  refuses(
    t,
    () => verifyInclusion(leaf, { leaf_index: 3, tree_size: 20, inclusion_path: tree.inclusionPath(3, 20).slice(1) }, cp),
    'inclusion_failed',
    /has 4 hashes; leaf 3 of a tree of 20 leaves needs 5/,
    'a path too short',
  )
  refuses(
    t,
    () => verifyInclusion(tree.leafHashes[4]!, { leaf_index: 3, tree_size: 20, inclusion_path: tree.inclusionPath(3, 20) }, cp),
    'inclusion_failed',
    /the leaf is not at index 3/,
    'another leaf',
  )
  refuses(
    t,
    () => verifyInclusion(Buffer.alloc(31), { leaf_index: 3, tree_size: 20, inclusion_path: [] }, cp),
    'malformed',
    /31 bytes, not 32/,
    'a short leaf hash',
  )
  const event = {
    aggregate: 'job',
    aggregate_id: 'job_1',
    data: { n: 1 },
    id: 'evt_1',
    occurred_at: '2026-06-01T00:00:00.000Z',
    project_id: 'prj_audit',
    type: 'job_created',
  }
  const withEvent = new MerkleTree([leafHash(event), ...tree.leafHashes.slice(1)])
  t.equal(
    refusal(() =>
      verifyInclusion(
        event,
        { leaf_index: 0, tree_size: 20, inclusion_path: withEvent.inclusionPath(0, 20) },
        { tree_size: 20, root_hash: withEvent.root(20) },
      ),
    ),
    null,
    'a leaf object verifies by its JCS hash',
  )
  t.equal(leafHash(event).toString('hex'), leafHashOfBytes(Buffer.from(canonicalJson(event))).toString('hex'))
})

t.test('checkpoints: the signature, the key and its window', async (t) => {
  const until = '2026-07-01T00:00:00Z'
  const old = signingKey('2026-01-01T00:00:00Z', until)
  const current = signingKey(until, null)
  const keys = { data: [old.entry, current.entry] }
  const root = randomBytes(32).toString('hex')
  const cp = signCheckpoint(current, { tree_size: 1234, root_hash: root, issued_at: '2026-11-26T23:00:00.000Z' })
  t.same(verifyCheckpoint(cp, keys), { checkpoint: cp, key: current.entry }, 'a checkpoint signed by the current key verifies')
  t.same(verifyCheckpoint(cp, keys.data).key, current.entry, 'the keys as a bare array too')
  t.ok(
    verifyCheckpoint(signCheckpoint(old, { tree_size: 10, root_hash: root, issued_at: '2026-06-30T23:59:59.999Z' }), keys),
    'the rotated key, for what it signed inside its window',
  )

  const stranger = signingKey()
  refuses(
    t,
    () => verifyCheckpoint(signCheckpoint(stranger, { tree_size: 1234, root_hash: root }), keys),
    'unknown_key',
    new RegExp(
      `^the checkpoint is signed by unknown key ${stranger.entry.key_id} \\(the keys document lists ${old.entry.key_id}, ${current.entry.key_id}\\)$`,
    ),
    'an unknown key',
  )
  refuses(
    t,
    () => verifyCheckpoint(signCheckpoint(stranger, { tree_size: 1234, root_hash: root, key_id: current.entry.key_id }), keys),
    'invalid_signature',
    /signature does not verify with key/,
    'another key claiming the current key id',
  )
  for (const [member, value] of [
    ['tree_size', 1235],
    ['root_hash', flipBit(root, 0)],
    ['issued_at', '2026-11-26T23:00:00.001Z'],
    ['project_id', 'prj_other'],
  ] as const) {
    refuses(t, () => verifyCheckpoint({ ...cp, [member]: value }, keys), 'invalid_signature', /does not verify/, `${member} changed after signing`)
  }
  refuses(
    t,
    () => verifyCheckpoint({ ...cp, signature: flipBit(Buffer.from(cp.signature, 'base64').toString('hex'), 0, 'base64') }, keys),
    'invalid_signature',
    /does not verify/,
    'a bit of the signature flipped',
  )
  refuses(
    t,
    () => verifyCheckpoint(signCheckpoint(old, { tree_size: 10, root_hash: root, issued_at: '2026-07-01T00:00:00.000Z' }), keys),
    'outside_key_window',
    new RegExp(`issued at 2026-07-01T00:00:00.000Z, outside the window \\[2026-01-01T00:00:00Z, ${until}\\) of its key ${old.entry.key_id}`),
    'the old key at the instant its window closed',
  )
  refuses(
    t,
    () => verifyCheckpoint(signCheckpoint(old, { tree_size: 10, root_hash: root, issued_at: '2026-11-26T23:00:00.000Z' }), keys),
    'outside_key_window',
    /outside the window/,
    'the old key after the rotation',
  )
  refuses(
    t,
    () => verifyCheckpoint(signCheckpoint(current, { tree_size: 10, root_hash: root, issued_at: '2026-06-01T00:00:00.000Z' }), keys),
    'outside_key_window',
    /outside the window \[2026-07-01T00:00:00Z, open\)/,
    'the new key before its window opened',
  )
  const offset = signingKey('2026-07-01T02:00:00+02:00', null)
  t.ok(
    verifyCheckpoint(signCheckpoint(offset, { tree_size: 1, root_hash: root, issued_at: '2026-07-01T00:00:00.000Z' }), [offset.entry]),
    'windows compare as instants, whatever their offset',
  )

  refuses(
    t,
    () => verifyCheckpoint(cp, { data: [{ ...current.entry, key_id: old.entry.key_id }] }),
    'malformed',
    /public key has the id .*: the keys document is inconsistent/,
    'a key listed under another id',
  )
  refuses(
    t,
    () => verifyCheckpoint(cp, { keys: [] } as never),
    'malformed',
    /not the answer of GET \/jobsvc\/v1\/audit\/keys/,
    'a keys document of another shape',
  )
  refuses(
    t,
    () => verifyCheckpoint({ ...cp, issued_at: '2026-11-26T23:00:00Z' }, keys),
    'malformed',
    /issued_at is not an RFC 3339 UTC time with milliseconds/,
    'issued_at without milliseconds',
  )
  refuses(
    t,
    () => verifyCheckpoint({ ...cp, signature: cp.signature.replace(/=+$/, '') }, keys),
    'malformed',
    /signature is not 64 bytes in standard base64/,
    'a signature without its padding',
  )
  refuses(
    t,
    () => verifyCheckpoint({ ...cp, tree_size: 0, root_hash: root }, keys),
    'malformed',
    /0 leaves but a root other than the empty tree's/,
    'an empty tree with a root',
  )
  refuses(
    t,
    () => verifyCheckpoint(cp, { data: [{ ...current.entry, algorithm: 'ES256' }] }),
    'unknown_key',
    /an ES256 key; this verifier knows Ed25519/,
    'a key of another algorithm',
  )
})

t.test('multi-leaf proofs: every subset of random trees verifies; every spoiled proof is refused', async (t) => {
  const accepted: string[] = []
  await fc.assert(
    fc.property(
      fc
        .integer({ min: 1, max: 150 })
        .chain((size) => fc.tuple(fc.constant(size), fc.uniqueArray(fc.nat(size - 1), { maxLength: Math.min(size, 12) }))),
      ([size, exported]) => {
        const tree = randomTree(size)
        const cp = { tree_size: size, root_hash: tree.root(size) }
        const leaves = new Map(exported.map((i) => [i, tree.leafHashes[i]!]))
        const proof = tree.rangeProof(size, exported)
        const genuine = refusal(() => verifyMultiInclusion(leaves, proof, cp))
        if (genuine) accepted.push(`size ${size}, leaves ${exported}: genuine proof refused: ${genuine.message}`)
        const spoil = (what: string, l: Map<number, Buffer>, p: ProofRange[]) => {
          if (refusal(() => verifyMultiInclusion(l, p, cp)) === null) accepted.push(`size ${size}, leaves ${exported}, ${what}: accepted`)
        }
        proof.forEach((range, i) => {
          spoil(`range ${i} dropped`, leaves, without(proof, i))
          spoil(`range ${i}'s hash flipped`, leaves, replaced(proof, i, { ...range, hash: flipBit(range.hash, i % 256) }))
          spoil(`range ${i} listed twice`, leaves, [...proof, range])
          if (range.end - range.start > 1) spoil(`range ${i} shortened`, leaves, replaced(proof, i, { ...range, end: range.end - 1 }))
        })
        for (const index of exported) {
          spoil(`leaf ${index}'s hash flipped`, new Map(leaves).set(index, Buffer.from(flipBit(leaves.get(index)!.toString('hex'), 7), 'hex')), proof)
          const without = new Map(leaves)
          without.delete(index)
          spoil(`leaf ${index} missing`, without, proof)
          spoil(`a range hiding leaf ${index}`, leaves, [...proof, { start: index, end: index + 1, hash: tree.leafHashes[index]!.toString('hex') }])
        }
        spoil('a leaf beyond the tree', new Map(leaves).set(size, randomBytes(32)), proof)
        if (size > 2) spoil('a range the recursion never visits', leaves, [...proof, { start: 1, end: 3, hash: tree.hash(1, 3).toString('hex') }])
        if (exported.length > 0) spoil('the root added as a range', leaves, [...proof, { start: 0, end: size, hash: cp.root_hash }])
        return true
      },
    ),
    { numRuns: 300 },
  )
  t.same(accepted, [], 'every genuine proof verified and no spoiled one did')
})

t.test('multi-leaf proofs: the refusals name the leaf or range', async (t) => {
  const tree = randomTree(40)
  const cp = { tree_size: 40, root_hash: tree.root(40) }
  const exported = [3, 17, 18]
  const leaves = new Map(exported.map((i) => [i, tree.leafHashes[i]!]))
  const proof = tree.rangeProof(40, exported)
  t.equal(
    refusal(() => verifyMultiInclusion(leaves, proof, cp)),
    null,
    'the genuine proof verifies',
  )
  const around17 = proof.findIndex((r) => r.start <= 16 && r.end > 16)
  refuses(
    t,
    () => verifyMultiInclusion(leaves, without(proof, around17), cp),
    'leaf_not_covered',
    /^leaf 16 is neither in the export nor covered by the proof$/,
    'a range dropped',
  )
  const without17 = new Map(leaves)
  without17.delete(17)
  refuses(
    t,
    () => verifyMultiInclusion(without17, proof, cp),
    'leaf_not_covered',
    /^leaf 17 is neither in the export nor covered by the proof$/,
    'an exported leaf missing',
  )
  refuses(
    t,
    () => verifyMultiInclusion(leaves, [...proof, { start: 16, end: 20, hash: tree.hash(16, 20).toString('hex') }], cp),
    'invalid_proof_range',
    /proof range \[16, 20\) holds exported leaf 17: it would hide that leaf/,
    'a range over exported leaves',
  )
  refuses(
    t,
    () => verifyMultiInclusion(new Map(leaves).set(40, randomBytes(32)), proof, cp),
    'leaf_out_of_range',
    /leaf 40 is beyond the checkpoint's tree of 40 leaves/,
    'a leaf beyond the tree',
  )
  refuses(
    t,
    () => verifyMultiInclusion(leaves, [...proof, { start: 36, end: 41, hash: EMPTY_TREE_HASH }], cp),
    'invalid_proof_range',
    /\[36, 41\) is not a range of the tree of 40 leaves/,
    'a range beyond the tree',
  )
  refuses(
    t,
    () => verifyMultiInclusion(leaves, [...proof, { start: 5, end: 7, hash: tree.hash(5, 7).toString('hex') }], cp),
    'invalid_proof_range',
    /\[5, 7\) is never visited by the recursion/,
    'a range the recursion never visits',
  )
  refuses(
    t,
    () => verifyMultiInclusion(new Map(leaves).set(18, tree.leafHashes[19]!), proof, cp),
    'root_mismatch',
    /lead to root .*, not the checkpoint's .*: an exported event was altered/,
    'an altered leaf',
  )
  t.equal(
    refusal(() => verifyMultiInclusion(new Map(), [], { tree_size: 0, root_hash: EMPTY_TREE_HASH })),
    null,
    'the empty tree, with no leaf and no range',
  )
  t.equal(
    refusal(() => verifyMultiInclusion(new Map(), [{ start: 0, end: 40, hash: cp.root_hash }], cp)),
    null,
    'no leaf: the root as the one range',
  )
  t.ok(copy(proof), 'proofs are plain JSON')
})
