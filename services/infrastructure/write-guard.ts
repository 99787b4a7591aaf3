import { AsyncLocalStorage } from 'node:async_hooks'
import type { KV } from '@nats-io/kv'
import type { JetStreamManager } from '@nats-io/jetstream'
import type { NatsConnection } from '@nats-io/transport-node'
import { openSql, type Sql } from '../../projections/database.ts'
import { EventStore } from '../../streams/event-store.ts'
import { ConfigError } from './config.ts'

/**
 * The first nats-server release whose clustered streams check an expected last subject sequence
 * against the messages still being proposed, not only against those already applied: before it,
 * two appends in flight at once with the same expectation can both be stored
 * (nats-io/nats-server#4320). `test/cluster/guards.test.ts` sees it on 2.9.10 for every guard
 * below. One replica is exact on every version.
 */
export const exactExpectationsSince = '2.9.21'

/** The first key of the guard's advisory locks; the second is the hash of what is written (a subject, a bucket key). */
const guardLockClass = 23

/** Postgres connections the guard holds at most per process, apart from the main pool (see WriteGuard). */
const guardConnections = 8

/** True when `version` (the server's INFO, `2.9.10`) is before `than`; a version that does not parse counts as before. */
export function isVersionBefore(version: string, than: string): boolean {
  const parse = (v: string) => /^v?(\d+)\.(\d+)\.(\d+)(-\S+)?$/.exec(v.trim())
  const a = parse(version)
  const b = parse(than)
  if (a === null || b === null) return true
  for (let i = 1; i <= 3; i++) {
    if (Number(a[i]) !== Number(b[i])) return Number(a[i]) < Number(b[i])
  }
  // A pre-release comes before its release.
  return a[4] !== undefined && b[4] === undefined
}

/** Whether guarded writes must be serialized: replicated streams on a server that checks expectations only when proposing. */
export function needsWriteLocks(replicas: number, serverVersion: string): boolean {
  return replicas > 1 && isVersionBefore(serverVersion, exactExpectationsSince)
}

/** KV writes that name what they expect to replace: the bucket's compare-and-set. */
const compareAndSet = new Set<PropertyKey>(['create', 'update', 'delete', 'purge'])

/**
 * The one path of every write whose correctness rests on the log's expected-sequence check (the
 * guards). Those writes are, by construction, of two kinds only:
 * - an event append (`EventStore.append`, made through `eventStore`): every decision on an
 *   existing aggregate, among them job commands, a login's TOTP step and recovery code, a
 *   promotion code's use, a project's or a recurring schedule's change (an append that creates an
 *   aggregate is exact on every version and takes no lock: see streams/event-store.ts);
 * - a compare-and-set on a KV bucket (made through `bucket`): `create`, `update`, and `delete` or
 *   `purge` with a previous revision, among them the failed-login and anonymous-request windows,
 *   cooldowns and idempotency reservations.
 *
 * Where the server's check is not exact (`needsWriteLocks`), each of them holds a Postgres
 * advisory lock on what it writes (the subject, or the bucket and key) across every process of
 * the install while it is in flight, so no two with the same expectation are ever proposed at
 * once; elsewhere they go straight to the server. A write made while the same lock is held (a job
 * command holds its job's subject for its whole decision) does not take it again. The locks come
 * from a pool of their own, never from the main one, so a transaction of the main pool waiting for
 * a guarded write can never hold the connection that write needs.
 */
export class WriteGuard {
  readonly locking: boolean
  readonly #pool: Sql | null
  readonly #held = new AsyncLocalStorage<ReadonlySet<string>>()
  /** What this guard made, and so guards. */
  readonly #made = new WeakSet<object>()

  constructor(databaseUrl: string, locking: boolean, name = 'jobsvc') {
    this.locking = locking
    this.#pool = locking ? openSql(databaseUrl, { max: guardConnections, applicationName: `${name}-write-guard`, synchronousCommit: false }) : null
  }

