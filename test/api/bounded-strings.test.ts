import t from 'tap'
import { pino } from 'pino'
import type { z } from 'zod'
import { buildApp } from '../../services/roles/api/app.ts'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import { isolatedNames, removeIsolated, testConfig } from '../support/harness.ts'

// Issue 13, item 1: zod runs every check of a string even after one failed, so a pattern behind
// `.max()` still ran on a 1 MiB value (the alert e-mail pattern held the event loop for minutes).
// Every string any route accepts (body, query, path, headers, and bodies routes read themselves)
// must stop at its length bound before any pattern, format or refine runs. This walks the real
// app's registered schemas, and for each string feeds a value one character over its bound with
// every later check instrumented: none may run.

const names = isolatedNames(import.meta.filename)
t.teardown(() => removeIsolated(names))
const runtime = await openRuntime(testConfig(names), pino({ level: 'silent' }), 'jobsvc-test')
t.teardown(() => runtime.close())
const built = await buildApp(runtime, new AbortController().signal)
t.teardown(() => built.app.close())
await built.app.ready()

type Node = z.core.$ZodType
interface StringNode {
  where: string
  node: Node
}

/** The string schemas a request value can reach, skipping what a bounded string pipes into (its bound ran first). */
function stringsIn(node: Node | undefined, where: string, found: StringNode[], seen = new Set<Node>()): StringNode[] {
  if (node === undefined || node === null || seen.has(node)) return found
  seen.add(node)
  const def = node._zod.def as unknown as Record<string, any>
  switch (def.type) {
    case 'string':
      found.push({ where, node })
      break
    case 'object':
      for (const [key, child] of Object.entries(def.shape as Record<string, Node>)) stringsIn(child, `${where}.${key}`, found, seen)
      if (def.catchall) stringsIn(def.catchall, `${where}.*`, found, seen)
      break
    case 'array':
      stringsIn(def.element, `${where}[]`, found, seen)
      break
    case 'record':
      stringsIn(def.keyType, `${where}{key}`, found, seen)
      stringsIn(def.valueType, `${where}{value}`, found, seen)
      break
    case 'union':
      for (const option of def.options as Node[]) stringsIn(option, `${where}|`, found, seen)
      break
    case 'pipe': {
      stringsIn(def.in, where, found, seen)
      const inDef = (def.in as Node)._zod.def as unknown as Record<string, any>
      if (inDef.type !== 'string') stringsIn(def.out, `${where}>`, found, seen)
      break
    }
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'nonoptional':
    case 'readonly':
    case 'catch':
      stringsIn(def.innerType, where, found, seen)
      break
    case 'lazy':
      stringsIn(def.getter(), where, found, seen)
      break
    case 'intersection':
      stringsIn(def.left, where, found, seen)
      stringsIn(def.right, where, found, seen)
      break
    default:
      break
  }
  return found
}

const lengthChecks = new Set(['max_length', 'min_length', 'length_equals'])

const found: StringNode[] = []
for (const route of built.routes ?? []) {
  const methods = ([] as string[]).concat(route.method).join(',')
  const parts = {
    body: route.schema?.body,
    query: route.schema?.querystring,
    params: route.schema?.params,
    headers: route.schema?.headers,
    readBody: route.documentedBody,
  }
  for (const [part, schema] of Object.entries(parts)) stringsIn(schema as Node | undefined, `${methods} ${route.url} ${part}`, found)
}
// Fastify's HEAD twin of a GET route shares its schemas: each string once.
const strings = [...new Map(found.map((s) => [s.node, s])).values()]

t.ok(strings.length > 50, `every route's string fields were found (${strings.length})`)

t.test('every string field is bounded, and its bound aborts before anything else runs', async (t) => {
  const unbounded: string[] = []
  for (const { where, node } of strings) {
    const def = node._zod.def as unknown as { format?: string; checks?: Array<{ _zod: { def: { check: string; abort?: boolean } } }> }
    const checks = def.checks ?? []
    const first = checks[0]?._zod.def
    if (def.format !== undefined) unbounded.push(`${where}: a ${def.format} format runs before any bound (pipe a bounded string into it)`)
    else if (first?.check !== 'max_length' || first.abort !== true) unbounded.push(`${where}: the first check is not an aborting max length`)
  }
  t.same(unbounded, [], 'every string starts with an aborting max length (services/roles/api/text-fields.ts)')
})

t.test('over its bound, no later check of any string runs', async (t) => {
  for (const { where, node } of strings) {
    const def = node._zod.def as unknown as {
      checks?: Array<{ _zod: { def: { check: string; maximum?: number }; check: (payload: unknown) => unknown } }>
    }
    const checks = def.checks ?? []
    const max = checks.find((c) => c._zod.def.check === 'max_length')?._zod.def.maximum
    if (max === undefined) continue
    let ran = 0
    const restore: Array<() => void> = []
    for (const check of checks) {
      if (lengthChecks.has(check._zod.def.check)) continue
      const original = check._zod.check
      check._zod.check = (payload) => {
        ran++
        return original(payload)
      }
      restore.push(() => (check._zod.check = original))
    }
    try {
      const result = (node as unknown as z.ZodType).safeParse('a'.repeat(max + 1))
      t.equal(ran, 0, `${where}: no pattern or refine ran on ${max + 1} characters`)
      t.equal(result.error?.issues[0]?.code, 'too_big', `${where}: refused as too long`)
    } finally {
      for (const undo of restore) undo()
    }
  }
})

t.test('over HTTP: an alert e-mail thousands of characters long never meets the e-mail pattern', async (t) => {
  const { apiKey } = await createProject(runtime, { name: 'regex', plan: 'business', ownerEmail: null, keyEnvironment: 'test' })
  // The shape that took the old pattern about 270 ms per 16,000 characters (quadratic backtracking).
  const hostile = `a@${'.'.repeat(16_000)},`
  const longInputs: string[] = []
  const { exec } = RegExp.prototype
  RegExp.prototype.exec = function (this: RegExp, input: string) {
    if (typeof input === 'string' && input.length > 320 && this.source.includes('@')) longInputs.push(this.source)
    return exec.call(this, input)
  }
  try {
    const res = await built.app.inject({
      method: 'POST',
      url: '/jobsvc/v1/alerts',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      payload: { name: 'deep', kind: 'queue_depth', threshold: 1, email: [hostile] },
    })
    t.equal(res.statusCode, 400)
    t.equal(res.json().error.code, 'invalid_request')
  } finally {
    RegExp.prototype.exec = exec
  }
  t.same(longInputs, [], 'no e-mail pattern ran on the over-long value')
})
