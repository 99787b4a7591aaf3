import { readFileSync } from 'node:fs'
import t from 'tap'
import { errorCatalogue, renderError } from '../../services/roles/api/errors.ts'
import * as domainErrors from '../../domain/errors.ts'
import { repoRoot } from '../support/harness.ts'

function readmeErrorTable(): Array<{ status: number; code: string }> {
  const readme = readFileSync(`${repoRoot}README.md`, 'utf8')
  const section = readme.split('### Error reference')[1]!.split('\n## ')[0]!
  return [...section.matchAll(/^\| (\d{3}) \| `([a-z_]+)` \|/gm)].map((m) => ({ status: Number(m[1]), code: m[2]! }))
}

const key = (e: { status: number; code: string }) => `${e.status} ${e.code}`

t.test('the error registry and the README error reference list the same codes', async (t) => {
  t.same(readmeErrorTable().map(key).sort(), errorCatalogue.map(key).sort())
})

t.test('every domain error renders to a catalogued status and code', async (t) => {
  // Every refusal the domain exports, so a new one cannot go unmapped.
  const classes = (Object.values(domainErrors) as unknown[]).filter(
    (v): v is new (a: string, b: string) => domainErrors.DomainError =>
      typeof v === 'function' && v.prototype instanceof domainErrors.DomainError,
  )
  t.ok(classes.length >= 25, `${classes.length} domain refusals`)
  const samples = classes.map((cls) => new cls('x', 'x'))
  const catalogued = new Set(errorCatalogue.map(key))
  for (const err of samples) {
    const rendered = renderError(err)
    t.ok(catalogued.has(key(rendered)), `${err.name} renders as ${key(rendered)}`)
  }
})

t.test('an unknown error is a 500 internal_error that hides its message', async (t) => {
  const rendered = renderError(new Error('secret detail'))
  t.equal(rendered.status, 500)
  t.equal(rendered.code, 'internal_error')
  t.notMatch(rendered.message, /secret/)
})
