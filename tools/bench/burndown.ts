/**
 * The burn-down phase (issue 31's figures, the way the peers are measured): how fast the service
 * takes in jobs and how fast workers drain a backlog, each on its own.
 *
 * - enqueue: `jobs` single creates, `enqueueInFlight` at a time, first send to last 201;
 * - burn-down, one ack request per job: the backlog the enqueue left, drained by the workers
 *   (capacity 50 each) acking every job with its own request, first poll to last ack answered;
 * - burn-down, SDK-style: a second backlog of `jobs` (created in batches of 1,000, not timed),
 *   drained the same way except that each poll's jobs are acked in one request.
 *
 * An ack answered is on the log; the read models follow (the cycles measure that lag).
 */
import { randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { withCpuMeter, type CpuBreakdown } from './cpu.ts'
import { HttpError, withRetries, type Client } from './http-client.ts'
import type { ReportSection } from './report.ts'

/** What the phases send their requests through: one client, or several API processes' in turn (scale-out.ts). */
export type Requester = Pick<Client, 'request'>

/** Creates in flight during the enqueue, as the peers were measured. */
export const enqueueInFlight = 50
/** Jobs a worker's poll asks for in a burn-down (the SDK's default capacity). */
export const burndownCapacity = 50

export interface BurndownLoad {
  jobs: number
  workers: number
}

interface Timed {
  jobsPerS: number
  cpu: CpuBreakdown | null
}

/** Creates `jobs` jobs on `queue` with `inFlight` single creates at a time; their rate. */
export async function enqueue(client: Requester, queue: string, jobs: number, signal: AbortSignal): Promise<number> {
  let next = 0
  let last = 0
  const started = performance.now()
  const producer = async () => {
    while (next < jobs && !signal.aborted) {
      const i = next++
      const reply = await withRetries(
        'create',
        signal,
        () => client.request('POST', '/jobsvc/v1/jobs', { job_type: 'burndown', queue, payload: { i } }),
        201,
      )
      last = Math.max(last, reply.at)
    }
  }
  await Promise.all(Array.from({ length: enqueueInFlight }, producer))
  return jobs / ((last - started) / 1000)
}

/** Creates `jobs` jobs on `queue` in batches of 1,000 (not timed): a backlog to drain. */
export async function seedBacklog(client: Requester, queue: string, jobs: number, signal: AbortSignal): Promise<void> {
  for (let made = 0; made < jobs; made += 1000) {
    const items = Array.from({ length: Math.min(1000, jobs - made) }, (_, k) => ({ job_type: 'burndown', queue, payload: { i: made + k } }))
    const reply = await withRetries('batch create', signal, () => client.request('POST', '/jobsvc/v1/jobs/batch', { jobs: items }), 200)
    if (reply.body.created !== items.length) throw new HttpError('batch create (backlog)', reply)
  }
}

/** Workers drain `jobs` jobs from `queue`, acking each with its own request or each poll's in one; their rate. */
export async function drain(client: Requester, queue: string, load: BurndownLoad, batchAcks: boolean, signal: AbortSignal): Promise<number> {
  let acked = 0
  let last = 0
  const started = performance.now()
  const worker = async (w: number) => {
    const body = { worker_id: `burndown-w${w}`, queues: [queue], capacity: burndownCapacity, wait_seconds: 1 }
    while (acked < load.jobs && !signal.aborted) {
      const polled = await withRetries('poll', signal, () => client.request('POST', '/jobsvc/v1/workers/poll', body), 200)
      const ids = (polled.body.jobs as Array<{ id: string }>).map((j) => j.id)
      if (ids.length === 0) continue
      const ack = (id: string) => ({ job_id: id, worker_id: body.worker_id, status: 'succeeded', duration_ms: 0 })
      if (batchAcks) {
        const reply = await withRetries(
          'batch ack',
          signal,
          () => client.request('POST', '/jobsvc/v1/workers/ack/batch', { acks: ids.map(ack) }),
          200,
        )
        const refused = (reply.body.results as Array<{ status: number }>).find((r) => r.status !== 200)
        if (refused !== undefined) throw new HttpError('batch ack item', { ...reply, body: refused })
        acked += ids.length
        last = Math.max(last, reply.at)
      } else {
        await Promise.all(
          ids.map(async (id) => {
            const reply = await withRetries('ack', signal, () => client.request('POST', '/jobsvc/v1/workers/ack', ack(id)), 200)
            acked++
            last = Math.max(last, reply.at)
          }),
        )
      }
    }
  }
  await Promise.all(Array.from({ length: load.workers }, (_, w) => worker(w)))
  return load.jobs / ((last - started) / 1000)
}

async function timed(servicePid: number | undefined, step: () => Promise<number>): Promise<Timed> {
  const { result, cpu } = await withCpuMeter(servicePid, step)
  return { jobsPerS: Math.round(result), cpu }
}

/** CPU per job by process, for the report line. */
function cpuPerJob(cpu: CpuBreakdown | null, jobs: number): string {
  if (cpu === null) return ''
  const per = (s: number | null) => (s === null ? 'n/a' : `${((s * 1000) / jobs).toFixed(2)}`)
  return `; CPU per job (ms): service ${per(cpu.seconds.service)}, client ${per(cpu.seconds.client)}, nats-server ${per(cpu.seconds['nats-server'])}, postgres ${per(cpu.seconds.postgres)}, machine ${per(cpu.machineSeconds)}`
}

/** The three measures, one after another, each on a queue of its own. */
export async function runBurndown(client: Client, load: BurndownLoad, servicePid: number | undefined, signal: AbortSignal): Promise<ReportSection> {
  const run = randomBytes(4).toString('hex')
  const single = `burndown_${run}`
  const batched = `burndown_${run}_batch`
  process.stderr.write(`bench: enqueue of ${load.jobs} jobs, ${enqueueInFlight} creates in flight\n`)
  const enqueued = await timed(servicePid, () => enqueue(client, single, load.jobs, signal))
  process.stderr.write(`bench: burn-down of ${load.jobs} jobs, ${load.workers} workers x capacity ${burndownCapacity}, one ack request per job\n`)
  const drained = await timed(servicePid, () => drain(client, single, load, false, signal))
  await seedBacklog(client, batched, load.jobs, signal)
  process.stderr.write(`bench: burn-down of ${load.jobs} jobs, each poll's jobs acked in one request\n`)
  const drainedBatched = await timed(servicePid, () => drain(client, batched, load, true, signal))
  return {
    lines: [
      '',
      `jobsvc bench, burn-down: ${load.jobs} jobs, ${load.workers} workers x capacity ${burndownCapacity}`,
      `  enqueue, ${enqueueInFlight} single creates in flight: ${enqueued.jobsPerS} jobs/s${cpuPerJob(enqueued.cpu, load.jobs)}`,
      `  burn-down, one ack request per job: ${drained.jobsPerS} jobs/s${cpuPerJob(drained.cpu, load.jobs)}`,
      `  burn-down, each poll's jobs acked in one request: ${drainedBatched.jobsPerS} jobs/s${cpuPerJob(drainedBatched.cpu, load.jobs)}`,
    ],
    summary: {
      enqueue_jobs_per_s: enqueued.jobsPerS,
      burndown_jobs_per_s: drained.jobsPerS,
      burndown_batch_ack_jobs_per_s: drainedBatched.jobsPerS,
    },
  }
}
