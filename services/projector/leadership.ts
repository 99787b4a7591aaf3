import type { Sql } from '../../projections/database.ts'

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
  lead: () => Promise<void>,
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
        try {
          await lead()
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
