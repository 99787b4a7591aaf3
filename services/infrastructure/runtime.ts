import { randomBytes } from 'node:crypto'
import type { KV } from '@nats-io/kv'
import type { Tracer } from '@opentelemetry/api'
import { pino, type Logger } from 'pino'
import pinoPretty from 'pino-pretty'
import { monotonicFactory } from 'ulid'
import { ensureDatabase, openSql, type Sql } from '../../projections/database.ts'
import { migrate } from '../../projections/migrate.ts'
import { connectNats, type NatsHandles } from '../../streams/connection.ts'
import { ensureStreams, openAuthLimitsBucket, openHeartbeatBucket, openIdempotencyBucket } from '../../streams/definitions.ts'
import type { EventStore } from '../../streams/event-store.ts'
import type { Config } from './config.ts'
import { LogBudget } from './log-budget.ts'
import { createMailer, type Mailer } from './mailer.ts'
import { startTracing } from './tracing.ts'
import { assertWritesGuarded, exactExpectationsSince, needsWriteLocks, WriteGuard } from './write-guard.ts'
import { systemResolver, type HostResolver } from './url-safety.ts'

/** What every role is handed: connections, clock and id source are passed in, never imported. */
export interface Deps {
  config: Readonly<Config>
  log: Logger
  /** The process's name: the application_name of its Postgres sessions and the name of its NATS connection. */
  name: string
  nats: NatsHandles
  store: EventStore
  /**
   * The read models. Their commits do not wait for the WAL flush either (synchronous_commit
   * off): every table here is a projection of the log whose checkpoint commits in the same
   * transaction, so a Postgres crash loses a tail of whole transactions, checkpoint included,
   * and the projector applies them again from the log when it resumes (docs/architecture.md, "Durability").
   */
  sql: Sql
  /**
   * Counters of the allowance and the request limit. Their commits do not wait for the WAL
   * flush (synchronous_commit off): a Postgres crash may forget the last few hundred
   * milliseconds of counts, a service restart forgets nothing, and creation stops waiting on a
   * disk flush for every job.
   */
  meteringSql: Sql
  heartbeats: KV
  /** Sliding windows of the anonymous auth routes, login failures and cooldowns. */
  authLimits: KV
  /** Stored answers of requests sent with an idempotency key. */
  idempotency: KV
  /**
   * What every write that expects a sequence goes through (the store's appends, the buckets'
   * compare-and-set); a job command holds its job's lock through it for its whole decision.
   */
  guard: WriteGuard
  mailer: Mailer
  /** The current instant; tests may pass a fixed or shifted clock. */
  now: () => Date
  /** Host name → addresses, for webhook URL checks (tests replace it to play DNS tricks). */
  resolveHost: HostResolver
  /** A new ULID, monotonic within this process. */
  newUlid: () => string
  /** The service's own spans, exported when OTEL_EXPORTER_OTLP_ENDPOINT is set; null: none are recorded. */
  tracer: Tracer | null
}

/**
 * A ULID takes 16 random characters; the ulid package asks the OS for each one separately, which
 * was ~5% of a request's CPU. Drawing them from a pooled crypto buffer keeps them
 * cryptographically random at a fraction of the cost.
 */
function pooledRandom(): () => number {
  let pool = randomBytes(4096)
  let at = 0
  return () => {
    if (at >= pool.length) {
      pool = randomBytes(4096)
      at = 0
    }
    return pool[at++]! / 256
  }
}

export interface Runtime extends Deps {
  close(): Promise<void>
}

/**
 * The process's logger: one JSON object per line, or with `logFormat` `pretty` (development on a
 * terminal) human-readable lines through pino-pretty, written as they come (`destination`:
 * stdout unless given).
 */
export function createLogger(config: Pick<Config, 'logLevel'> & { logFormat?: Config['logFormat'] }, destination?: NodeJS.WritableStream): Logger {
  if (config.logFormat !== 'pretty')
    return destination === undefined ? pino({ level: config.logLevel }) : pino({ level: config.logLevel }, destination)
  const stream = pinoPretty({
    colorize: destination === undefined && process.stdout.isTTY === true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    sync: true,
    ...(destination === undefined ? {} : { destination }),
  })
  return pino({ level: config.logLevel }, stream)
}

