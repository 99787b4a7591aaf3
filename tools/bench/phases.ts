/**
 * The phases a throughput run measures, in the order bench.ts runs them: the idle phase, the
 * single-request cycle and the batched cycle.
 */
import { withCpuMeter, type Metered } from './cpu.ts'
import { drive, type CycleResults } from './cycle.ts'
import type { Client } from './http-client.ts'
import type { Options } from './options.ts'
import type { PhaseTrackers } from './projection-trackers.ts'

export interface PhaseContext {
  client: Client
  opts: Options
  /** The spawned service's process, whose CPU the cycles report; undefined against --url. */
  servicePid: number | undefined
  /** Each phase opens its tracker as its load starts. */
  trackers: PhaseTrackers
  signal: AbortSignal
}

/** The idle phase's pace and workers: a load the service keeps up with at once, so a claim's latency is its own. */
export const idlePhase = { rate: 50, producers: 2, workers: 4 }

/** Claim latency on an idle system: `jobs` jobs at the idle phase's pace, one request per create and per ack. */
export function runIdlePhase({ client, opts, trackers, signal }: PhaseContext, jobs: number): Promise<CycleResults> {
  process.stderr.write(`bench: idle phase, ${jobs} jobs paced at ${idlePhase.rate}/s\n`)
  return drive(client, { ...opts, ...idlePhase, jobs }, { batch: null, capacity: opts.capacity }, trackers.next(), signal)
}

/** The single-request cycle: one request per create and per ack, and the CPU it took. */
export function runSingleCycle({ client, opts, servicePid, trackers, signal }: PhaseContext): Promise<Metered<CycleResults>> {
  return withCpuMeter(servicePid, () => drive(client, opts, { batch: null, capacity: opts.capacity }, trackers.next(), signal))
}

/** The batched cycle: `batch` creates per request and each poll's acks in one request, and the CPU it took. */
export function runBatchedCycle({ client, opts, servicePid, trackers, signal }: PhaseContext, batch: number): Promise<Metered<CycleResults>> {
  process.stderr.write(`bench: batched cycle, ${opts.jobs} jobs in batches of ${batch}\n`)
  return withCpuMeter(servicePid, () => drive(client, opts, { batch, capacity: opts.batchCapacity }, trackers.next(), signal))
}
