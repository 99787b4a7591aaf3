import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import semver from 'semver'
import t from 'tap'
import { repoRoot } from '../support/harness.ts'

/**
 * `npm ci` warns (EBADENGINE) for every package whose `engines.node` leaves out the Node it runs
 * on, and that warning is the only sign a dependency has dropped a Node the service still claims.
 * The lock file records each package's engines, so the check does not depend on the Node the
 * tests happen to run on: the oldest Node the root package claims must satisfy every one of them.
 */
const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { engines: { node: string } }
const lock = JSON.parse(readFileSync(join(repoRoot, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; dev?: boolean; engines?: { node?: string } | string[] }>
}

t.test('every locked package runs on the oldest Node the service claims', async (t) => {
  const oldest = semver.minVersion(pkg.engines.node)
  t.ok(oldest, `engines.node ${pkg.engines.node} has a lowest version`)
  t.equal(oldest!.major, 20, 'the service claims Node 20, the line the image runs (Dockerfile)')
  const refusing = Object.entries(lock.packages).flatMap(([path, p]) => {
    const range = Array.isArray(p.engines) ? undefined : p.engines?.node
    if (path === '' || range === undefined || semver.satisfies(oldest!, range)) return []
    return [`${path.replace(/^.*node_modules\//, '')}@${p.version} (${p.dev ? 'dev' : 'production'}) needs node ${range}`]
  })
  t.same(refusing, [], `each package admits node ${oldest}`)
})
