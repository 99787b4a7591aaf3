/**
 * Hostile requests generated from the service's own OpenAPI document: for every operation, a
 * request that is valid-looking in places and wrong in others (types, bounds, encodings, media
 * types, credentials, ids), as a fuzzer or an attacker would send them. Seeded, so a failure
 * names a seed that replays it.
 */

export type Random = () => number

/** mulberry32: a small seeded generator, good enough to pick test inputs. */
export function seededRandom(seed: number): Random {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Percent-encodes like encodeURIComponent, but a lone surrogate becomes the (invalid UTF-8) bytes of its code unit instead of throwing. */
function encode(s: string): string {
  return s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]|[^]/gu, (c) =>
    c.length === 1 && c >= '\ud800' && c <= '\udfff'
      ? `%ED%${(0xa0 + ((c.charCodeAt(0) >> 6) & 0x1f)).toString(16).toUpperCase()}%${(0x80 + (c.charCodeAt(0) & 0x3f)).toString(16).toUpperCase()}`
      : encodeURIComponent(c),
  )
}

const pick = <T>(rng: Random, items: readonly T[]): T => items[Math.floor(rng() * items.length)]!
const chance = (rng: Random, p: number) => rng() < p

type Schema = Record<string, any>

export interface Operation {
  method: string
  /** With `{name}` placeholders. */
  path: string
  pathParams: string[]
  query: Array<{ name: string; schema: Schema; required: boolean }>
  body: Schema | null
  auth: 'apiKey' | 'session' | 'none'
}

export interface Credentials {
  apiKey: string
  otherApiKey: string
  jwt: string
  projectId: string
  /** Real ids, so some requests reach past the not-found checks. */
  ids: string[]
}

export interface HostileRequest {
  method: string
  path: string
  headers: Record<string, string>
  body: string | undefined
}

/** Every operation of an OpenAPI 3.1 document, `$ref`s resolved. */
export function operationsOf(doc: { paths: Record<string, Record<string, any>>; components?: { schemas?: Record<string, Schema> } }): Operation[] {
  const resolve = (s: Schema | undefined): Schema | undefined => {
    if (s && typeof s.$ref === 'string') return resolve(doc.components?.schemas?.[s.$ref.split('/').pop()!])
    return s
  }
  const ops: Operation[] = []
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue
      const params = (op.parameters ?? []) as Array<{ in: string; name: string; schema: Schema; required?: boolean }>
      const security = (op.security ?? []) as Array<Record<string, unknown>>
      const auth = security.some((s) => 'apiKey' in s) ? 'apiKey' : security.length > 0 ? 'session' : 'none'
      ops.push({
        method: method.toUpperCase(),
        path,
        pathParams: params.filter((p) => p.in === 'path').map((p) => p.name),
        query: params.filter((p) => p.in === 'query').map((p) => ({ name: p.name, schema: resolve(p.schema) ?? {}, required: p.required === true })),
        body: resolve(op.requestBody?.content?.['application/json']?.schema) ?? null,
        auth,
      })
    }
  }
  return ops
}

/** Strings Postgres, JSON, regexes, parsers or headers have trouble with. */
function hostileString(rng: Random, max: number | undefined): string {
  const over = (max ?? 1000) + 1
  return pick(rng, [
    () => '',
    () => '\u0000',
    () => `a\u0000b`,
    () => '\ud800',
    () => 'x\udfffy',
    () => 'a'.repeat(over),
    () => 'a'.repeat(Math.min(over * 4, 600_000)),
    () => `a@${'.'.repeat(16_000)},`,
    () => `${'a@'.repeat(5_000)}`,
    () => '%00',
    () => '../../../etc/passwd',
    () => "'; DROP TABLE jobs; --",
    () => '<script>alert(1)</script>',
    () => 'line\r\nX-Injected: 1',
    () => '=HYPERLINK("http://evil.example")',
    () => '9'.repeat(400),
    () => '-1',
    () => '1e309',
    () => 'NaN',
    () => 'null',
    () => '0000-00-00T00:00:00Z',
    () => '+275760-09-13T00:00:00.000Z',
    () => '-000001-01-01T00:00:00Z',
    () => '2026-02-30T25:61:61Z',
    () => '10000-01-01T00:00:00Z',
    () => '\u202eevil\u202c',
    () => '🙂'.repeat(200),
    () => 'Ω'.repeat(over),
    () => '* * * * * * *',
    () => '0 0 31 2 *',
    () => 'Mars/Olympus_Mons',
    () => 'x-'.repeat(5000),
    () => String.fromCharCode(...Array.from({ length: 64 }, () => Math.floor(rng() * 0x2000))),
  ])()
}

