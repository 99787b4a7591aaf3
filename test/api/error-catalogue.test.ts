import { readdirSync, readFileSync } from 'node:fs'
import t from 'tap'
import { edgeErrors, errorCatalogue, renderError } from '../../services/roles/api/errors.ts'
import * as domainErrors from '../../domain/errors.ts'
import { LoginRefused, TotpSecretUnreadable, WrongPassword } from '../../services/use-cases/platform/accounts.ts'
import { WindowFull } from '../../services/use-cases/platform/auth-limits.ts'
import { CursorExpired, UnknownCursor } from '../../services/use-cases/events/event-feed.ts'
import { HistoryExpired } from '../../services/use-cases/jobs/job-as-of.ts'
import { PasswordWorkBusy } from '../../services/use-cases/platform/passwords.ts'
import { repoRoot } from '../support/harness.ts'
import { specErrorCodes } from '../support/spec-error-codes.ts'

const readme = readFileSync(`${repoRoot}docs/api-notes.md`, 'utf8')

/** The rows of the table of docs/api-notes.md under `heading`, up to the next heading: status, code and the row's last column. */
function readmeCodeRows(heading: string): Array<{ status: number; code: string; note: string }> {
  const section = readme.split(`\n${heading}\n`)[1]!.split(/\n#{2,4} /)[0]!
  return [...section.matchAll(/^\| (\d{3}) \| `([a-z_]+)` \| (.*) \|$/gm)].map((m) => ({ status: Number(m[1]), code: m[2]!, note: m[3]!.trim() }))
}
const readmeErrorTable = () => readmeCodeRows('## Error reference').map(({ status, code }) => ({ status, code }))
const readmeNotAnswered = () => readmeCodeRows('### Codes of the spec not answered here')

const key = (e: { status: number; code: string }) => `${e.status} ${e.code}`
const catalogued = new Set(errorCatalogue.map(key))

/** Every TypeScript file under `dir` (relative to the repository), with its source. */
function sources(dir: string): Array<{ path: string; text: string }> {
  return readdirSync(`${repoRoot}${dir}`, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => ({ path: `${dir}/${file}`, text: readFileSync(`${repoRoot}${dir}/${file}`, 'utf8') }))
}
const codeSources = [...sources('domain'), ...sources('services')]

// Every refusal the domain exports, so a new one cannot go unregistered.
const domainClasses = (Object.values(domainErrors) as unknown[]).filter(
  (v): v is (new (a: string, b: string) => domainErrors.DomainError) & { name: string } =>
    typeof v === 'function' && v.prototype instanceof domainErrors.DomainError,
)
const domainSamples = domainClasses.map((cls) => new cls('x', 'x'))

// One of each refusal a use case throws that is not the domain's, in each of its shapes.
const useCaseSamples: Error[] = [
  ...(['invalid_credentials', 'invalid_totp_code', 'email_not_verified', 'totp_required', 'account_suspended', 'account_locked'] as const).map(
    (reason) => new LoginRefused(reason, 1000),
  ),
  new WrongPassword(),
  new TotpSecretUnreadable({ cause: new Error('bad tag'), pending: false }),
  new TotpSecretUnreadable({ cause: new Error('bad tag'), pending: true }),
  new WindowFull('too many', 1000),
  new PasswordWorkBusy(8),
  new CursorExpired('c1.1.x.aaaaaaaaaa'),
  new UnknownCursor(),
  new HistoryExpired('job_01ARZ3NDEKTSV4RRFFQ69G5FAV'),
]

t.test('the error registry and the error reference (docs/api-notes.md) list the same codes', async (t) => {
  t.same(readmeErrorTable().map(key).sort(), errorCatalogue.map(key).sort())
})

t.test('every domain refusal is registered: its own code, a catalogued status, never the 500 of an unregistered error', async (t) => {
  t.ok(domainSamples.length >= 25, `${domainSamples.length} domain refusals`)
  for (const err of domainSamples) {
    const rendered = renderError(err)
    t.equal(rendered.code, err.code, `${err.name} keeps its code`)
    t.ok(catalogued.has(key(rendered)) && rendered.status < 500, `${err.name} renders as ${key(rendered)}`)
  }
})

t.test('an unregistered domain refusal is a 500 internal_error, not a guessed status', async (t) => {
  class Unregistered extends domainErrors.DomainError {}
  const rendered = renderError(new Unregistered('made_up', 'secret detail'))
  t.same({ status: rendered.status, code: rendered.code }, { status: 500, code: 'internal_error' })
  t.notMatch(rendered.message, /secret/)
})

t.test('every error class a use case exports is registered', async (t) => {
  const exported: string[] = []
  for (const { path } of sources('services/use-cases')) {
    const module = (await import(`${repoRoot}${path}`)) as Record<string, unknown>
    for (const value of Object.values(module)) {
      if (typeof value === 'function' && value.prototype instanceof Error) exported.push(value.name)
    }
  }
  t.same(exported.sort(), [...new Set(useCaseSamples.map((err) => err.name))].sort(), 'each has a sample here')
  for (const err of useCaseSamples) {
    const rendered = renderError(err)
    t.ok(catalogued.has(key(rendered)) && rendered.status < 500, `${err.name} renders as ${key(rendered)}`)
  }
})

t.test('codes come only from domain/errors.ts and the registry', async (t) => {
  for (const { path, text } of codeSources) {
    if (path === 'domain/errors.ts') continue
    t.notMatch(text, /extends (DomainError|refusal\()/, `${path} defines no domain refusal of its own`)
  }
  const registry = readFileSync(`${repoRoot}services/roles/api/errors.ts`, 'utf8')
  t.equal(registry.match(/new ApiError\(/g)?.length, 1, 'the registry makes ApiErrors only in edgeError')
})

t.test('every code the API answers is catalogued, and the catalogue lists none that nothing answers', async (t) => {
  const answered = new Set([...edgeErrors, ...[...domainSamples, ...useCaseSamples].map((err) => renderError(err))].map(key))
  t.same([...answered].sort(), [...catalogued].sort())
})

t.test('every registered refusal is thrown somewhere', async (t) => {
  const elsewhere = (path: string) => codeSources.filter((s) => s.path !== path).map((s) => s.text)
  for (const cls of domainClasses) {
    t.ok(
      elsewhere('domain/errors.ts').some((text) => text.includes(`new ${cls.name}(`)),
      `${cls.name} is thrown`,
    )
  }
  const registry = readFileSync(`${repoRoot}services/roles/api/errors.ts`, 'utf8')
  for (const [, name] of registry.matchAll(/^export const (\w+) = edgeError\(/gm)) {
    const called = new RegExp(`\\b${name}\\(`)
    t.ok(
      elsewhere('services/roles/api/errors.ts').some((text) => called.test(text)),
      `${name} is used`,
    )
  }
})

// Catalogued means registered and thrown somewhere: the two tests above prove it of every catalogued code.
t.test("every code of the spec's error table is answered here, or the API reference notes say why it cannot occur", async (t) => {
  const notAnswered = new Map(readmeNotAnswered().map((row) => [key(row), row.note]))
  t.ok(notAnswered.size > 0, 'the API reference notes list the codes not answered')
  for (const code of specErrorCodes) {
    const reason = notAnswered.get(key(code))
    if (catalogued.has(key(code))) t.equal(reason, undefined, `${key(code)} is answered, so it is not listed as not occurring`)
    else t.ok(reason !== undefined && reason.length >= 40, `${key(code)}: not answered, ${reason ?? 'and the API reference notes do not say why'}`)
  }
  const inSpec = new Set(specErrorCodes.map(key))
  for (const listed of notAnswered.keys()) t.ok(inSpec.has(listed), `${listed}, listed as not occurring, is a code of the spec`)
})

t.test('an unknown error is a 500 internal_error that hides its message', async (t) => {
  const rendered = renderError(new Error('secret detail'))
  t.equal(rendered.status, 500)
  t.equal(rendered.code, 'internal_error')
  t.notMatch(rendered.message, /secret/)
})
