import { readFile, writeFile } from 'node:fs/promises'
import t from 'tap'
import { dropDatabase, ensureDatabase, openSql } from '../../projections/database.ts'
import { migrate } from '../../projections/migrate.ts'
import { isolatedNames, repoRoot } from '../support/harness.ts'
import { dumpSchema, schemaDumpFile } from '../support/schema-dump.ts'

// Issue 24, item 7: the read-model schema after every migration is checked in
// (projections/schema.snap), so that a migration's effect reads in the same diff as the migration.
// Two fresh databases are migrated and described; both descriptions must be the same text (and
// the same when asked twice), and equal the checked-in file. JOBSVC_UPDATE_SCHEMA=1 rewrites it.

async function migratedSchema(suffix: string): Promise<string[]> {
  const { databaseUrl } = isolatedNames(import.meta.filename, suffix)
  await ensureDatabase(databaseUrl)
  t.teardown(() => dropDatabase(databaseUrl))
  const sql = openSql(databaseUrl, { max: 2 })
  t.teardown(() => sql.end({ timeout: 5 }))
  await migrate(sql)
  return [await dumpSchema(sql), await dumpSchema(sql)]
}

t.test('the schema after every migration is the checked-in projections/schema.snap', async (t) => {
  const [first, again] = await migratedSchema('_a')
  const [other] = await migratedSchema('_b')
  t.equal(again, first, 'the same database describes itself the same way twice')
  t.equal(other, first, 'two fresh databases migrated alike describe alike')
  t.match(first, /CREATE TABLE jobs \(/)
  t.match(first, /CREATE TABLE schema_migrations \(/)
  t.match(first, /CREATE OR REPLACE FUNCTION public\.add_histograms/)
  const path = `${repoRoot}${schemaDumpFile}`
  if (process.env.JOBSVC_UPDATE_SCHEMA === '1') await writeFile(path, first!)
  const checkedIn = await readFile(path, 'utf8').catch(() => '')
  t.equal(checkedIn, first, `${schemaDumpFile} is out of date: rerun with JOBSVC_UPDATE_SCHEMA=1 and commit the diff`)
})
