import type { Deps } from '../../infrastructure/runtime.ts'
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
  return {
    address: `http://${host}:${port}`,
    async stop() {
      stopping.abort()
      await app.close()
    },
  }
}
