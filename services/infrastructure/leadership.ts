import { openSql, type Tx } from '../../projections/database.ts'

const retryMs = 1000

/** What a leader is handed while it leads. */
export interface Leadership {
  /** The backend pid of the session that holds the lock. */
  pid: number
  /**
   * Aborts when that session is gone (its connection closed: Postgres restarted, or the
   * connection was cut): the lock went with it, and another process may lead already.
   */
  lost: AbortSignal
  /**
   * Throws LeadershipLost unless the session still holds the lock, checked in `tx`, so that a
   * transaction that checks first commits only while this process leads.
   */
  assert(tx: Tx): Promise<void>
}

/**
 * Runs `lead` while this process holds a session-level Postgres advisory lock named `name`; when
 * the lock is taken elsewhere, or Postgres is out of reach, it tries again every second (or, with
 * `blocking`, queues for it). The lock lives on a connection of its own, opened for each
 * attempt: a session lost with its server (a restart, a failover) takes the lock with it, `lost`
 * tells the leader, and the next attempt takes the lock again once Postgres is back. If the
 * process dies the connection closes and another standby takes over. Failures in a row (an
 * outage) are reported to `onError` once, and a leadership lost once per loss.
 */
export async function holdLeadership(
  databaseUrl: string,
  name: string,
  signal: AbortSignal,
  lead: (leadership: Leadership) => Promise<void>,
  onError: (err: unknown) => void,
  options: { blocking?: boolean; applicationName?: string } = {},
): Promise<void> {
  let failing = false
  while (!signal.aborted) {
    const lost = new AbortController()
    const conn = openSql(databaseUrl, {
      max: 1,
      applicationName: options.applicationName ?? 'jobsvc-leadership',
      maxLifetimeSeconds: null,
      onclose: () => lost.abort(),
    })
    try {
      const [row] = options.blocking
        ? await conn<{ ok: boolean; pid: number }[]>`SELECT pg_advisory_lock(hashtext(${name})) IS NOT NULL AS ok, pg_backend_pid() AS pid`
        : await conn<{ ok: boolean; pid: number }[]>`SELECT pg_try_advisory_lock(hashtext(${name})) AS ok, pg_backend_pid() AS pid`
      failing = false
      if (row?.ok && !lost.signal.aborted) {
        const pid = row.pid
        try {
          await lead({ pid, lost: lost.signal, assert: (tx) => assertHolding(tx, pid, name) })
        } finally {
          if (!lost.signal.aborted) await conn`SELECT pg_advisory_unlock(hashtext(${name}))`.catch(() => undefined)
        }
        if (lost.signal.aborted && !signal.aborted) onError(new LeadershipLost())
      }
    } catch (err) {
      if (!failing && !signal.aborted) onError(err)
      failing = true
    } finally {
      await conn.end({ timeout: 1 }).catch(() => undefined)
    }
    if (!signal.aborted) await sleep(retryMs, signal)
  }
}

/**
 * Throws unless the session `pid` holds the advisory lock `name`. The key is checked as well as
 * the pid: after a Postgres restart another session may have been given the same pid.
 * `pg_advisory_lock(bigint)` shows its key in pg_locks as classid (high half) and objid (low half).
 */
async function assertHolding(tx: Tx, pid: number, name: string): Promise<void> {
  const [row] = await tx<{ held: boolean }[]>`
    SELECT EXISTS (
      SELECT 1 FROM pg_locks
      WHERE locktype = 'advisory' AND pid = ${pid} AND granted AND objsubid = 1
        AND ((classid::bigint << 32) | objid::bigint) = hashtext(${name})::bigint
    ) AS held`
  if (!row?.held) throw new LeadershipLost()
}

export class LeadershipLost extends Error {
  constructor() {
    super('this process no longer holds the leadership lock')
    this.name = 'LeadershipLost'
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    signal.addEventListener('abort', done, { once: true })
  })
}