function hostileNumber(rng: Random): unknown {
  return pick(rng, [-1, 0, 0.5, -0.0, 1e308, -1e308, 2 ** 53, 2 ** 31, 2 ** 63, Number.MAX_SAFE_INTEGER + 2, 101, 86_401, 1e-320])
}

function wrongType(rng: Random): unknown {
  const values: unknown[] = [null, true, false, [], {}, [null], { '': null }, 'string', 42, -42.5, [1, [2, [3]]]]
  // Own `__proto__` and `constructor` keys, as JSON.parse makes them (a literal would set the prototype).
  values.push(JSON.parse('{"__proto__":{"polluted":true}}'), JSON.parse('{"constructor":{"prototype":{"x":1}}}'))
  return pick(rng, values)
}

function deepValue(depth: number): unknown {
  let v: unknown = 1
  for (let i = 0; i < depth; i++) v = { a: v }
  return v
}

/** A value for `schema`: mostly plausible, sometimes hostile. */
export function valueFor(rng: Random, schema: Schema | undefined, depth = 0): unknown {
  if (!schema || depth > 6) return wrongType(rng)
  if (chance(rng, 0.12)) return wrongType(rng)
  const variants = (schema.anyOf ?? schema.oneOf) as Schema[] | undefined
  if (variants) return valueFor(rng, pick(rng, variants), depth + 1)
  if (Array.isArray(schema.enum)) return chance(rng, 0.8) ? pick(rng, schema.enum) : hostileString(rng, 20)
  if ('const' in schema) return chance(rng, 0.8) ? schema.const : wrongType(rng)
  const type = Array.isArray(schema.type) ? pick(rng, schema.type as string[]) : schema.type
  switch (type) {
    case 'string': {
      if (chance(rng, 0.35)) return hostileString(rng, schema.maxLength)
      if (schema.format === 'date-time') return new Date(Date.now() + Math.floor((rng() - 0.5) * 1e10)).toISOString()
      const min = schema.minLength ?? 1
      const max = Math.min(schema.maxLength ?? 20, 40)
      return 'v'.repeat(Math.max(min, Math.floor(rng() * max)))
    }
    case 'integer':
    case 'number':
      if (chance(rng, 0.4)) return hostileNumber(rng)
      return Math.floor((schema.minimum ?? 0) + rng() * Math.min(10, (schema.maximum ?? 10) - (schema.minimum ?? 0)))
    case 'boolean':
      return chance(rng, 0.9) ? rng() < 0.5 : 'true'
    case 'null':
      return null
    case 'array': {
      if (chance(rng, 0.05)) return Array.from({ length: 2_000 }, () => 'x')
      const n = Math.floor(rng() * 4)
      return Array.from({ length: n }, () => valueFor(rng, schema.items, depth + 1))
    }
    case 'object': {
      const out: Record<string, unknown> = {}
      const props = (schema.properties ?? {}) as Record<string, Schema>
      const required = new Set((schema.required ?? []) as string[])
      for (const [name, prop] of Object.entries(props)) {
        if (required.has(name) ? chance(rng, 0.93) : chance(rng, 0.5)) out[name] = valueFor(rng, prop, depth + 1)
      }
      if (chance(rng, 0.1)) out[hostileString(rng, 10)] = wrongType(rng)
      if (chance(rng, 0.05)) out.payload = deepValue(pick(rng, [63, 65, 500]))
      if (chance(rng, 0.04)) out.tags = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, 'v']))
      return out
    }
    default:
      return chance(rng, 0.5) ? { k: 'v' } : wrongType(rng)
  }
}

