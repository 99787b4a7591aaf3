import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { isMigrated } from '../../../../projections/migrate.ts'
import { isNatsConnected } from '../../../../streams/connection.ts'
import { eventsStreamName } from '../../../../streams/names.ts'
import type { ApiContext } from '../context.ts'
import { publicErrorResponses } from '../openapi.ts'

/** A probe answers within this even while a dependency hangs: that check is then false. */
const checkTimeoutMs = 2_000

async function isTrue(check: () => Promise<unknown>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), checkTimeoutMs)))
  try {
    return Boolean(await Promise.race([check(), timedOut]))
  } catch {
    return false
  } finally {
    clearTimeout(timer)
  }
}

const readiness = z.strictObject({
  status: z.enum(['ready', 'not_ready']),
  checks: z.strictObject({
    nats: z.boolean(),
    jetstream: z.boolean(),
    postgres: z.boolean(),
    migrations: z.boolean(),
    log_space: z
      .boolean()
      .describe(
        "false when the event stream is full (`events_max_bytes`): every write answers 503 until retention frees space or the limit is raised. It does not make the process not ready: the log is the install's, and reads still work",
      ),
  }),
})

/** Room a message may take beside its payload (its state, event fields and headers), generously. */
const messageOverheadBytes = 64 * 1024

const liveSchema = {
  summary: 'Liveness probe',
  description: 'Answers while the process runs. No credentials.',
  tags: ['Health'],
  response: { 200: z.strictObject({ status: z.literal('ok') }), ...publicErrorResponses() },
}

const readySchema = {
  summary: 'Readiness probe',
  description:
    'Ready when NATS, the JetStream event stream and Postgres answer and the migrations are applied, and the process is not stopping. No credentials.',
  tags: ['Health'],
  response: {
    200: readiness.describe('Ready'),
    503: readiness.describe('Not ready: the checks say which dependency fails'),
    ...publicErrorResponses(),
  },
}

/** Public probes: live answers while the process runs; ready only when every dependency answers. */
export function healthRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.get('/live', { schema: liveSchema }, async () => ({ status: 'ok' as const }))
    app.get('/ready', { schema: readySchema }, async (_request, reply) => {
      const stream = deps.nats.jsm.streams.info(eventsStreamName(deps.config.namespace))
      const [nats, jetstream, postgres, migrations, log_space] = await Promise.all([
        isTrue(async () => isNatsConnected(deps.nats.nc) && (await deps.nats.nc.rtt()) >= 0),
        isTrue(() => stream),
        isTrue(() => deps.sql`SELECT 1`),
        isTrue(() => isMigrated(deps.sql)),
        isTrue(async () => {
          const { config, state } = await stream
          // Full once a create with the largest payload accepted would no longer fit.
          return config.max_bytes <= 0 || config.max_bytes - state.bytes >= deps.config.tunables.max_payload_bytes + messageOverheadBytes
        }),
      ])
      const checks = { nats, jetstream, postgres, migrations, log_space }
      const ready = nats && jetstream && postgres && migrations && !ctx.stopping.aborted
      return reply.code(ready ? 200 : 503).send({ status: ready ? ('ready' as const) : ('not_ready' as const), checks })
    })
  }
}