  /** Runs `write` alone among the guarded writes of `key`, in every process; at once when no lock is needed. */
  readonly serialize = async <T>(key: string, write: () => Promise<T>): Promise<T> => {
    // Asked only with locks on: an AsyncLocalStorage that has run once costs every promise of the process.
    if (this.#pool === null) return write()
    const held = this.#held.getStore()
    if (held?.has(key)) return write()
    return (await this.#pool.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${guardLockClass}, hashtext(${key}))`
      return this.#held.run(new Set([...(held ?? []), key]), write)
    })) as T
  }

  /** The event store whose appends go through `serialize` (by subject). */
  eventStore(ns: string, nc: NatsConnection, jsm: JetStreamManager): EventStore {
    const store = new EventStore(ns, nc, jsm, this.#pool === null ? undefined : this.serialize)
    this.#made.add(store)
    return store
  }

  /** The bucket `name` with its compare-and-set writes through `serialize` (by bucket and key); other calls pass through. */
  bucket(kv: KV, name: string): KV {
    const guarded =
      this.#pool === null
        ? kv
        : new Proxy(kv, {
            get: (target, property) => {
              const value: unknown = Reflect.get(target, property, target)
              if (typeof value !== 'function') return value
              const call = (...args: unknown[]) => (value as (...a: unknown[]) => unknown).apply(target, args)
              if (!compareAndSet.has(property)) return call
              return (key: string, ...rest: unknown[]) => {
                // A delete or purge without a previous revision expects nothing: no guard.
                const isGuarded =
                  property === 'create' || property === 'update' || (rest[0] as { previousSeq?: number } | undefined)?.previousSeq !== undefined
                return isGuarded ? this.serialize(`kv:${name}:${key}`, async () => call(key, ...rest)) : call(key, ...rest)
              }
            },
          })
    this.#made.add(guarded)
    return guarded
  }

  /** Whether `target` (an event store or a bucket) makes its guarded writes through this guard. */
  guards(target: object): boolean {
    return this.#made.has(target)
  }

  async close(): Promise<void> {
    await this.#pool?.end({ timeout: 5 })
  }
}

/** JOBSVC_REPLICAS above 1 against a server whose check is not exact, with a guarded write that bypasses the guard. */
export class UnguardedWrites extends ConfigError {
  constructor(serverVersion: string, unguarded: readonly string[]) {
    super(
      `JOBSVC_REPLICAS=3 against nats-server ${serverVersion}, which is older than ${exactExpectationsSince} (nats-io/nats-server#4320), needs every write that expects a sequence to hold the write lock, but ${unguarded.join(', ')} writes without it; upgrade the NATS servers to ${exactExpectationsSince} or later, or run with JOBSVC_REPLICAS=1 on one server`,
    )
    this.name = 'UnguardedWrites'
  }
}

function isGuardable(value: unknown): boolean {
  if (value instanceof EventStore) return true
  const kv = value as Partial<Record<string, unknown>> | null
  return typeof kv === 'object' && kv !== null && typeof kv.create === 'function' && typeof kv.update === 'function' && typeof kv.get === 'function'
}

/**
 * The start-up check: refuses replicas against a server whose expected-sequence check is not
 * exact unless every event store and bucket among `handles` (a process's dependencies) writes
 * through `guard` with its locks on. True by construction for what `openRuntime` builds; it
 * catches a store or bucket added beside them without the guard.
 */
export function assertWritesGuarded(handles: Readonly<Record<string, unknown>>, guard: WriteGuard, replicas: number, serverVersion: string): void {
  if (!needsWriteLocks(replicas, serverVersion)) return
  const unguarded = Object.entries(handles)
    .filter(([, value]) => isGuardable(value) && !(guard.locking && guard.guards(value as object)))
    .map(([name]) => name)
  if (unguarded.length > 0) throw new UnguardedWrites(serverVersion, unguarded)
}