/**
 * Connects to NATS and Postgres and creates what is missing: the database, the migrations,
 * the event stream and the heartbeat bucket. Idempotent, so every role and the CLI call it.
 */
export async function openRuntime(
  config: Readonly<Config>,
  log: Logger,
  name = 'jobsvc',
  pools: { connections: number; meteringConnections: number } = { connections: 20, meteringConnections: 4 },
): Promise<Runtime> {
  await ensureDatabase(config.databaseUrl)
  const sql = openSql(config.databaseUrl, { max: pools.connections, applicationName: name, synchronousCommit: false })
  try {
    await migrate(sql)
  } catch (err) {
    await sql.end()
    throw err
  }
  const meteringSql = openSql(config.databaseUrl, { max: pools.meteringConnections, applicationName: `${name}-metering`, synchronousCommit: false })
  const nats = await connectNats(config.natsUrl, name)
  // The server's version is in its INFO: it decides whether guarded writes take locks (write-guard.ts).
  const serverVersion = nats.nc.info?.version ?? 'unknown'
  const guard = new WriteGuard(config.databaseUrl, needsWriteLocks(config.replicas, serverVersion), name)
  let buckets: { heartbeats: KV; authLimits: KV; idempotency: KV }
  let store: EventStore
  try {
    await ensureStreams(nats.jsm, config.namespace, config.replicas, config.tunables.events_max_bytes)
    buckets = {
      heartbeats: guard.bucket(await openHeartbeatBucket(nats.nc, config.namespace, config.replicas), 'heartbeats'),
      authLimits: guard.bucket(await openAuthLimitsBucket(nats.nc, config.namespace, config.replicas), 'auth-limits'),
      idempotency: guard.bucket(await openIdempotencyBucket(nats.nc, config.namespace, config.replicas), 'idempotency'),
    }
    store = guard.eventStore(config.namespace, nats.nc, nats.jsm)
    assertWritesGuarded({ ...buckets, store }, guard, config.replicas, serverVersion)
  } catch (err) {
    // A refused start (streams with other replicas) leaves no connection keeping the process alive.
    await nats.nc.close()
    await guard.close()
    await meteringSql.end({ timeout: 5 })
    await sql.end({ timeout: 5 })
    throw err
  }
  if (guard.locking) {
    log.info(
      { nats_version: serverVersion },
      `nats-server ${serverVersion} is older than ${exactExpectationsSince}: with JOBSVC_REPLICAS=${config.replicas} every write that expects a sequence takes a Postgres advisory lock`,
    )
  }
  const { heartbeats, authLimits, idempotency } = buckets
  const mailer = createMailer(config.smtpUrl, log)
  const ulid = monotonicFactory(pooledRandom())
  const tracing = config.otlpEndpoint === null ? null : startTracing(config.otlpEndpoint, 'jobsvc')
  const runtime: Runtime = {
    config,
    log,
    name,
    nats,
    store,
    sql,
    meteringSql,
    heartbeats,
    authLimits,
    idempotency,
    guard,
    mailer,
    now: () => new Date(),
    resolveHost: systemResolver,
    newUlid: () => ulid(),
    tracer: tracing?.tracer ?? null,
    async close() {
      await tracing?.shutdown().catch((err) => log.warn({ err }, 'spans still buffered could not be exported'))
      await logBudget.stop()
      store.close()
      mailer.close()
      await nats.nc.drain().catch(() => undefined)
      await guard.close()
      await meteringSql.end({ timeout: 5 })
      await sql.end({ timeout: 5 })
    },
  }
  // Every append of a project, whichever role makes it, counts against the project's log budget.
  const logBudget = new LogBudget(meteringSql, config.plans, log, () => runtime.now())
  store.meter = logBudget
  return runtime
}
