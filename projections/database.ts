import postgres from 'postgres'

export type Sql = postgres.Sql<Record<string, unknown>>
export type Tx = postgres.TransactionSql<Record<string, unknown>>
/** Anything queries can run on: the pool or a transaction. */
export type Queryable = Sql | Tx

/**
 * int8 columns (sequences, durations) come back as numbers: stream sequences stay far below
 * 2^53, and strings would leak into every comparison.
 */
export function openSql(url: string, options: { max?: number; applicationName?: string; synchronousCommit?: boolean } = {}): Sql {
  return postgres(url, {
    max: options.max ?? 10,
    onnotice: () => undefined,
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
 * Whether `err` says Postgres is out of reach rather than that a statement was wrong: a
 * connection failure, SQLSTATE class 08 (connection exception), 57P01–57P03 (shutting down,
 * crashed, not yet accepting) or 53300 (too many connections).
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; errno?: unknown } | null
  if (e === null || typeof e !== 'object') return false
  const code = typeof e.code === 'string' ? e.code : typeof e.errno === 'string' ? e.errno : ''
  return connectionFailures.has(code) || code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300'
}

function databaseName(url: string): string {
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
