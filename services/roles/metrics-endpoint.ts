import type { Server } from 'node:http'
import { isNatsConnected } from '../../streams/connection.ts'
import {
  alertDispatcherConsumerName,
  deliveriesStreamName,
  dispatcherConsumerName,
  eventsStreamName,
  mailerConsumerName,
  mailStreamName,
  projectorConsumerName,
} from '../../streams/names.ts'
import { connectionUp, consumerPending, limitGauges, startMetricsServer, workQueueMessages, type MetricsSnapshot } from '../infrastructure/metrics.ts'
import { flowGates } from '../../projections/flow-gates.ts'
import type { Deps } from '../infrastructure/runtime.ts'

/**
 * How long consumer backlogs and work-queue depths read from NATS are reused: each reading is a
 * JetStream API request per consumer and stream, the same for every process of the install, so
 * scrapers that come often (or many processes scraped at once) do not turn into a load on NATS.
 */
export const natsReadingsTtlMs = 5_000

/**
 * GET /metrics of one process, whatever its roles: what each role counts lands in the process's
 * registry, and the role thread's (when the API shares the process with the background roles)
 * is asked for at each scrape and added in. Connection state is read at the scrape itself; the
 * NATS readings at most every `natsReadingsTtlMs`.
 */
export function serveMetrics(
  deps: Deps,
  port: number,
  otherThreads: () => Promise<MetricsSnapshot[]>,
  options: { natsReadingsTtlMs?: number } = {},
): Promise<{ address: string; server: Server }> {
  const ttlMs = options.natsReadingsTtlMs ?? natsReadingsTtlMs
  let readAt = -Infinity
  return startMetricsServer(
    deps.config.host,
    port,
    async () => {
      connectionUp.set({ dependency: 'nats' }, isNatsConnected(deps.nats.nc) ? 1 : 0)
      if (performance.now() - readAt >= ttlMs) {
        readAt = performance.now()
        await readQueues(deps)
      }
      connectionUp.set(
        { dependency: 'postgres' },
        await deps.sql`SELECT 1`.then(
          () => 1,
          () => 0,
        ),
      )
    },
    otherThreads,
    deps.config.metricsToken,
  )
}

/** The service's durable consumers, by the label /metrics gives them. */
const consumersOf = (ns: string): Array<[label: string, stream: string, durable: string]> => [
  ['projector', eventsStreamName(ns), projectorConsumerName(ns)],
  ['dispatcher', eventsStreamName(ns), dispatcherConsumerName(ns)],
  ['alert_dispatcher', eventsStreamName(ns), alertDispatcherConsumerName(ns)],
  ['mailer', mailStreamName(ns), mailerConsumerName(ns)],
]

/**
 * Consumer backlogs and work-queue depths from NATS. One that does not exist yet (its role has
 * never started) or cannot be read (NATS is down) is left out of the answer rather than shown as 0.
 */
async function readQueues(deps: Deps): Promise<void> {
  const ns = deps.config.namespace
  consumerPending.reset()
  workQueueMessages.reset()
  await Promise.all([
    ...consumersOf(ns).map(async ([label, stream, durable]) => {
      const info = await deps.nats.jsm.consumers.info(stream, durable).catch(() => null)
      if (info !== null) consumerPending.set({ consumer: label }, info.num_pending + info.num_ack_pending)
    }),
    ...(
      [
        ['mail', mailStreamName(ns)],
        ['deliveries', deliveriesStreamName(ns)],
      ] as const
    ).map(async ([label, stream]) => {
      const info = await deps.nats.jsm.streams.info(stream).catch(() => null)
      if (info !== null) workQueueMessages.set({ queue: label }, info.state.messages)
    }),
    readLimits(deps),
  ])
}

/** The flow limits' gauges (issue 29), from the gates' and the jobs' read models; left as they were when Postgres cannot answer. */
async function readLimits(deps: Deps): Promise<void> {
  const reading = await flowGates.totals(deps.sql, deps.now()).catch(() => null)
  if (reading === null) return
  limitGauges.running.set(reading.running)
  limitGauges.waiting.set(reading.waiting)
  limitGauges.held.set(reading.held)
}
