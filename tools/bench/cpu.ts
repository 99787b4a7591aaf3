/**
 * Where a benchmark run's CPU went, read from Linux's /proc: the service, this client, the NATS
 * server, Postgres, and the rest of the machine. On a small machine that runs all of them, the
 * end-to-end rate is bounded by the CPU they spend together per job, not by the service alone;
 * this is what lets a reader check that bound instead of taking it on trust.
 */
import { readdirSync, readFileSync } from 'node:fs'

/** Linux reports process times in clock ticks of 1/100 s (USER_HZ) on every common architecture. */
const ticksPerSecond = 100
/** Processes that exit during the run (a Postgres backend) keep the time of their last sample. */
const sampleEveryMs = 500

export const cpuGroups = ['service', 'client', 'nats-server', 'postgres'] as const
export type CpuGroup = (typeof cpuGroups)[number]

export interface CpuBreakdown {
  /** CPU seconds per group over the run. */
  seconds: Record<CpuGroup, number | null> & { rest: number }
  /** Every core's busy time over the run, in CPU seconds. */
  machineSeconds: number
  wallSeconds: number
  cores: number
}

interface ProcessTicks {
  group: CpuGroup
  ticks: number
}

/** CPU seconds a process has spent so far (all its threads), or null once it has gone. */
export function processCpuSeconds(pid: number): number | null {
  const p = readProcess(pid)
  return p === null ? null : p.ticks / ticksPerSecond
}

/** utime + stime of a process (all its threads), or null once it has gone. */
function readProcess(pid: number): { comm: string; ticks: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const close = stat.lastIndexOf(')')
    const fields = stat.slice(close + 2).split(' ')
    return { comm: stat.slice(stat.indexOf('(') + 1, close), ticks: Number(fields[11]) + Number(fields[12]) }
  } catch {
    return null
  }
}

/** Busy and total ticks summed over every CPU, and the number of CPUs. */
function readMachine(): { busy: number; cores: number } {
  const lines = readFileSync('/proc/stat', 'utf8').split('\n')
  // cpu user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
  const all = lines[0]!.trim().split(/\s+/).slice(1).map(Number)
  const total = all.slice(0, 8).reduce((a, b) => a + b, 0)
  return { busy: total - all[3]! - all[4]!, cores: lines.filter((l) => /^cpu\d+ /.test(l)).length }
}

/**
 * Samples the groups' processes every half second from `start()` to `stop()`. The service and
 * this client are known by pid; the NATS server and Postgres by their process names.
 */
export class CpuMeter {
  readonly #servicePid: number | undefined
  readonly #atStart = new Map<number, ProcessTicks>()
  readonly #latest = new Map<number, ProcessTicks>()
  #machineAtStart = 0
  #startedAt = 0
  #timer: NodeJS.Timeout | undefined
  readonly available: boolean

  constructor(servicePid: number | undefined) {
    this.#servicePid = servicePid
    this.available = readProcess(process.pid) !== null
  }

  start(): void {
    if (!this.available) return
    this.#sample(this.#atStart)
    this.#machineAtStart = readMachine().busy
    this.#startedAt = performance.now()
    this.#timer = setInterval(() => this.#sample(this.#latest), sampleEveryMs)
    this.#timer.unref()
  }

  stop(): CpuBreakdown | null {
    if (!this.available || this.#timer === undefined) return null
    clearInterval(this.#timer)
    this.#sample(this.#latest)
    const machine = readMachine()
    const seconds: Record<CpuGroup, number | null> = { service: this.#servicePid === undefined ? null : 0, client: 0, 'nats-server': 0, postgres: 0 }
    for (const [pid, now] of this.#latest) {
      const before = this.#atStart.get(pid)
      // A pid reused by another process in between counts from zero.
      const spent = before !== undefined && before.group === now.group && before.ticks <= now.ticks ? now.ticks - before.ticks : now.ticks
      seconds[now.group] = (seconds[now.group] ?? 0) + spent / ticksPerSecond
    }
    const machineSeconds = (machine.busy - this.#machineAtStart) / ticksPerSecond
    const counted = Object.values(seconds).reduce<number>((a, b) => a + (b ?? 0), 0)
    return {
      seconds: { ...seconds, rest: Math.max(0, machineSeconds - counted) },
      machineSeconds,
      wallSeconds: (performance.now() - this.#startedAt) / 1000,
      cores: machine.cores,
    }
  }

  #sample(into: Map<number, ProcessTicks>): void {
    for (const entry of readdirSync('/proc')) {
      const pid = Number(entry)
      if (!Number.isInteger(pid)) continue
      const p = readProcess(pid)
      if (p === null) continue
      const group = this.#groupOf(pid, p.comm)
      if (group !== null) into.set(pid, { group, ticks: p.ticks })
    }
  }

  #groupOf(pid: number, comm: string): CpuGroup | null {
    if (pid === this.#servicePid) return 'service'
    if (pid === process.pid) return 'client'
    if (comm === 'nats-server') return 'nats-server'
    if (comm === 'postgres') return 'postgres'
    return null
  }
}

/** What `run` resolved with and the CPU every group spent meanwhile (null where /proc is not there). */
export interface Metered<T> {
  result: T
  cpu: CpuBreakdown | null
}

/** Runs `run` with a CpuMeter around it. */
export async function withCpuMeter<T>(servicePid: number | undefined, run: () => Promise<T>): Promise<Metered<T>> {
  const meter = new CpuMeter(servicePid)
  meter.start()
  const result = await run()
  return { result, cpu: meter.stop() }
}

/**
 * Lines for the report: CPU per job by group, and the rate at which the machine's cores would be
 * spent entirely at that cost (the ceiling for this run's mix on this machine).
 */
export function describeCpu(cpu: CpuBreakdown, jobs: number): string[] {
  const perJob = (s: number | null) => (s === null ? 'n/a' : `${((s * 1000) / jobs).toFixed(2)} ms`)
  const parts = [...cpuGroups.map((g) => `${g} ${perJob(cpu.seconds[g])}`), `rest of the machine ${perJob(cpu.seconds.rest)}`]
  const totalMsPerJob = (cpu.machineSeconds * 1000) / jobs
  const ceiling = totalMsPerJob > 0 ? Math.round((cpu.cores * 1000) / totalMsPerJob) : null
  return [
    `  CPU per job: ${parts.join(', ')}; machine total ${perJob(cpu.machineSeconds)}`,
    `  machine: ${cpu.cores} cores ${Math.round((cpu.machineSeconds / (cpu.wallSeconds * cpu.cores)) * 100)}% busy over ${cpu.wallSeconds.toFixed(1)} s; at ${totalMsPerJob.toFixed(2)} ms of CPU per job its cores allow at most ${ceiling ?? 'n/a'} jobs/s`,
  ]
}
