import { basename } from 'node:path'
import { ensureDatabase, openSql, type Sql } from '../../projections/database.ts'
import { migrate } from '../../projections/migrate.ts'
import { connectNats, type NatsHandles } from '../../streams/connection.ts'
import { ensureStreams } from '../../streams/definitions.ts'
import { EventStore } from '../../streams/event-store.ts'
import { isolatedNames, removeIsolated, type TestLike } from './harness.ts'

export interface IsolatedStore {
  names: { namespace: string; databaseUrl: string }
  nats: NatsHandles
  store: EventStore
}

/**
 * The event store alone, without the service's roles, in this test file's own namespace: for tests
 * that drive `streams/` and `projections/` directly. By default it also creates and migrates the
 * file's database and returns a pool on it; `{ database: false }` skips that for stream-only tests.
 * Each teardown is registered right after the setup it undoes, so tap (which runs them in reverse)
 * closes the connections before it removes the namespace and the database.
 */
export function openIsolatedStore(t: TestLike, file: string, options?: { database?: true }): Promise<IsolatedStore & { sql: Sql }>
export function openIsolatedStore(t: TestLike, file: string, options: { database: false }): Promise<IsolatedStore>
export async function openIsolatedStore(t: TestLike, file: string, options: { database?: boolean } = {}): Promise<IsolatedStore & { sql?: Sql }> {
  const names = isolatedNames(file)
  t.teardown(() => removeIsolated(names))
  let sql: Sql | undefined
  if (options.database !== false) {
    await ensureDatabase(names.databaseUrl)
    const pool = openSql(names.databaseUrl, { max: 4 })
    t.teardown(() => pool.end({ timeout: 5 }))
    await migrate(pool)
    sql = pool
  }
  const nats = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', `jobsvc-test-${basename(file).replace(/\.test\.ts$/, '')}`)
  t.teardown(() => nats.nc.close())
  await ensureStreams(nats.jsm, names.namespace)
  const store = new EventStore(names.namespace, nats.nc, nats.jsm)
  return { names, sql, nats, store }
}
