import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../services/roles/api/app.ts'
import type { RegisteredRoute } from '../../services/roles/api/route-table.ts'
import type { ApiContext } from '../../services/roles/api/context.ts'
import type { Deps } from '../../services/infrastructure/runtime.ts'
import type { TestLike } from './harness.ts'

/** An API process built by a test rather than by the harness, so the test can look inside it. */
export interface ApiProcess {
  url: string
  app: FastifyInstance
  /** Its own ready index, claim line and pool share. */
  context: ApiContext
  /** Every route it registered, as registered. */
  routes: RegisteredRoute[]
  /** Stops it (at most once; also at teardown). */
  stop(): Promise<void>
}

/** Builds the API on `deps` and listens on a free local port. */
export async function startApiProcess(t: TestLike, deps: Deps): Promise<ApiProcess> {
  const stopping = new AbortController()
  const { app, context, routes } = await buildApp(deps, stopping.signal)
  await app.listen({ host: '127.0.0.1', port: 0 })
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    stopping.abort()
    await app.close()
  }
  t.teardown(stop)
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, app, context, routes, stop }
}
