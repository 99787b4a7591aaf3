/**
 * The background roles (projector, scheduler, dispatcher) on a worker thread of the service
 * process, so that they do not compete with the API for one event loop. They share nothing with
 * the API thread but the process: each thread has its own NATS connection and Postgres pool,
 * and they meet through the log and the read models exactly as separate processes would
 * (checkpoint announcements, wake-ups on NATS subjects). Measured with `npm run bench -- --spawn`
 * (see docs/benchmark.md).
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

/** Restarts of a thread that crashed: after 1 s, doubling up to 30 s while it keeps crashing. */
const restartDelayMs = { first: 1_000, max: 30_000 }
/** A thread that ran this long before it crashed restarts after the first delay again. */
const stableAfterMs = 60_000

/** One worker thread running `roles`, resolved once they run; rejected if they fail to start. */
async function spawnThread(config: Readonly<Config>, roles: BackgroundRole[]): Promise<Worker> {
  const worker = new Worker(new URL('./role-thread.mjs', import.meta.url), { workerData: { config, roles, roleThread: true } })
  try {
    await new Promise<void>((resolve, reject) => {
      worker.on('message', (m: FromThread) => {
        if (m.type === 'ready') resolve()
        if (m.type === 'failed') reject(new Error(`the ${roles.join(', ')} thread failed to start: ${m.message}`))
      })
      worker.once('error', reject)
      worker.once('exit', (code) => reject(new Error(`the ${roles.join(', ')} thread exited with ${code} while starting`)))
    })
  } catch (err) {
    await worker.terminate()
    throw err
  }
  return worker
}

/**
 * Starts `roles` on a worker thread and resolves once they run, to its handle. A thread that
 * crashes or exits on its own later is logged and started again (after 1 s, then longer while it
 * keeps failing, up to 30 s), in the same process: the API goes on answering meanwhile, and the
 * service does not depend on a supervisor to come back. Whatever the thread had in flight is in
 * the log and picked up again by the new one (durable consumers, the projector's checkpoints).
 */
export async function startRoleThread(config: Readonly<Config>, roles: BackgroundRole[], log: Logger): Promise<RoleThread> {
  const what = `the ${roles.join(', ')} thread`
  let stopping = false
  let worker = await spawnThread(config, roles)
  let startedAt = Date.now()
  let delayMs = restartDelayMs.first
  let restartTimer: NodeJS.Timeout | null = null
  const scrapes = new Map<number, (snapshot: MetricsSnapshot) => void>()
  let nextScrape = 0
  let stopped: () => void = () => undefined

  const restart = () => {
    restartTimer = null
    if (stopping) return
    spawnThread(config, roles).then(
      (started) => {
        if (stopping) return void started.terminate()
        log.warn(`${what} runs again`)
        adopt(started)
      },
      (err) => {
        log.error({ err }, `${what} could not start again; retrying in ${delayMs / 1000} s`)
        scheduleRestart()
      },
    )
  }
  const scheduleRestart = () => {
    restartTimer = setTimeout(restart, delayMs)
    delayMs = Math.min(delayMs * 2, restartDelayMs.max)
  }
  let ended = false
  const onEnd = (why: string, fields: Record<string, unknown>) => {
    if (ended) return
    ended = true
    stopped()
    // While stopping, a connection closed under a write that was still queued may throw; the
    // thread is being ended anyway.
    if (stopping) return void (why === 'crashed' && log.warn(fields, `${what} failed while stopping`))
    if (Date.now() - startedAt >= stableAfterMs) delayMs = restartDelayMs.first
    log.error(fields, `${what} ${why}; starting it again in ${delayMs / 1000} s`)
    void worker.terminate()
    scheduleRestart()
  }
  const adopt = (started: Worker) => {
    worker = started
    startedAt = Date.now()
    ended = false
    started.on('error', (err) => onEnd('crashed', { err }))
    started.on('exit', (code) => onEnd('exited', { code }))
    started.on('message', (m: FromThread) => {
      if (m.type === 'stopped') stopped()
      if (m.type !== 'metrics') return
      scrapes.get(m.id)?.(m.snapshot)
      scrapes.delete(m.id)
    })
  }
  adopt(worker)
  return {
    async stop() {
      stopping = true
      if (restartTimer !== null) clearTimeout(restartTimer)
      if (ended) return
      const done = new Promise<void>((resolve) => (stopped = resolve))
      worker.postMessage({ type: 'stop' } satisfies ToThread)
      const timeout = new Promise<void>((resolve) => setTimeout(resolve, stopTimeoutMs).unref())
      await Promise.race([done, timeout])
      await worker.terminate()
    },
    metrics() {
      const id = nextScrape++
      // A thread too busy to answer within a second (or being restarted) leaves the scrape without its numbers, not hung.
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
