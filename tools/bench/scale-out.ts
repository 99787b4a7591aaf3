/**
 * `--scale-out` (issue 31, item 5): what scale-out buys, measured. The roles run as separate
 * processes — two API processes, a projector, a dispatcher and a scheduler — against the one NATS
 * and Postgres, and the burn-down's three measures run against the two API processes in turn
 * (each request to the next). Each measure reports its rate and the CPU per job of every process,
 * counted until the projector has caught up with what the measure appended, so that the
 * projector's share is not carried into the next measure. The README's sizing rule is made from
 * these figures (jobs/s per core of each role).
 */
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { burndownCapacity, drain, enqueue, seedBacklog, type Requester } from './burndown.ts'
import { processCpuSeconds, withCpuMeter } from './cpu.ts'
import { awaitAccess, Client } from './http-client.ts'
import { createBenchProject, spawnService, stopService, type SpawnedService } from './service-process.ts'
import { projections } from '../../projections/index.ts'
import { eventsStreamName } from '../../streams/names.ts'
import type { NatsHandles } from '../../streams/connection.ts'

/** The processes, by name, and the roles each runs. */
const layout: ReadonlyArray<readonly [string, readonly string[]]> = [
  ['api-1', ['api']],
  ['api-2', ['api']],
  ['projector', ['projector']],
  ['dispatcher', ['dispatcher']],
  ['scheduler', ['scheduler']],
]

export interface ScaleOutLoad {
  jobs: number
  workers: number
  env: NodeJS.ProcessEnv
  databaseUrl: string
  namespace: string
  dev: boolean
}

/** Requests to several API processes in turn. */
class InTurn implements Requester {
  #next = 0
  constructor(readonly clients: readonly Client[]) {}
  request(method: string, path: string, body?: unknown) {
    return this.clients[this.#next++ % this.clients.length]!.request(method, path, body)
  }
  close(): void {
    for (const c of this.clients) c.close()
  }
}

interface Measured {
  name: string
  jobsPerS: number
  /** CPU ms per job: each process by name, then nats-server, postgres, the bench client and the machine. */
  cpuMsPerJob: Record<string, number | null>
}

/** Until the projector's every read model has reached the log's last sequence. */
async function projectorCaughtUp(sql: postgres.Sql, nats: NatsHandles, namespace: string, signal: AbortSignal): Promise<void> {
  const last = (await nats.jsm.streams.info(eventsStreamName(namespace))).state.last_seq
  while (!signal.aborted) {
    const names = projections.map((p) => p.name)
    const [row] = await sql<
      { through: string | null }[]
    >`SELECT min(last_seq)::text AS through FROM projection_checkpoints WHERE name = ANY(${names})`
    if (Number(row?.through ?? 0) >= last) return
    await new Promise((r) => setTimeout(r, 100))
  }
}

export async function benchScaleOut(
  load: ScaleOutLoad,
  nats: NatsHandles,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<{ lines: string[]; summary: Record<string, unknown> }> {
  const processes: Array<[string, SpawnedService]> = []
  const sql = postgres(load.databaseUrl, { max: 1, onnotice: () => undefined })
  let requester: InTurn | null = null
  try {
    for (const [name, roles] of layout) {
      log(`bench: scale-out: starting ${name} (${roles.join(', ')})`)
      processes.push([name, await spawnService(load.env, null, null, load.dev, signal, roles)])
    }
    const project = await createBenchProject(load.env, load.dev)
    const apis = processes
      .filter(([, p]) => p.url !== '')
      .map(([, p]) => new Client(p.url, project.api_key, 50 + load.workers * burndownCapacity + 4))
    requester = new InTurn(apis)
    for (const c of apis) await awaitAccess(c, signal)
    const measure = async (name: string, step: () => Promise<number>): Promise<Measured> => {
      const before = processes.map(([, p]) => processCpuSeconds(p.child.pid!) ?? 0)
      const { result: jobsPerS, cpu } = await withCpuMeter(undefined, async () => {
        const rate = await step()
        await projectorCaughtUp(sql, nats, load.namespace, signal)
        return rate
      })
      const perJob = (seconds: number | null) => (seconds === null ? null : Math.round((seconds * 1_000_000) / load.jobs) / 1000)
      const cpuMsPerJob: Record<string, number | null> = {}
      processes.forEach(([n, p], i) => (cpuMsPerJob[n] = perJob((processCpuSeconds(p.child.pid!) ?? before[i]!) - before[i]!)))
      cpuMsPerJob['nats-server'] = perJob(cpu?.seconds['nats-server'] ?? null)
      cpuMsPerJob.postgres = perJob(cpu?.seconds.postgres ?? null)
      cpuMsPerJob.client = perJob(cpu?.seconds.client ?? null)
      cpuMsPerJob.machine = perJob(cpu?.machineSeconds ?? null)
      return { name, jobsPerS: Math.round(jobsPerS), cpuMsPerJob }
    }
    const run = randomBytes(4).toString('hex')
    const queue = `scaleout_${run}`
    const drainLoad = { jobs: load.jobs, workers: load.workers }
    log(`bench: scale-out: enqueue of ${load.jobs} jobs, 50 single creates in flight, to both API processes in turn`)
    const enqueued = await measure('enqueue, 50 single creates in flight', () => enqueue(requester!, queue, load.jobs, signal))
    log(`bench: scale-out: burn-down, one ack request per job`)
    const drained = await measure('burn-down, one ack request per job', () => drain(requester!, queue, drainLoad, false, signal))
    await seedBacklog(requester, `${queue}_batch`, load.jobs, signal)
    await projectorCaughtUp(sql, nats, load.namespace, signal)
    log(`bench: scale-out: burn-down, each poll's jobs acked in one request`)
    const batched = await measure("burn-down, each poll's acks in one request", () => drain(requester!, `${queue}_batch`, drainLoad, true, signal))
    const all = [enqueued, drained, batched]
    const describe = (m: Measured) =>
      `  ${m.name}: ${m.jobsPerS} jobs/s; CPU per job (ms): ${Object.entries(m.cpuMsPerJob)
        .map(([n, v]) => `${n} ${v === null ? 'n/a' : v.toFixed(3)}`)
        .join(', ')}`
    return {
      lines: [
        '',
        `jobsvc bench, scale-out: ${layout.map(([n]) => n).join(', ')} as separate processes; ${load.jobs} jobs, ${load.workers} workers x capacity ${burndownCapacity}, requests to the API processes in turn`,
        ...all.map(describe),
      ],
      summary: {
        scale_out: layout.map(([n]) => n),
        enqueue_jobs_per_s: enqueued.jobsPerS,
        burndown_jobs_per_s: drained.jobsPerS,
        burndown_batch_ack_jobs_per_s: batched.jobsPerS,
        cpu_ms_per_job: Object.fromEntries(all.map((m) => [m.name, m.cpuMsPerJob])),
      },
    }
  } finally {
    requester?.close()
    await sql.end()
    for (const [, p] of processes.reverse()) await stopService(p.child)
  }
}
