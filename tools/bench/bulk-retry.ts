import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import type { Config } from '../../services/infrastructure/config.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { drive, type CycleResults } from './cycle.ts'
import type { Client } from './http-client.ts'
import type { Options } from './options.ts'
import { percentileMs } from './percentiles.ts'
import type { PhaseTrackers } from './projection-trackers.ts'

/**
 * `npm run bench -- --spawn --bulk-retry N`: issue 28's second target, a bulk retry of N
 * dead-lettered jobs at ≥ 2,000 jobs/s while the normal workload continues.
 * - N jobs are dead-lettered through the job commands in this process (created with one attempt,
 *   claimed, acked as failed: the same three appends a worker's failure makes), then the run
 *   waits until the job list holds them all (a dry run counts N);
 * - a steady workload (creates paced at 500/s, workers polling and acking, one request each) runs
 *   alone for a while: its claim latency is the baseline;
 * - the same workload again, with `POST /jobsvc/v1/jobs/bulk {action: retry}` started at once:
 *   the operation's jobs/s (from its own created_at to finished_at) and the workload's claim
 *   latency meanwhile.
 */

const seedConcurrency = 256
const steadyRate = 500
const baselineSeconds = 10
/** The workload runs at least this long beside the bulk retry, and as long as the retry would take at the target. */
const minSteadySeconds = 20
const targetJobsPerSecond = 2_000

export interface BulkRetryResult {
  bulk_jobs: number
  bulk_seed_jobs_per_s: number
  bulk_jobs_per_s: number | null
  bulk_operation: unknown
  bulk_baseline_claim_p50_ms: number | null
  bulk_during_claim_p50_ms: number | null
  bulk_during_claim_p99_ms: number | null
  bulk_steady_complete: boolean
}

export async function benchBulkRetry(options: {
  config: Readonly<Config>
  client: Client
  opts: Options
  projectId: string
  jobs: number
  trackers: PhaseTrackers
  signal: AbortSignal
  log: (line: string) => void
}): Promise<BulkRetryResult> {
  const { config, client, opts, projectId, jobs, trackers, signal, log } = options
  const seedStarted = Date.now()
  await seedDeadLettered(config, projectId, jobs)
  const seedJobsPerSecond = Math.round(jobs / ((Date.now() - seedStarted) / 1000))
  log(`bench: ${jobs} jobs dead-lettered (${seedJobsPerSecond} jobs/s); waiting for the job list to hold them`)
  const filter = { queues: ['bulk-dead'] }
  for (;;) {
    const dry = await client.request('POST', '/jobsvc/v1/jobs/bulk', { action: 'retry', filter, dry_run: true })
    if ((dry.body as { matched: number }).matched >= jobs) break
    await sleep(1_000, undefined, { signal })
  }
  const steady = (seconds: number) =>
    drive(
      client,
      { ...opts, jobs: steadyRate * seconds, rate: steadyRate, producers: 4, workers: 4 },
      { batch: null, capacity: 10 },
      trackers.next(),
      signal,
    )
  log(`bench: steady workload at ${steadyRate}/s alone for ${baselineSeconds} s`)
  const baseline = await steady(baselineSeconds)
  const steadySeconds = Math.max(minSteadySeconds, Math.ceil(jobs / targetJobsPerSecond))
  log(`bench: bulk retry of ${jobs} jobs, the steady workload beside it for ${steadySeconds} s`)
  const started = await client.request('POST', '/jobsvc/v1/jobs/bulk', { action: 'retry', filter })
  const operationId = (started.body as { operation_id: string }).operation_id
  const during = steady(steadySeconds)
  let op: { status: string; created_at: string; finished_at: string | null; processed: number } | null = null
  for (;;) {
    op = (await client.request('GET', `/jobsvc/v1/operations/${operationId}`)).body as typeof op
    if (op!.status !== 'running') break
    log(`bench: bulk retry ${op!.processed}/${jobs}`)
    await sleep(1_000, undefined, { signal })
  }
  const beside: CycleResults = await during
  const elapsedS = op!.finished_at === null ? null : (Date.parse(op!.finished_at) - Date.parse(op!.created_at)) / 1000
  return {
    bulk_jobs: jobs,
    bulk_seed_jobs_per_s: seedJobsPerSecond,
    bulk_jobs_per_s: elapsedS === null ? null : Math.round(op!.processed / elapsedS),
    bulk_operation: op,
    bulk_baseline_claim_p50_ms: percentileMs(baseline.claimLatencies, 50),
    bulk_during_claim_p50_ms: percentileMs(beside.claimLatencies, 50),
    bulk_during_claim_p99_ms: percentileMs(beside.claimLatencies, 99),
    bulk_steady_complete: baseline.complete && beside.complete,
  }
}

/** `count` jobs of the queue `bulk-dead` dead-lettered through the job commands, `seedConcurrency` at a time. */
async function seedDeadLettered(config: Readonly<Config>, projectId: string, count: number): Promise<void> {
  const runtime = await openRuntime(config, pino({ level: 'warn' }), 'jobsvc-bench-bulk', { connections: 4, meteringConnections: 1 })
  try {
    const jobs = new JobService(runtime)
    let next = 0
    const error = { type: 'Error', message: 'seeded failure', stack_trace: '' }
    const lane = async () => {
      while (next < count) {
        const i = next++
        const { job } = await jobs.create(projectId, {
          job_type: 'bulk.seeded',
          payload: { i },
          queue: 'bulk-dead',
          run_at: null,
          max_attempts: 1,
          timeout_seconds: 300,
          tags: null,
          parent_job_id: null,
          idempotency_key: null,
        })
        await jobs.claim(projectId, job.id, 'bench-bulk')
        await jobs.ack(projectId, job.id, { worker_id: 'bench-bulk', status: 'failed', duration_ms: 1, error })
      }
    }
    await Promise.all(Array.from({ length: Math.min(seedConcurrency, count) }, lane))
  } finally {
    await runtime.close()
  }
}
