import { createHash } from 'node:crypto'

/**
 * RFC 6962 / RFC 9162 written out as the RFCs write them, for tests: the reference that the
 * service's tiled trees and proofs are checked against, independent of the code that makes them.
 */
const sha = (...parts: Uint8Array[]) => {
  const h = createHash('sha256')
  for (const p of parts) h.update(p)
  return new Uint8Array(h.digest())
}

export const leafHash = (bytes: Uint8Array): Uint8Array => sha(Uint8Array.of(0), bytes)
export const nodeHash = (l: Uint8Array, r: Uint8Array): Uint8Array => sha(Uint8Array.of(1), l, r)
export const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex')
export const unhex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'))

/** MTH(D[n]) (RFC 6962 §2.1). */
export function mth(leaves: readonly Uint8Array[]): Uint8Array {
  if (leaves.length === 0) return sha()
  if (leaves.length === 1) return leaves[0]!
  let k = 1
  while (k * 2 < leaves.length) k *= 2
  return nodeHash(mth(leaves.slice(0, k)), mth(leaves.slice(k)))
}

/** RFC 9162 §2.1.3.2. */
export function verifyInclusion(index: number, size: number, leaf: Uint8Array, path: readonly Uint8Array[], root: Uint8Array): boolean {
  if (index >= size) return false
  let fn = index
  let sn = size - 1
  let r = leaf
  for (const p of path) {
    if (sn === 0) return false
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r)
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn >>= 1
          sn >>= 1
        }
      }
    } else r = nodeHash(r, p)
    fn >>= 1
    sn >>= 1
  }
  return sn === 0 && hex(r) === hex(root)
}

/** RFC 9162 §2.1.4.2. */
export function verifyConsistency(
  first: number,
  second: number,
  firstRoot: Uint8Array,
  secondRoot: Uint8Array,
  proof: readonly Uint8Array[],
): boolean {
  if (first === second) return proof.length === 0 && hex(firstRoot) === hex(secondRoot)
  if (first === 0 || first > second || proof.length === 0) return false
  let path = proof
  if (Number.isInteger(Math.log2(first))) path = [firstRoot, ...path]
  let fn = first - 1
  let sn = second - 1
  while (fn % 2 === 1) {
    fn >>= 1
    sn >>= 1
  }
  let fr = path[0]!
  let sr = path[0]!
  for (const c of path.slice(1)) {
    if (sn === 0) return false
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr)
      sr = nodeHash(c, sr)
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn >>= 1
          sn >>= 1
        }
      }
    } else sr = nodeHash(sr, c)
    fn >>= 1
    sn >>= 1
  }
  return sn === 0 && hex(fr) === hex(firstRoot) && hex(sr) === hex(secondRoot)
}

/** RFC 8785 for the values a feed event holds (strings, finite numbers, booleans, null, arrays, objects). */
export function jcs(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(jcs).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).sort()
    return `{${keys.map((k) => `${JSON.stringify(k)}:${jcs((value as Record<string, unknown>)[k])}`).join(',')}}`
  }
  return JSON.stringify(value)
}
