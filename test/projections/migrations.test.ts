import t from 'tap'
import { listMigrations } from '../../projections/migrate.ts'

// Branches merged together can both add "the next" migration; the second file with one number
// would never be applied (its version is already in schema_migrations), so listing refuses it.
t.test('every migration has a number of its own, in order', async (t) => {
  const migrations = await listMigrations()
  t.ok(migrations.length > 0)
  migrations.forEach((m, i) => {
    if (i > 0) t.ok(m.version > migrations[i - 1]!.version, `${m.file} comes after ${migrations[i - 1]!.file}`)
  })
})
