import type { FastifyPluginAsync } from 'fastify'
import { isMigrated } from '../../../projections/migrate.ts'
import { eventsStreamName } from '../../../streams/names.ts'
import type { ApiContext } from '../app.ts'

async function isTrue(check: () => Promise<unknown>): Promise<boolean> {
  try {
    return Boolean(await check())
  } catch {
    return false
  }
}

/** Public probes: live answers while the process runs; ready only when every dependency answers. */
export function healthRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps } = ctx
  return async (app) => {
    app.get('/live', async () => ({ status: 'ok' }))
    app.get('/ready', async (_request, reply) => {
      const [nats, jetstream, postgres, migrations] = await Promise.all([
        isTrue(async () => !deps.nats.nc.isClosed() && (await deps.nats.nc.rtt()) >= 0),
        isTrue(() => deps.nats.jsm.streams.info(eventsStreamName(deps.config.namespace))),
        isTrue(() => deps.sql`SELECT 1`),
        isTrue(() => isMigrated(deps.sql)),
      ])
      const checks = { nats, jetstream, postgres, migrations }
      const ready = Object.values(checks).every(Boolean) && !ctx.stopping.aborted
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', checks })
    })
  }
}
