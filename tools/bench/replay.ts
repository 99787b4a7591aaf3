/**
 * The projector alone (issue 31): `npm run replay` over a log of at least `events` events, the
 * read models rebuilt from sequence 1 by the projector's own code, in a process of its own while
 * the service idles. The log is the run's: what the earlier phases appended, topped up with
 * jobs created in batches and drained with batch acks (created, claimed, succeeded: three
 * messages a job), so the replay projects the events a working service writes, not a synthetic mix.
 */
import { spawn } from 'node:child_process'
import { eventsStreamName } from '../../streams/names.ts'
import type { NatsHandles } from '../../streams/connection.ts'
import { withCpuMeter, type CpuBreakdown } from './cpu.ts'
import { burndownCapacity, drain, seedBacklog } from './burndown.ts'
import { Client } from './http-client.ts'
import type { ReportSection } from './report.ts'
import { createBenchProject, repoRoot } from './service-process.ts'

/** Jobs created and drained per top-up round. */
const roundJobs = 20_000
/**
 * Rounds one project appends before the top-up moves to a new one: a round is about 80 MB of log,
 * and a project on the business plan may append 1 GiB an hour (domain/plans.ts).
 */
const roundsPerProject = 8

export interface ReplayLoad {
  events: number
  workers: number
  namespace: string
  env: NodeJS.ProcessEnv
  dev: boolean
  /** The service's URL, for the projects the top-up makes. */
  url: string
}

interface Rebuilt {
  through: number
  messages: number
  events: number
  ms: number
  events_per_s: number
}

/**
 * Appends jobs' lives until the run's log holds at least `events` messages (each a job's event or
 * more), in projects of its own (a project's hourly log budget holds about `roundsPerProject` rounds).
 */
async function topUp(nats: NatsHandles, load: ReplayLoad, signal: AbortSignal, log: (line: string) => void): Promise<number> {
  const messages = async () => (await nats.jsm.streams.info(eventsStreamName(load.namespace))).state.messages
  let client: Client | null = null
  try {
    for (let round = 0, held = await messages(); held < load.events && !signal.aborted; round++, held = await messages()) {
      if (round % roundsPerProject === 0) {
        client?.close()
        const project = await createBenchProject(load.env, load.dev)
        client = new Client(load.url, project.api_key, load.workers * burndownCapacity + 4)
      }
      const jobs = Math.min(roundJobs, Math.ceil((load.events - held) / 3))
      log(`bench: replay: the log holds ${held} messages; appending ${jobs} more jobs' lives`)
      const queue = `replay_${round}`
      await seedBacklog(client!, queue, jobs, signal)
      await drain(client!, queue, { jobs, workers: load.workers }, true, signal)
    }
  } finally {
    client?.close()
  }
  return messages()
}

/** Runs `npm run replay`'s code in a process of its own; resolves to its closing figures. */
function runReplayProcess(load: ReplayLoad, signal: AbortSignal): Promise<Rebuilt> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/roles/replay.ts', ...(load.dev ? ['--dev'] : [])], {
    cwd: repoRoot,
    env: load.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    signal,
  })
  let out = ''
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()))
  return new Promise<Rebuilt>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => {
      const line = out.split('\n').find((l) => l.includes('"events_per_s"'))
      if (code !== 0 || line === undefined) reject(new Error(`replay exited with ${code}:\n${out.slice(-4000)}`))
      else resolve(JSON.parse(line) as Rebuilt)
    })
  })
}

function cpuPerEvent(cpu: CpuBreakdown | null, events: number): string {
  if (cpu === null) return ''
  const per = (s: number | null) => (s === null ? 'n/a' : `${((s * 1_000_000) / events).toFixed(1)}`)
  return `; CPU per event (µs): nats-server ${per(cpu.seconds['nats-server'])}, postgres ${per(cpu.seconds.postgres)}, machine ${per(cpu.machineSeconds)}`
}

export async function runReplay(nats: NatsHandles, load: ReplayLoad, signal: AbortSignal, log: (line: string) => void): Promise<ReportSection> {
  const held = await topUp(nats, load, signal, log)
  log(`bench: replay of the log (${held} messages): every read model rebuilt from sequence 1, the service idle`)
  const { result: rebuilt, cpu } = await withCpuMeter(undefined, () => runReplayProcess(load, signal))
  return {
    lines: [
      '',
      `jobsvc bench, replay (npm run replay, the projector alone): ${rebuilt.events} events in ${rebuilt.messages} messages rebuilt in ${(rebuilt.ms / 1000).toFixed(1)} s`,
      `  ${rebuilt.events_per_s} events/s, ${Math.round(rebuilt.messages / (rebuilt.ms / 1000))} messages/s${cpuPerEvent(cpu, rebuilt.events)}`,
    ],
    summary: { replay_events_per_s: rebuilt.events_per_s },
  }
}
