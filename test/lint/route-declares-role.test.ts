import { ESLint } from 'eslint'
import t from 'tap'
import { repoRoot } from '../support/harness.ts'

// Issue 24, item 6: a project route declares the least session role it needs in its options, and
// the lint says so at the line. This runs the repository's own ESLint config (the rule as
// registered) over examples placed, by name, where the route plugins live.

const eslint = new ESLint({ cwd: repoRoot })
const routeFile = `${repoRoot}services/roles/api/routes/example.ts`

async function problems(code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: routeFile })
  return result!.messages.filter((m) => m.ruleId === 'jobsvc-routes/route-declares-role').map((m) => m.message)
}

const header = `import type { FastifyPluginAsync } from 'fastify'\n`

t.test('a route with no role, or an unknown one, fails', async (t) => {
  const found = await problems(`${header}
const batch = { documentedBody: null } as const
export function exampleRoutes(): FastifyPluginAsync {
  return async (app) => {
    app.get('/', async () => ({}))
    app.post('/', { schema: {} }, async () => ({}))
    app.put('/:id', { schema: {}, config: { longPoll: true } }, async () => ({}))
    app.post('/batch', { config: batch }, async () => ({}))
    app.delete('/:id', { config: { role: 'superuser' } }, async () => ({}))
    app.route({ method: 'GET', url: '/x', handler: async () => ({}) })
  }
}
`)
  t.equal(found.length, 6, found.join('\n'))
  t.match(found[0], /^GET '\/' declares no project role/)
  t.match(found[4], /'superuser' is not a project role/)
  t.match(found[5], /^ROUTE '\/x' declares no project role/)
})

t.test('declared roles, inline or in a const, pass; other calls are not routes', async (t) => {
  const found = await problems(`${header}
const batchConfig = { role: 'member', documentedBody: null } as const
export function exampleRoutes(): FastifyPluginAsync {
  return async (app) => {
    const seen = new Map<string, number>()
    seen.get('/')
    app.get('/', { schema: {}, config: { role: 'viewer' } }, async () => ({}))
    app.post('/batch', { config: batchConfig }, async () => ({}))
    app.route({ method: 'GET', url: '/x', config: { role: 'admin' }, handler: async () => ({}) })
  }
}
`)
  t.same(found, [])
})

t.test('a plugin marked @noProjectRole is not checked; its neighbour still is', async (t) => {
  const found = await problems(`${header}
/**
 * Probes.
 *
 * @noProjectRole unauthenticated, outside /jobsvc/v1
 */
export function probeRoutes(): FastifyPluginAsync {
  return async (app) => {
    app.get('/live', async () => ({}))
  }
}

export function jobRoutes(): FastifyPluginAsync {
  return async (app) => {
    app.get('/', async () => ({}))
  }
}
`)
  t.equal(found.length, 1, found.join('\n'))
  t.match(found[0], /^GET '\/' declares no project role/)
})

t.test('the rule holds over the route files as they are', async (t) => {
  const results = await eslint.lintFiles(['services/roles/api/routes/'])
  const found = results.flatMap((r) =>
    r.messages.filter((m) => m.ruleId === 'jobsvc-routes/route-declares-role').map((m) => `${r.filePath}:${m.line} ${m.message}`),
  )
  t.same(found, [])
  t.ok(results.length > 10, 'the route files were linted')
})