/** A path parameter: a real id, a plausible one, or something hostile (always percent-encoded where it must be). */
function pathValue(rng: Random, creds: Credentials, name: string): string {
  if (name === 'projectId' && chance(rng, 0.6)) return creds.projectId
  if (creds.ids.length > 0 && chance(rng, 0.4)) return pick(rng, creds.ids)
  return pick(rng, [
    () => encode(hostileString(rng, 100)),
    () => '%00',
    () => '%ff%fe',
    () => '%',
    () => '%zz',
    () => '..%2f..%2f',
    () => 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV',
    () => 'prj_00000000000000000000000000',
    () => 'x'.repeat(3000),
    () => encodeURIComponent('🙂'),
  ])()
}

function queryString(rng: Random, op: Operation): string {
  const parts: string[] = []
  for (const q of op.query) {
    if (!q.required && !chance(rng, 0.6)) continue
    const raw = valueFor(rng, q.schema)
    const text = typeof raw === 'string' ? raw : JSON.stringify(raw)
    const encoded = chance(rng, 0.1) ? pick(rng, ['%', '%zz', '%00', '%ff', '%c0%af']) : encode(String(text ?? ''))
    parts.push(`${q.name}=${encoded}`)
    if (chance(rng, 0.08)) parts.push(`${q.name}=${encodeURIComponent('again')}`)
  }
  if (chance(rng, 0.1)) parts.push(`${encode(hostileString(rng, 10))}=1`)
  if (chance(rng, 0.05)) parts.push('min_seq=99999999999999999999')
  return parts.length === 0 ? '' : `?${parts.join('&')}`
}

function authorization(rng: Random, creds: Credentials, op: Operation): string | undefined {
  const right = op.auth === 'apiKey' ? `Bearer ${creds.apiKey}` : op.auth === 'session' ? `Bearer ${creds.jwt}` : undefined
  if (chance(rng, 0.75)) return right
  return pick(rng, [
    undefined,
    'Bearer',
    'Bearer ',
    `Bearer ${creds.otherApiKey}`,
    `Bearer ${creds.apiKey}x`,
    `Bearer ${creds.jwt.slice(0, -3)}AAA`,
    'Basic dXNlcjpwYXNz',
    `Bearer sv_test_sk_${'0'.repeat(32)}`,
    `Bearer ${'a'.repeat(8000)}`,
    'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1c3JfMSJ9.',
    op.auth === 'apiKey' ? `Bearer ${creds.jwt}` : `Bearer ${creds.apiKey}`,
  ])
}

function bodyText(rng: Random, op: Operation): string | undefined {
  if (op.body === null && !chance(rng, 0.15)) return undefined
  if (chance(rng, 0.1)) {
    return pick(rng, [
      () => '{',
      () => '[]',
      () => 'null',
      () => '"text"',
      () => '1',
      () => '\ufeff{}',
      () => '['.repeat(20_000) + ']'.repeat(20_000),
      () => '{"a":'.repeat(5_000) + '1' + '}'.repeat(5_000),
      () => `{"payload":${'{"a":'.repeat(2_000)}1${'}'.repeat(2_000)}}`,
      () => '{"__proto__":{"admin":true},"job_type":"x","payload":{}}',
      () => `{"job_type":"x","payload":{"n":1e999}}`,
      () => `{"s":"\\ud800","payload":{}}`,
      () => 'x'.repeat(1_100_000),
    ])()
  }
  return JSON.stringify(valueFor(rng, op.body ?? { type: 'object' }))
}

function contentType(rng: Random, hasBody: boolean): string | undefined {
  if (chance(rng, 0.85)) return hasBody ? 'application/json' : undefined
  return pick(rng, [
    undefined,
    'text/plain',
    'application/json; charset=utf-16',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/json;;;',
    '*/*',
    'application/xml',
  ])
}

