/**
 * The background roles (projector, scheduler, dispatcher) on a worker thread of the service
 * process, so that they do not compete with the API for one event loop. They share nothing with
 * the API thread but the process: each thread has its own NATS connection and Postgres pool,
 * and they meet through the log and the read models exactly as separate processes would
 * (checkpoint announcements, wake-ups on NATS subjects). Measured with `npm run bench -- --spawn`
 * (see README, Benchmark).
 *
 * This module runs inside the thread; `startRoleThread` (below) runs in the main thread.
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import type { Logger } from 'pino'
import type { Config } from '../infrastructure/config.ts'
import * as dispatcher from './dispatcher/index.ts'
import * as projector from './projector/index.ts'
import { metricsRegistry, type MetricsSnapshot } from '../infrastructure/metrics.ts'
import { createLogger, openRuntime } from '../infrastructure/runtime.ts'
import * as scheduler from './scheduler/index.ts'

export const backgroundRoles = ['projector', 'scheduler', 'dispatcher'] as const
export type BackgroundRole = (typeof backgroundRoles)[number]

interface ThreadData {
  /** The main thread's configuration as loaded, so both threads hold the same (possibly generated) secret. */
  config: Config
  roles: BackgroundRole[]
}

type FromThread =
  { type: 'ready' } | { type: 'failed'; message: string } | { type: 'stopped' } | { type: 'metrics'; id: number; snapshot: MetricsSnapshot }
type ToThread = { type: 'stop' } | { type: 'metrics'; id: number }

export interface RoleThread {
  stop(): Promise<void>
  /** The thread's metrics (its roles' counters and histograms), for the process's /metrics. */
  metrics(): Promise<MetricsSnapshot>
}

/** The roles' pools: they need far fewer connections than the API's request handlers. */
const threadPools = { connections: 8, meteringConnections: 2 }
const stopTimeoutMs = 20_000

const starters: Record<BackgroundRole, typeof projector.start> = {
  projector: projector.start,
  scheduler: scheduler.start,
  dispatcher: dispatcher.start,
}

async function runInThread(port: NonNullable<typeof parentPort>, data: ThreadData): Promise<void> {
  const config = Object.freeze(data.config)
  const log = createLogger(config).child({ thread: data.roles.join('+') })
  const send = (m: FromThread) => port.postMessage(m)
  try {
    const runtime = await openRuntime(config, log, `jobsvc-${data.roles.join('+')}`, threadPools)
    const stops: Array<() => Promise<void>> = []
    for (const role of data.roles) stops.push(await starters[role](runtime))
    port.on('message', (m: ToThread) => {
      if (m.type === 'metrics') {
        void metricsRegistry.getMetricsAsJSON().then((snapshot) => send({ type: 'metrics', id: m.id, snapshot }))
        return
      }
      void (async () => {
        for (const stop of stops.reverse()) await stop().catch((err) => log.error({ err }, 'stop failed'))
        await runtime.close()
        send({ type: 'stopped' })
        port.close()
      })()
    })
    send({ type: 'ready' })
  } catch (err) {
    send({ type: 'failed', message: String((err as Error)?.stack ?? err) })
  }
}

if (!isMainThread && parentPort !== null && (workerData as { roleThread?: boolean } | null)?.roleThread === true) {
  void runInThread(parentPort, workerData as ThreadData & { roleThread: true })
}

/**
 * Starts `roles` on a worker thread and resolves once they run, to its handle.
 * A thread that fails or exits on its own takes the process down (`onFatal`): a supervisor then
 * restarts the whole service, as it would after any crash.
 */
export async function startRoleThread(
  config: Readonly<Config>,
  roles: BackgroundRole[],
  log: Logger,
  onFatal: (why: string) => void,
): Promise<RoleThread> {
  const worker = new Worker(new URL('./role-thread.mjs', import.meta.url), { workerData: { config, roles, roleThread: true } })
  let stopping = false
  const stopped = new Promise<void>((resolve) => {
    worker.on('message', (m: FromThread) => {
      if (m.type === 'stopped') resolve()
    })
    worker.once('exit', () => resolve())
  })
  await new Promise<void>((resolve, reject) => {
    const onMessage = (m: FromThread) => {
      if (m.type === 'ready') resolve()
      if (m.type === 'failed') reject(new Error(`the ${roles.join(', ')} thread failed to start: ${m.message}`))
    }
    worker.on('message', onMessage)
    worker.once('error', reject)
    worker.once('exit', (code) => reject(new Error(`the ${roles.join(', ')} thread exited with ${code} while starting`)))
  })
  worker.on('error', (err) => {
    // While stopping, a connection closed under a write that was still queued may throw; the
    // thread is being ended anyway.
    if (stopping) return log.warn({ err }, `the ${roles.join(', ')} thread failed while stopping`)
    log.fatal({ err }, `the ${roles.join(', ')} thread crashed`)
    onFatal('role thread crashed')
  })
  worker.on('exit', (code) => {
    if (stopping) return
    log.fatal({ code }, `the ${roles.join(', ')} thread exited`)
    onFatal('role thread exited')
  })
  const scrapes = new Map<number, (snapshot: MetricsSnapshot) => void>()
  let nextScrape = 0
  worker.on('message', (m: FromThread) => {
    if (m.type !== 'metrics') return
    scrapes.get(m.id)?.(m.snapshot)
    scrapes.delete(m.id)
  })
  return {
    async stop() {
      stopping = true
      worker.postMessage({ type: 'stop' } satisfies ToThread)
      const timeout = new Promise<void>((resolve) => setTimeout(resolve, stopTimeoutMs).unref())
      await Promise.race([stopped, timeout])
      await worker.terminate()
    },
    metrics() {
      const id = nextScrape++
      // A thread too busy to answer within a second leaves the scrape without its numbers, not hung.
      return new Promise<MetricsSnapshot>((resolve) => {
        const timer = setTimeout(() => {
          scrapes.delete(id)
          resolve([])
        }, 1_000)
        scrapes.set(id, (snapshot) => {
          clearTimeout(timer)
          resolve(snapshot)
        })
        worker.postMessage({ type: 'metrics', id } satisfies ToThread)
      })
    },
  }
}
