import { readFileSync } from 'node:fs'
import t from 'tap'
import { environmentSchema, tunablesSchema } from '../../services/infrastructure/config.ts'
import { repoRoot } from '../support/harness.ts'

// The README's Configuration section is what an operator reads: it must name every variable the
// service parses and every key its JOBSVC_CONFIG file takes, and nothing the service does not know.

const readme = readFileSync(`${repoRoot}README.md`, 'utf8')
const section = readme.split('\n## Configuration\n')[1]!.split('\n## ')[0]!

t.test('the configuration table lists every environment variable config.ts parses, and no other', async (t) => {
  const rows = [...section.matchAll(/^\| `([A-Z0-9_]+)` \|/gm)].map((m) => m[1]!)
  t.same([...rows].sort(), Object.keys(environmentSchema.shape).sort())
})

t.test('the JOBSVC_CONFIG example holds every tunable, and no other', async (t) => {
  const example = JSON.parse(section.split('```json\n')[1]!.split('```')[0]!) as { tunables: Record<string, unknown> }
  t.same(Object.keys(example.tunables).sort(), Object.keys(tunablesSchema.shape).sort())
  t.same(example.tunables, tunablesSchema.parse({}), 'each with its default')
})
