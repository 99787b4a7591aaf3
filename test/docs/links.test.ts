import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import t from 'tap'
import { repoRoot } from '../support/harness.ts'

// The README and the pages under docs/ point at each other by file and heading, and at the
// repository by path. Files move and headings change in other commits, so this reads every page
// and reports every broken link, missing heading and missing path at once, each with its line:
// one run is the whole list of what to update.

const pages = [
  'README.md',
  'sdk/typescript/README.md',
  'sdk/python/README.md',
  ...readdirSync(join(repoRoot, 'docs'), { withFileTypes: true }).flatMap((e) => (e.isFile() && e.name.endsWith('.md') ? [`docs/${e.name}`] : [])),
]

/** Blanks `pattern`'s matches, newlines kept, so positions still give the right line. */
const blank = (text: string, pattern: RegExp) => text.replace(pattern, (m) => m.replace(/[^\n]/g, ' '))

/** The page without its fenced code blocks, which hold neither links nor headings. */
const prose = (text: string) => blank(text, /^```[\s\S]*?^```/gm)

const lineAt = (text: string, index: number) => text.slice(0, index).split('\n').length

/** GitHub's id of a heading: its text lower-cased, punctuation dropped, spaces made hyphens. */
function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-')
}

const headingIds = new Map<string, Set<string>>()
/** The ids of a Markdown file's headings; a repeated heading gets `-1`, `-2`, … as on GitHub. */
function anchorsOf(file: string): Set<string> {
  let ids = headingIds.get(file)
  if (ids) return ids
  ids = new Set()
  const seen = new Map<string, number>()
  for (const m of prose(readFileSync(join(repoRoot, file), 'utf8')).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = slug(m[1]!)
    const count = seen.get(base) ?? 0
    ids.add(count === 0 ? base : `${base}-${count}`)
    seen.set(base, count + 1)
  }
  headingIds.set(file, ids)
  return ids
}

/** Where a page's relative link leads that is not there: the file, or the heading in it. */
function brokenLinks(page: string): string[] {
  const text = blank(prose(readFileSync(join(repoRoot, page), 'utf8')), /`[^`]+`/g)
  const broken: string[] = []
  for (const m of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    const target = m[1]!
    if (/^[a-z][a-z0-9+.-]*:|^\/\//i.test(target)) continue
    const [path = '', anchor] = target.split('#', 2)
    const file = path === '' ? page : normalize(join(dirname(page), decodeURIComponent(path)))
    const where = `${page}:${lineAt(text, m.index)}: ${target}`
    if (file.startsWith('..') || !existsSync(join(repoRoot, file))) broken.push(`${where}: no file ${file}`)
    else if (anchor !== undefined && !(file.endsWith('.md') && anchorsOf(file).has(decodeURIComponent(anchor))))
      broken.push(`${where}: no heading #${anchor} in ${file}`)
  }
  return broken
}

/** Top-level folders whose files the pages name in backticks. */
const repositoryPath = /^(?:domain|streams|projections|services|tools|test|sdk|dashboard|deploy|patches|\.ci)\/[^\s*?<>{}…|]*$/

/** Backticked repository paths of a page that name no file or folder of the repository. */
function missingPaths(page: string): string[] {
  const text = prose(readFileSync(join(repoRoot, page), 'utf8'))
  const missing: string[] = []
  for (const m of text.matchAll(/`([^`]+)`/g)) {
    const path = m[1]!
    if (repositoryPath.test(path) && !existsSync(join(repoRoot, path))) missing.push(`${page}:${lineAt(text, m.index)}: ${path}`)
  }
  return missing
}

t.test('every relative link of the README and docs/ leads to a file, and every #anchor to a heading in it', async (t) => {
  const broken = pages.flatMap(brokenLinks)
  t.same(broken, [], broken.length === 0 ? 'none is broken' : `${broken.length} broken:\n${broken.join('\n')}`)
})

t.test('every repository path the README and docs/ name in backticks exists', async (t) => {
  const missing = pages.flatMap(missingPaths)
  t.same(missing, [], missing.length === 0 ? 'every one exists' : `${missing.length} missing:\n${missing.join('\n')}`)
})

/** Relative paths of a page, linked or in backticks, that lead out of the repository (a clone has nothing there). */
function pathsOutside(page: string): string[] {
  const text = prose(readFileSync(join(repoRoot, page), 'utf8'))
  const outside: string[] = []
  for (const m of text.matchAll(/(?:`|\]\()((?:\.\.\/)+[^`)\s]*)/g)) {
    if (normalize(join(dirname(page), m[1]!)).startsWith('..')) outside.push(`${page}:${lineAt(text, m.index)}: ${m[1]}`)
  }
  return outside
}

t.test('no page points out of the repository', async (t) => {
  const outside = pages.flatMap(pathsOutside)
  t.same(outside, [], outside.length === 0 ? 'none does' : `${outside.length} outside:\n${outside.join('\n')}`)
})

t.test('the checks see what they check', async (t) => {
  t.ok(pages.length >= 5, `README.md and the docs pages (${pages.join(', ')})`)
  t.ok(anchorsOf('README.md').has('security-and-limits'), 'a README heading has its GitHub id')
  t.equal(slug("The log's size"), 'the-logs-size')
  t.equal(slug('API description (OpenAPI)'), 'api-description-openapi')
  t.equal(slug('Where the spec says "not shown"'), 'where-the-spec-says-not-shown')
  t.ok(repositoryPath.test('services/roles/api/app.ts') && !repositoryPath.test('test/**/*.test.ts'), 'paths are told from globs')
  t.same(pathsOutside('docs/architecture.md'), [], 'a page of docs/ may link up to the README')
})
