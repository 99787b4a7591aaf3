import { readdir, readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import type { Sql } from './database.ts'

const sqlDir = fileURLToPath(new URL('./sql/', import.meta.url))

interface Migration {
  version: number
  name: string
  file: string
}

/**
 * The migrations in order. Two files with one number would apply only the first (the version is
 * the key of `schema_migrations`), which parallel branches can easily produce: refused outright.
 */
export async function listMigrations(): Promise<Migration[]> {
  const files = (await readdir(sqlDir)).filter((f) => /^\d{4}-.+\.sql$/.test(f)).sort()
  const migrations = files.map((file) => ({ version: Number(file.slice(0, 4)), name: file.replace(/\.sql$/, ''), file }))
  const clash = migrations.find((m, i) => i > 0 && migrations[i - 1]!.version === m.version)
  if (clash !== undefined) throw new Error(`two migrations are numbered ${clash.version}: renumber one of projections/sql/${clash.file}`)
  return migrations
}

/**
 * Applies the forward-only numbered SQL files not yet applied, each in its own transaction. An
 * advisory lock serialises processes that start together.
 */
export async function migrate(sql: Sql): Promise<number[]> {
  const applied: number[] = []
  // Under the same lock: two concurrent CREATE TABLE IF NOT EXISTS can both miss the table and
  // one then fails on pg_type's unique index (seen when two processes start on a fresh database).
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(hashtext('jobsvc.migrate'))`
    await tx`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`
  })
  for (const m of await listMigrations()) {
    await sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(hashtext('jobsvc.migrate'))`
      const done = await tx`SELECT 1 FROM schema_migrations WHERE version = ${m.version}`
      if (done.length > 0) return
      await tx.unsafe(await readFile(sqlDir + m.file, 'utf8'))
      await tx`INSERT INTO schema_migrations (version, name) VALUES (${m.version}, ${m.name})`
      applied.push(m.version)
    })
  }
  return applied
}

/** True when every migration file has been applied (the readiness probe asks this). */
export async function isMigrated(sql: Sql): Promise<boolean> {
  const wanted = await listMigrations()
  const rows = await sql`SELECT version FROM schema_migrations`.catch(() => [])
  const have = new Set(rows.map((r) => Number(r.version)))
  return wanted.every((m) => have.has(m.version))
}
