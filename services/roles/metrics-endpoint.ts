import type { Server } from 'node:http'
import { isNatsConnected } from '../../streams/connection.ts'
import { connectionUp, startMetricsServer, type MetricsSnapshot } from '../infrastructure/metrics.ts'
import type { Deps } from '../infrastructure/runtime.ts'

/**
 * GET /metrics of one process, whatever its roles: what each role counts lands in the process's
 * registry, and the role thread's (when the API shares the process with the background roles)
 * is asked for at each scrape and added in. Connection state is read at the scrape itself.
 */
export function serveMetrics(deps: Deps, port: number, otherThreads: () => Promise<MetricsSnapshot[]>): Promise<{ address: string; server: Server }> {
  return startMetricsServer(
    deps.config.host,
    port,
    async () => {
      connectionUp.set({ dependency: 'nats' }, isNatsConnected(deps.nats.nc) ? 1 : 0)
      connectionUp.set(
        { dependency: 'postgres' },
        await deps.sql`SELECT 1`.then(
          () => 1,
          () => 0,
        ),
      )
    },
    otherThreads,
  )
}