/** One hostile request for `op`. */
export function hostileRequest(rng: Random, op: Operation, creds: Credentials): HostileRequest {
  let path = op.path
  for (const name of op.pathParams) path = path.replace(`{${name}}`, pathValue(rng, creds, name))
  path += queryString(rng, op)
  const headers: Record<string, string> = {}
  const auth = authorization(rng, creds, op)
  if (auth !== undefined) headers.authorization = auth
  const body = bodyText(rng, op)
  const type = contentType(rng, body !== undefined)
  if (type !== undefined) headers['content-type'] = type
  if (chance(rng, 0.15)) headers['idempotency-key'] = pick(rng, ['k1', 'k-1', 'bad key', 'x'.repeat(201), '', 'ü', 'k'.repeat(200)])
  if (chance(rng, 0.1)) headers['x-forwarded-for'] = pick(rng, ['1.2.3.4', 'not-an-ip', '1.2.3.4, 5.6.7.8', '::1', ''])
  if (chance(rng, 0.05)) headers.cookie = pick(rng, ['sv_jwt=', 'sv_jwt=garbage', `sv_jwt=${creds.jwt}; sv_jwt=x`, '%%%'])
  if (chance(rng, 0.05)) headers.accept = pick(rng, ['text/event-stream', 'application/xml', '*/*;q=abc'])
  if (chance(rng, 0.03)) headers.origin = pick(rng, ['https://evil.example', 'null'])
  const method = chance(rng, 0.04) ? pick(rng, ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD']) : op.method
  return { method, path, headers, body: method === 'GET' || method === 'HEAD' ? undefined : body }
}

/** Code units a JSON value's strings are made of: plain text, and everything that needs care somewhere. */
const awkwardUnits = ['\u0000', '\\', '"', "'", '\u2028', '\u2029', '\ufffe', '\uffff', '\ufeff', '\u0085', '😀', '.', '$']

/**
 * A string of random code units: printable ASCII, controls, the characters of `awkwardUnits`,
 * any BMP unit, and surrogates that are paired or not (so some strings are unstorable).
 */
export function hostileText(rng: Random, maxLength: number): string {
  const length = chance(rng, 0.03) ? maxLength : Math.floor(rng() * Math.min(maxLength, 24))
  let s = ''
  while (s.length < length) {
    s += pick(rng, [
      () => String.fromCharCode(0x20 + Math.floor(rng() * 0x5f)),
      () => String.fromCharCode(Math.floor(rng() * 0x20)),
      () => pick(rng, awkwardUnits),
      () => String.fromCharCode(Math.floor(rng() * 0x10000)),
      () => String.fromCharCode(0xd800 + Math.floor(rng() * 0x800)),
      () => String.fromCodePoint(0x10000 + Math.floor(rng() * 0xfffff)),
    ])()
  }
  return s.slice(0, maxLength)
}

/** A JSON value (no undefined, finite numbers) at most `depth` levels deep, with hostile strings and keys and edge numbers. */
export function hostileJsonValue(rng: Random, depth: number): unknown {
  const kind = depth <= 0 ? pick(rng, ['string', 'number', 'literal']) : pick(rng, ['string', 'number', 'literal', 'array', 'object', 'object'])
  switch (kind) {
    case 'string':
      return hostileText(rng, 200)
    case 'number':
      return pick(rng, [
        0,
        -0,
        1,
        -1,
        0.1,
        1e21,
        1e-7,
        5e-324,
        -5e-324,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        2 ** 53 + 1,
        (rng() - 0.5) * 1e6,
      ])
    case 'literal':
      return pick(rng, [null, true, false, ''])
    case 'array':
      return Array.from({ length: Math.floor(rng() * 4) }, () => hostileJsonValue(rng, depth - 1))
    default:
      return Object.fromEntries(Array.from({ length: Math.floor(rng() * 4) }, () => [hostileText(rng, 12), hostileJsonValue(rng, depth - 1)]))
  }
}
