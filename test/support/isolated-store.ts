import { basename } from 'node:path'
import { ensureDatabase, openSql, type Sql } from '../../projections/database.ts'
import { migrate } from '../../projections/migrate.ts'
import { connectNats, type NatsHandles } from '../../streams/connection.ts'
import { consumeBatches, type BatchConsumerOptions } from '../../streams/consume.ts'
import { ensureStreams } from '../../streams/definitions.ts'
import { EventStore, type EventRecord } from '../../streams/event-store.ts'
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

/**
 * Runs `consumeBatches` for the rest of the test: a consumer error fails the test, and the
 * teardown stops the consumer, waits for it and removes its durable.
 */
export function consumeDuringTest(
  t: TestLike & { fail(message: string): unknown },
  nats: NatsHandles,
  opts: BatchConsumerOptions,
  handle: (records: EventRecord[]) => Promise<void>,
): void {
  const stop = new AbortController()
  const done = consumeBatches(nats, opts, handle, stop.signal, (err) => t.fail(String(err)))
  t.teardown(async () => {
    stop.abort()
    await done
    await nats.jsm.consumers.delete(opts.stream, opts.durable).catch(() => undefined)
  })
}
