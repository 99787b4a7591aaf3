import { createHash } from 'node:crypto'
import t from 'tap'
import { verifyConsistency, verifyInclusion } from '../support/rfc9162.ts'
import {
  appendLeaf,
  changedTiles,
  consistencyRanges,
  edgeOf,
  edgeRoot,
  edgeTiles,
  exportProofRanges,
  inclusionRanges,
  rangeHash,
  rootRange,
  tileName,
  tilesForRanges,
  type MerkleHasher,
} from '../../domain/audit-log.ts'

const sha = (...parts: Uint8Array[]) => {
  const h = createHash('sha256')
  for (const p of parts) h.update(p)
  return new Uint8Array(h.digest())
}
const hasher: MerkleHasher = {
  leaf: (b) => sha(Uint8Array.of(0), b),
  node: (l, r) => sha(Uint8Array.of(1), l, r),
  empty: sha(),
}
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex')

/** RFC 6962's MTH written as the RFC writes it: the reference the tiled tree is checked against. */
function mth(leaves: readonly Uint8Array[]): Uint8Array {
  if (leaves.length === 0) return hasher.empty
  if (leaves.length === 1) return leaves[0]!
  let k = 1
  while (k * 2 < leaves.length) k *= 2
  return hasher.node(mth(leaves.slice(0, k)), mth(leaves.slice(k)))
}

/** Grows a tiled tree leaf by leaf, as the projector does batch by batch, keeping every tile written. */
function grow(count: number, batch: number) {
  const stored = new Map<string, Uint8Array[]>()
  const leaves: Uint8Array[] = []
  let size = 0
  while (size < count) {
    const edge = edgeOf(size, stored)
    for (let i = 0; i < batch && size + i < count; i++) {
      const leaf = hasher.leaf(Buffer.from(`event ${size + i}`))
      leaves.push(leaf)
      appendLeaf(hasher, edge, leaf)
    }
    for (const tile of changedTiles(edge)) stored.set(tileName(tile), [...tile.hashes])
    size = edge.size
  }
  return { stored, leaves }
}

t.test('the RFC 6962 known answers: the certificate-transparency test vectors', async (t) => {
  const inputs = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f']
  const roots = [
    '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
    'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
    'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
    '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
    'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
    '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
  ]
  const leaves = inputs.map((h) => hasher.leaf(Buffer.from(h, 'hex')))
  for (let n = 1; n <= 8; n++) {
    const stored = new Map<string, Uint8Array[]>()
    const edge = edgeOf(0, stored)
    for (const leaf of leaves.slice(0, n)) appendLeaf(hasher, edge, leaf)
    t.equal(hex(edgeRoot(hasher, edge)), roots[n - 1], `root of ${n}`)
  }
  t.equal(hex(rangeHash(hasher, new Map(), rootRange(0))), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'the empty tree')
})

t.test('a tiled tree has the roots of RFC 6962 at every size, across tile levels', async (t) => {
  for (const batch of [1, 37, 1000]) {
    const { stored, leaves } = grow(66_000, batch)
    for (const size of [1, 2, 3, 255, 256, 257, 511, 512, 65_535, 65_536, 65_537, 66_000]) {
      const tiles = new Map([...stored].filter(([name]) => tilesForRanges([rootRange(size)]).some((k) => tileName(k) === name)))
      t.equal(hex(rangeHash(hasher, tiles, rootRange(size))), hex(mth(leaves.slice(0, size))), `size ${size}, batches of ${batch}`)
    }
    const edge = edgeOf(66_000, stored)
    t.equal(hex(edgeRoot(hasher, edge)), hex(mth(leaves)), 'the edge alone gives the root')
    t.ok(edgeTiles(66_000).every((k) => k.index === Math.floor(Math.floor(66_000 / 256 ** k.level) / 256)))
  }
})

t.test('inclusion and consistency paths verify by RFC 9162 from tiles alone', async (t) => {
  const { stored, leaves } = grow(1_200, 100)
  const root = (n: number) => rangeHash(hasher, stored, rootRange(n))
  let checked = 0
  for (const size of [1, 2, 5, 8, 255, 256, 257, 700, 1_024, 1_200]) {
    for (const index of [0, 1, size >> 1, size - 2, size - 1].filter((i) => i >= 0 && i < size)) {
      const path = inclusionRanges(index, size).map((r) => rangeHash(hasher, stored, r))
      t.ok(verifyInclusion(index, size, leaves[index]!, path, root(size)), `leaf ${index} of ${size}`)
      t.notOk(verifyInclusion(index, size, leaves[(index + 1) % size]!, path, root(size)) && size > 1, 'another leaf is refused')
      checked++
    }
    for (const first of [1, 2, 3, 7, 64, 255, 256, 600].filter((f) => f <= size)) {
      const proof = consistencyRanges(first, size).map((r) => rangeHash(hasher, stored, r))
      t.ok(verifyConsistency(first, size, root(first), root(size), proof), `${first} → ${size}`)
      checked++
    }
  }
  t.ok(checked > 60)
})

t.test('an export proof covers exactly the ranges without exported leaves', async (t) => {
  const { stored, leaves } = grow(1_000, 1_000)
  const exported = [3, 4, 300, 301, 302, 999]
  const ranges = exportProofRanges(exported, 1_000)
  const given = new Map(ranges.map((r) => [`${r.start}-${r.end}`, rangeHash(hasher, stored, r)]))
  const rootFrom = (start: number, end: number): Uint8Array => {
    const known = given.get(`${start}-${end}`)
    if (known) return known
    if (end - start === 1) return leaves[start]!
    let k = 1
    while (k * 2 < end - start) k *= 2
    return hasher.node(rootFrom(start, start + k), rootFrom(start + k, end))
  }
  t.equal(hex(rootFrom(0, 1_000)), hex(mth(leaves)))
  t.ok(
    ranges.every((r) => !exported.some((l) => l >= r.start && l < r.end)),
    'no range hides an exported leaf',
  )
  t.ok(ranges.length < 40, `${ranges.length} ranges`)
  t.same(exportProofRanges([], 10), [{ start: 0, end: 10 }])
})
