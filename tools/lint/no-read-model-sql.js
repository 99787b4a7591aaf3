// A read model owns its queries (README, "Architecture"): SQL that names a table a projection
// writes lives in projections/, beside that projection's apply, and the layers above call its
// named functions (jobList.page, webhookSubscriptions.active, ...), so a column change is one
// file's change.
//
// Which tables: every table a migration of projections/sql/ creates, read from the migrations
// so that a new one is covered without a change here, except the tables services own outright.
// The criterion: a table no projection writes (none lists it in its `tables`, a replay does not
// rebuild it) is its writer's own state, and stays with that writer, each behind one module:
// request_counts (use-cases/metering/request-rate.ts), project_usage
// (use-cases/metering/allowance.ts), log_byte_counts (infrastructure/log-budget.ts),
// worker_presence and worker_outcomes (use-cases/workers/worker-presence.ts).
// test/lint/no-read-model-sql.test.ts checks this split against the projections' `tables`.
//
// What counts as SQL: a tagged template (postgres.js: sql`...`, tx`...`) or a `.unsafe(...)`
// call whose text names such a table after FROM, JOIN, UPDATE, INTO, USING or TRUNCATE.
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))

const serviceOwnedTables = new Set(['request_counts', 'project_usage', 'log_byte_counts', 'worker_presence', 'worker_outcomes'])

const allowedPrefixes = ['projections/']

let cachedTables = null

function readModelTables() {
  if (cachedTables !== null) return cachedTables
  const dir = path.join(repoRoot, 'projections/sql')
  const tables = new Set()
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.sql'))) {
    for (const m of readFileSync(path.join(dir, file), 'utf8').matchAll(/\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"?([a-z_][a-z0-9_]*)"?/gi)) {
      const table = m[1].toLowerCase()
      if (!serviceOwnedTables.has(table)) tables.add(table)
    }
  }
  cachedTables = tables
  return tables
}

const namedTable = /\b(?:FROM|JOIN|UPDATE|INTO|USING|TRUNCATE(?:\s+TABLE)?)\s+(?:ONLY\s+)?"?([a-z_][a-z0-9_]*)"?/gi

function tablesNamedIn(text, tables) {
  const named = new Set()
  for (const m of text.matchAll(namedTable)) {
    const table = m[1].toLowerCase()
    if (tables.has(table)) named.add(table)
  }
  return [...named]
}

function isAllowed(filename) {
  const relative = path.relative(repoRoot, path.resolve(repoRoot, filename)).split(path.sep).join('/')
  return allowedPrefixes.some((prefix) => relative.startsWith(prefix))
}

/** @type {import('eslint').Rule.RuleModule} */
export default {
  meta: {
    type: 'problem',
    docs: { description: 'SQL over read-model tables lives in projections/, beside the projection that writes them' },
    messages: {
      readModelSql:
        'SQL over the read-model table {{tables}} belongs in projections/, beside the projection that writes it: call (or add) a named query there',
    },
    schema: [],
  },
  create(context) {
    if (isAllowed(context.filename)) return {}
    const tables = readModelTables()
    const check = (node, text) => {
      const named = tablesNamedIn(text, tables)
      if (named.length > 0) context.report({ node, messageId: 'readModelSql', data: { tables: named.join(', ') } })
    }
    return {
      TaggedTemplateExpression(node) {
        check(node, node.quasi.quasis.map((q) => q.value.raw).join(' $ '))
      },
      CallExpression(node) {
        const callee = node.callee
        if (callee.type !== 'MemberExpression' || callee.property.type !== 'Identifier' || callee.property.name !== 'unsafe') return
        const arg = node.arguments[0]
        if (arg?.type === 'Literal' && typeof arg.value === 'string') check(node, arg.value)
        else if (arg?.type === 'TemplateLiteral') check(node, arg.quasis.map((q) => q.value.raw).join(' $ '))
      },
    }
  },
}
