/**
 * The strings the log and the read models hold exactly. Postgres `text` refuses U+0000; its json
 * parser refuses the escape `\u0000` wherever it turns json into text (`jsonb`,
 * `json_populate_recordset`) and an unpaired surrogate escape everywhere; and the log's msgpack
 * encoding writes an unpaired surrogate as UTF-8 replacement bytes, so it would not read back
 * even from the log. Every other string (quotes, backslashes, the text `\u0000`, U+FFFE, U+2028,
 * control characters, surrogate pairs) round-trips unchanged.
 */

const unstorable = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
const everyUnstorable = new RegExp(unstorable.source, 'g')

/** No U+0000 and no unpaired surrogate. */
export function isStorableText(s: string): boolean {
  return !unstorable.test(s)
}

/** `s` with each U+0000 and each unpaired surrogate replaced by U+FFFD (what a UTF-8 decoder shows for one). */
export function toStorableText(s: string): string {
  return isStorableText(s) ? s : s.replace(everyUnstorable, '\ufffd')
}

/** Where an unstorable string sits in a JSON value: the keys and indexes leading to it, and whether it is a key there. */
export interface UnstorablePlace {
  path: Array<string | number>
  isKey: boolean
}

interface Visit {
  value: unknown
  key: string | number | null
  parent: Visit | null
}

function pathOf(visit: Visit): Array<string | number> {
  const path: Array<string | number> = []
  for (let v: Visit | null = visit; v !== null && v.key !== null; v = v.parent) path.push(v.key)
  return path.reverse()
}

/**
 * The first string of a JSON value, key or value at any depth, that is not storable text; null
 * when there is none. Walks without recursion, since the value may be untrusted and deep.
 */
export function findUnstorableText(value: unknown): UnstorablePlace | null {
  const stack: Visit[] = [{ value, key: null, parent: null }]
  while (stack.length > 0) {
    const visit = stack.pop()!
    const v = visit.value
    if (typeof v === 'string') {
      if (!isStorableText(v)) return { path: pathOf(visit), isKey: false }
      continue
    }
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], key: i, parent: visit })
      continue
    }
    if (!isPlainObject(v)) continue
    const keys = Object.keys(v)
    for (const key of keys) if (!isStorableText(key)) return { path: pathOf(visit), isKey: true }
    for (let i = keys.length - 1; i >= 0; i--) stack.push({ value: v[keys[i]!], key: keys[i]!, parent: visit })
  }
  return null
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object') return false
  const proto = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

/**
 * A copy of a JSON value with every string, keys included, made storable (`toStorableText`), or
 * the value itself when it holds none to change. Without recursion, like `findUnstorableText`.
 */
export function toStorableValue<T>(value: T): T {
  if (findUnstorableText(value) === null) return value
  const root: { value: unknown } = { value: undefined }
  const stack: Array<{ from: unknown; assign: (copy: unknown) => void }> = [{ from: value, assign: (c) => (root.value = c) }]
  while (stack.length > 0) {
    const { from, assign } = stack.pop()!
    if (typeof from === 'string') assign(toStorableText(from))
    else if (Array.isArray(from)) {
      const copy: unknown[] = new Array(from.length)
      assign(copy)
      from.forEach((item, i) => stack.push({ from: item, assign: (c) => (copy[i] = c) }))
    } else if (isPlainObject(from)) {
      const copy: Record<string, unknown> = {}
      assign(copy)
      for (const [key, item] of Object.entries(from)) {
        const storableKey = toStorableText(key)
        // Claimed now, filled later: the copy keeps the keys in their order.
        copy[storableKey] = null
        stack.push({ from: item, assign: (c) => (copy[storableKey] = c) })
      }
    } else assign(from)
  }
  return root.value as T
}
