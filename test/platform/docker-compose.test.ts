import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { repoRoot } from '../support/harness.ts'

/**
 * docker-compose.yml ships no fixed secret and does not publish NATS or Postgres beyond the
 * compose network (both run without authentication there). Read as text: the file is plain
 * enough, and docker compose is not on every machine the tests run on.
 */
const compose = readFileSync(join(repoRoot, 'docker-compose.yml'), 'utf8')

/** The lines of one service under `services:`, up to the next service or top-level key. */
function serviceBlock(name: string): string {
  const lines = compose.split('\n')
  const start = lines.indexOf(`  ${name}:`)
  if (start < 0) throw new Error(`no service ${name} in docker-compose.yml`)
  const rest = lines.slice(start + 1)
  const end = rest.findIndex((line) => line.trim() !== '' && !/^ {4}/.test(line))
  return rest.slice(0, end < 0 ? undefined : end).join('\n')
}

t.test('docker-compose: no fixed secret, and only the API published', async (t) => {
  t.notMatch(serviceBlock('nats'), /^\s+ports:/m, 'NATS has no published ports')
  t.notMatch(serviceBlock('postgres'), /^\s+ports:/m, 'Postgres has no published ports')
  const service = serviceBlock('jobsvc')
  t.match(service, /^\s+ports:\s*\n\s+- "8080:8080"/m, 'the API is published')
  const secret = /^\s+JOBSVC_SECRET:\s*(.+)$/m.exec(service)?.[1]?.trim()
  t.match(secret, /^"?\$\{JOBSVC_SECRET:\?[^}]+\}"?$/, `JOBSVC_SECRET comes from the environment or .env and is required (${secret})`)
  t.notMatch(compose, /change-me/i, 'no placeholder secret anywhere')
  t.notMatch(service, /--dev\b/, 'the service does not run in the development mode')
})
