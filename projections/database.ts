import postgres from 'postgres'

export type Sql = postgres.Sql<Record<string, unknown>>
export type Tx = postgres.TransactionSql<Record<string, unknown>>
/** Anything queries can run on: the pool or a transaction. */
export type Queryable = Sql | Tx

/**
 * Reconnection after a lost connection, in seconds: postgres.js's default waits up to 20 s
 * (3^n / 100, n counting failed connections across the pool), so a pool that saw a Postgres
 * restart kept its queries waiting long after the server was back. Capped at 1 s (with jitter,
 * so the pools of many processes do not reconnect in step); a query during an outage fails
 * within about that long, as a 503 to clients.
 */
const reconnectBackoff = (failures: number) => (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** failures, 1)

/**
 * A server out of reach (no refusal, no answer: a host gone in a failover) fails a connection
 * attempt after this long rather than postgres.js's 30 s.
 */
const connectTimeoutSeconds = 5

export interface SqlOptions {
  max?: number
  applicationName?: string
  synchronousCommit?: boolean
  /**
   * Told when a connection of the pool closes (the server went away, or it was ended). A pool of
   * one connection holding session state (an advisory lock) learns here that the state is gone.
   */
  onclose?: () => void
  /**
   * Seconds a connection lives before it is replaced (postgres.js: 30 to 60 minutes); null keeps
   * it for as long as it works, as a session holding a lock must.
   */
  maxLifetimeSeconds?: number | null
  /**
   * Reconnects at once instead of backing off: for a connection asked at most once per caller's
   * request (a readiness probe), whose answer during an outage should be a refusal now rather
   * than a wait for the next attempt.
   */
  reconnectAtOnce?: boolean
}

/**
 * int8 columns (sequences, durations) come back as numbers: stream sequences stay far below
 * 2^53, and strings would leak into every comparison.
 */
export function openSql(url: string, options: SqlOptions = {}): Sql {
  return postgres(url, {
    max: options.max ?? 10,
    onnotice: () => undefined,
    backoff: options.reconnectAtOnce === true ? () => 0 : reconnectBackoff,
    connect_timeout: connectTimeoutSeconds,
    ...(options.onclose === undefined ? {} : { onclose: options.onclose }),
    ...(options.maxLifetimeSeconds === undefined ? {} : { max_lifetime: options.maxLifetimeSeconds }),
    connection: {
      application_name: options.applicationName ?? 'jobsvc',
      ...(options.synchronousCommit === false ? { synchronous_commit: 'off' } : {}),
    },
    types: {
      bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) },
    },
  }) as unknown as Sql
}

/** postgres.js's own codes for a connection it could not make or lost, and the OS's. */
const connectionFailures = new Set([
  'CONNECT_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EPIPE',
])

/**
 * Whether `err` (or an error it was caused by) says Postgres is out of reach rather than that a
 * statement was wrong: a connection failure, SQLSTATE class 08 (connection exception), 57P01–57P03
 * (shutting down, crashed, not yet accepting) or 53300 (too many connections).
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, errno } = e as { code?: unknown; errno?: unknown }
    const c = typeof code === 'string' ? code : typeof errno === 'string' ? errno : ''
    if (connectionFailures.has(c) || c.startsWith('08') || c === '57P01' || c === '57P02' || c === '57P03' || c === '53300') return true
  }
  return false
}

export function databaseName(url: string): string {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''))
  if (!name) throw new Error(`DATABASE_URL names no database: ${url}`)
  return name
}

function maintenanceUrl(url: string): string {
  const u = new URL(url)
  u.pathname = '/postgres'
  return u.toString()
}

/** Creates the database named by `url` when it is absent; safe when several processes race. */
export async function ensureDatabase(url: string): Promise<void> {
  const name = databaseName(url)
  const admin = postgres(maintenanceUrl(url), { max: 1, onnotice: () => undefined })
  try {
    const rows = await admin`SELECT 1 FROM pg_database WHERE datname = ${name}`
    if (rows.length > 0) return
    try {
      await admin.unsafe(`CREATE DATABASE "${name.replace(/"/g, '""')}"`)
    } catch (err) {
      // 42P04 duplicate_database; a CREATE racing another one fails instead on the catalog's
      // unique index (23505), which means the same thing.
      const code = (err as { code?: string }).code
      if (code !== '42P04' && code !== '23505') throw err
    }
  } finally {
    await admin.end()
  }
}

/** Drops the database named by `url` (tests drop only what they created). */
export async function dropDatabase(url: string): Promise<void> {
  const name = databaseName(url)
  const admin = postgres(maintenanceUrl(url), { max: 1, onnotice: () => undefined })
  try {
    await admin.unsafe(`DROP DATABASE IF EXISTS "${name.replace(/"/g, '""')}" WITH (FORCE)`)
  } finally {
    await admin.end()
  }
}
