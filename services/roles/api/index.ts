import type { Deps } from '../../infrastructure/runtime.ts'
import { isNatsConnected } from '../../../streams/connection.ts'
import { connectionUp, startMetricsServer } from '../../infrastructure/metrics.ts'
import { buildApp } from './app.ts'

export interface ApiRole {
  /** The address the server listens on, e.g. http://127.0.0.1:8080. */
  address: string
  stop(): Promise<void>
}

/** The API role: listens on HOST:PORT (port 0 picks a free one). */
export async function start(deps: Deps): Promise<ApiRole> {
  const stopping = new AbortController()
  const { app } = await buildApp(deps, stopping.signal)
  await app.listen({ host: deps.config.host, port: deps.config.port })
  const addr = app.server.address()
  const port = typeof addr === 'object' && addr !== null ? addr.port : deps.config.port
  const host = deps.config.host.includes(':') ? `[${deps.config.host}]` : deps.config.host
  const metrics =
    deps.config.metricsPort === null
      ? null
      : await startMetricsServer(deps.config.host, deps.config.metricsPort, async () => {
          connectionUp.set({ dependency: 'nats' }, isNatsConnected(deps.nats.nc) ? 1 : 0)
          connectionUp.set(
            { dependency: 'postgres' },
            await deps.sql`SELECT 1`.then(
              () => 1,
              () => 0,
            ),
          )
        })
  if (metrics !== null) deps.log.info({ address: metrics.address }, `metrics on ${metrics.address}`)
  return {
    address: `http://${host}:${port}`,
    async stop() {
      stopping.abort()
      metrics?.server.close()
      await app.close()
    },
  }
}
