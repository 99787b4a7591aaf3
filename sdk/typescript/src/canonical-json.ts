/**
 * The RFC 8785 (JCS) serialisation of a JSON value: object members sorted by their names' UTF-16
 * code units, no white space, numbers as ECMAScript's `Number.prototype.toString` writes them, and
 * strings as `JSON.stringify` writes them. Its UTF-8 bytes are what the audit log hashes and signs
 * (docs/audit.md), so every value that has no single JSON form is a `TypeError` rather than a guess:
 * a non-finite number, a string with a lone surrogate (I-JSON, RFC 7493), `undefined`, a bigint, a
 * function, or an object that is not a plain object or an array (a `Date` is given as its text).
 */
export function canonicalJson(value: unknown): string {
  return serialise(value, '$')
}

function serialise(value: unknown, at: string): string {
  if (value === null || typeof value === 'boolean') return String(value)
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`${at} is ${value}, which JSON cannot hold`)
    // JSON.stringify writes a finite number as Number.prototype.toString does (and -0 as 0): JCS's rule.
    return JSON.stringify(value)
  }
  if (typeof value === 'string') return serialiseString(value, at)
  if (Array.isArray(value)) return `[${value.map((item, i) => serialise(item, `${at}[${i}]`)).join(',')}]`
  if (typeof value === 'object' && isPlainObject(value)) {
    const record = value as Record<string, unknown>
    // The default sort compares UTF-16 code units, which is the order RFC 8785 §3.2.3 asks for.
    const members = Object.keys(record)
      .sort()
      .map((key) => `${serialiseString(key, `a member name of ${at}`)}:${serialise(record[key], `${at}.${key}`)}`)
    return `{${members.join(',')}}`
  }
  throw new TypeError(`${at} is ${describe(value)}, not a JSON value`)
}

function serialiseString(text: string, at: string): string {
  if (hasLoneSurrogate(text)) throw new TypeError(`${at} holds a lone UTF-16 surrogate, which has no UTF-8 form (RFC 8785 §3.2.2.2)`)
  return JSON.stringify(text)
}

function hasLoneSurrogate(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i)
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) i++
      else return true
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      return true
    }
  }
  return false
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined'
  if (typeof value === 'object') return `an instance of ${value?.constructor?.name ?? 'an unknown class'}`
  return `a ${typeof value}`
}
