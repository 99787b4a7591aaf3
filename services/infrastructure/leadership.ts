import type { Sql, Tx } from '../../projections/database.ts'

const retryMs = 1000

/**
 * Runs `lead` while this process holds a session-level Postgres advisory lock named `name`,
 * on a connection reserved for the purpose; when the lock is taken elsewhere it retries every
 * second (or, with `blocking`, queues for it). If the process dies the connection closes and
 * another standby takes over.
 */
export async function holdLeadership(
  sql: Sql,
  name: string,
  signal: AbortSignal,
  lead: (leaderPid: number) => Promise<void>,
  onError: (err: unknown) => void,
  options: { blocking?: boolean } = {},
): Promise<void> {
  while (!signal.aborted) {
    let conn: Awaited<ReturnType<Sql['reserve']>> | undefined
    try {
      conn = await sql.reserve()
      const [row] = options.blocking
        ? await conn<{ ok: boolean }[]>`SELECT pg_advisory_lock(hashtext(${name})) IS NOT NULL AS ok`
        : await conn<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(hashtext(${name})) AS ok`
      if (row?.ok) {
        const [me] = await conn<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`
        try {
          await lead(me!.pid)
        } finally {
          await conn`SELECT pg_advisory_unlock(hashtext(${name}))`.catch(() => undefined)
        }
      }
    } catch (err) {
      onError(err)
    } finally {
      conn?.release()
    }
    if (!signal.aborted) await sleep(retryMs, signal)
  }
}

/**
 * Throws unless the session `leaderPid` still holds an advisory lock. The leadership connection
 * holds nothing else, so any granted advisory lock of that session is the leadership lock; if the
 * connection dropped, the lock is gone and another process may lead.
 */
export async function assertStillLeading(tx: Tx, leaderPid: number): Promise<void> {
  const [row] = await tx<{ held: boolean }[]>`
    SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = ${leaderPid} AND granted) AS held`
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
