import { readdir, readFile } from 'node:fs/promises'
import { ESLint } from 'eslint'
import t from 'tap'
import { projections } from '../../projections/index.ts'
import { repoRoot } from '../support/harness.ts'

// The rule as the repository configures it (eslint.config.js), on examples given as files of the layers.
const eslint = new ESLint({ cwd: repoRoot })
const ruleId = 'jobsvc-read-models/no-read-model-sql'

async function findings(code: string, filePath: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath })
  return result!.messages.filter((m) => m.ruleId === ruleId).map((m) => m.message)
}

const wrong = `import type { Sql } from '../../../projections/database.ts'

export async function pendingIds(sql: Sql, projectId: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>\`
    SELECT id FROM jobs WHERE project_id = \${projectId} AND state = 'pending' \${sql\`AND queue = 'default'\`}\`
  return rows.map((r) => r.id)
}
`

const right = `import type { Sql } from '../../../projections/database.ts'
import { jobList } from '../../../projections/job-list.ts'

export async function pendingCount(sql: Sql, projectId: string): Promise<number> {
  return jobList.pendingCount(sql, projectId, null)
}
`

t.test('SQL over a read-model table in services/ fails', async (t) => {
  t.same(await findings(wrong, 'services/use-cases/jobs/example.ts'), [
    'SQL over the read-model table jobs belongs in projections/, beside the projection that writes it: call (or add) a named query there',
  ])
  t.equal(
    (
      await findings(
        `declare const tx: any\nexport const gone = tx.unsafe('DELETE FROM activity WHERE id = $1', ['x'])\n`,
        'services/roles/example.ts',
      )
    ).length,
    1,
  )
})

t.test('a named query of the read model passes; the same SQL in projections/ passes', async (t) => {
  t.same(await findings(right, 'services/use-cases/jobs/example.ts'), [])
  t.same(await findings(wrong, 'projections/example.ts'), [])
})

t.test('SQL over a table a service owns passes', async (t) => {
  t.same(
    await findings('declare const sql: any\nexport const n = sql`SELECT count(*) FROM request_counts`\n', 'services/use-cases/metering/example.ts'),
    [],
  )
})

t.test('the rule covers exactly the tables the projections write, read from the migrations', async (t) => {
  // projection_checkpoints and projection_failures are the projector's own tables in projections/.
  const written = new Set([...projections.flatMap((p) => p.tables), 'projection_checkpoints', 'projection_failures'])
  const dir = new URL('../../projections/sql/', import.meta.url)
  const created: string[] = []
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort()) {
    for (const m of (await readFile(new URL(file, dir), 'utf8')).matchAll(/\bCREATE TABLE\s+([a-z_]+)/gi)) created.push(m[1]!.toLowerCase())
  }
  t.ok(created.length >= written.size)
  for (const table of created) {
    const flagged =
      (await findings(`declare const sql: any\nexport const q = sql\`SELECT * FROM ${table}\`\n`, 'services/roles/example.ts')).length > 0
    t.equal(flagged, written.has(table), `${table}: ${written.has(table) ? 'a read model' : 'a service-owned table'}`)
  }
  for (const table of written) t.ok(created.includes(table), `${table} is created by a migration`)
})
