import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { openSql } from '../../../../projections/database.ts'
import { isMigrated } from '../../../../projections/migrate.ts'
import { isNatsConnected } from '../../../../streams/connection.ts'
import { eventsStreamName } from '../../../../streams/names.ts'
import type { ApiContext } from '../context.ts'
import { instant, publicErrorResponses } from '../openapi.ts'
import type { Sql } from '../../../../projections/database.ts'
import { summarizeFailures, type FailureSummary } from '../../../../projections/projection-failures.ts'

/**
 * Each check of a readiness probe gets this long; one that has not answered by then is false.
 * The probe itself answers within 1 s (a Kubernetes probe's default timeout) while a dependency
 * is away or hangs, naming it, rather than timing out.
 */
const checkTimeoutMs = 700

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

/**
 * Messages a read model could not hold and that are still unresolved (projection-failures.ts): a
 * detail for operators, not a check, since one bad message does not make the process unfit to
 * serve. Counts and sequences only: the probe is public, and subjects name projects and jobs
 * (`npm run replay -- --failures` lists them). Null when Postgres did not answer in time.
 */
const projectionFailureDetail = z
  .strictObject({
    messages: z.number().int(),
    subjects: z.number().int(),
    latest: z.array(
      z.strictObject({ seq: z.number().int(), projection: z.string(), projected: z.enum(['sanitised', 'skipped']), failed_at: instant }),
    ),
  })
  .nullable()

/** The summary, or null when Postgres fails or does not answer within the probe's bound. */
async function failureSummaryWithin(sql: Sql): Promise<FailureSummary | null> {
  let summary: FailureSummary | null = null
  const answered = await isTrue(async () => (summary = await summarizeFailures(sql)))
  return answered ? summary : null
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
  projection_failures: projectionFailureDetail,
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
    'Ready when NATS, the JetStream event stream and Postgres answer and the migrations are applied, and the process is not stopping. No credentials. `projection_failures` counts the messages a read model could not hold that are not yet re-projected (README, "Running in production"); it does not affect readiness.',
  tags: ['Health'],
  response: {
    200: readiness.describe('Ready'),
    503: readiness.describe('Not ready: the checks say which dependency fails'),
    ...publicErrorResponses(),
  },
}

type Checks = z.infer<typeof readiness>['checks']

/**
 * Public probes: live answers while the process runs; ready only when every dependency answers.
 * Postgres is asked on a connection of the probe's own, so that a pool busy with requests does
 * not make a healthy process look unready; probes that arrive together share one evaluation, so
 * that an outage does not pile up probe queries. While NATS is disconnected its checks are false
 * at once: a request would wait in nats.js's buffer for the reconnect.
 *
 * @noProjectRole probes under `/jobsvc/health`, unauthenticated
 */
export function healthRoutes(ctx: Pick<ApiContext, 'deps' | 'stopping'>): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    const probe = openSql(deps.config.databaseUrl, { max: 1, applicationName: `${deps.name}-probe`, reconnectAtOnce: true })
    app.addHook('onClose', async () => void (await probe.end({ timeout: 1 })))
    let evaluating: Promise<{ checks: Checks; failures: FailureSummary | null }> | null = null
    const evaluate = async (): Promise<{ checks: Checks; failures: FailureSummary | null }> => {
      const natsUp = isNatsConnected(deps.nats.nc)
      const failures = failureSummaryWithin(deps.sql)
      const stream = natsUp ? deps.nats.jsm.streams.info(eventsStreamName(deps.config.namespace)) : null
      const [nats, jetstream, postgres, migrations, log_space] = await Promise.all([
        natsUp && isTrue(async () => (await deps.nats.nc.rtt()) >= 0),
        stream !== null && isTrue(() => stream),
        isTrue(() => probe`SELECT 1`),
        isTrue(() => isMigrated(probe)),
        stream !== null &&
          isTrue(async () => {
            const { config, state } = await stream
            // Full once a create with the largest payload accepted would no longer fit.
            return config.max_bytes <= 0 || config.max_bytes - state.bytes >= deps.config.tunables.max_payload_bytes + messageOverheadBytes
          }),
      ])
      return { checks: { nats, jetstream, postgres, migrations, log_space }, failures: await failures }
    }
    app.get('/live', { schema: liveSchema }, async () => ({ status: 'ok' as const }))
    app.get('/ready', { schema: readySchema }, async (_request, reply) => {
      evaluating ??= evaluate().finally(() => (evaluating = null))
      const { checks, failures } = await evaluating
      // A full log does not make the process unready (log_space): reads still work.
      const ready = checks.nats && checks.jetstream && checks.postgres && checks.migrations && !ctx.stopping.aborted
      const status = ready ? ('ready' as const) : ('not_ready' as const)
      return reply.code(ready ? 200 : 503).send({ status, checks, projection_failures: failures })
    })
  }
}
