/**
 * JSON with object keys sorted (by UTF-16 code units, as `Array.prototype.sort` compares): the same
 * value written in another key order reads the same. Numbers and strings are written as
 * `JSON.stringify` writes them, so for the values JSON can hold this is RFC 8785 (JCS), which the
 * audit log's leaves are hashed over (docs/audit.md); the projector canonicalises every event.
 * Members whose value is `undefined` (or a function) are left out, and such an array item is
 * `null`, as `JSON.stringify` does; a value with a `toJSON` is written as it returns.
 */
export function canonicalJson(value: unknown): string {
  let indexKeys = false
  // Fast path: the engine's own stringify, with each object whose keys are out of order replaced
  // by a copy in order (2–3 times faster than writing the text here). A copy cannot reorder keys
  // that are array indices ("2", "10"): an object lists those first, in numeric order, so a value
  // holding any is written out below instead.
  const text = JSON.stringify(value, function (_key, member: unknown) {
    if (member === null || typeof member !== 'object' || Array.isArray(member)) return member
    const keys = Object.keys(member)
    if (keys.length > 0 && arrayIndex.test(keys[0]!)) indexKeys = true
    let ordered = true
    for (let i = 1; ordered && i < keys.length; i++) ordered = keys[i - 1]! < keys[i]!
    if (ordered) return member
    const copy: Record<string, unknown> = {}
    for (const key of keys.sort()) copy[key] = (member as Record<string, unknown>)[key]
    return copy
  })
  if (!indexKeys) return text ?? 'null'
  return write(value) ?? 'null'
}

/** A key an object orders before its others, numerically: an array index. */
const arrayIndex = /^(?:0|[1-9]\d*)$/

function write(value: unknown): string | undefined {
  if (value === null || typeof value !== 'object') return JSON.stringify(value)
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return write((value as { toJSON(): unknown }).toJSON())
  if (Array.isArray(value)) {
    let out = '['
    for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + (write(value[i]) ?? 'null')
    return out + ']'
  }
  const record = value as Record<string, unknown>
  const keys = Object.keys(record).sort()
  let out = '{'
  let first = true
  for (const key of keys) {
    const member = write(record[key])
    if (member === undefined) continue
    out += (first ? '' : ',') + JSON.stringify(key) + ':' + member
    first = false
  }
  return out + '}'
}
