import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import { signupPlans } from '../../domain/project/index.ts'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import type { Config } from '../../services/infrastructure/config.ts'
import { CpuMeter, describeCpu, type CpuBreakdown } from './cpu.ts'
import { percentile } from './percentiles.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { openRuntime, type Deps, type Runtime } from '../../services/infrastructure/runtime.ts'
import { Retention, retentionBatchSize } from '../../services/roles/scheduler/retention.ts'

/**
 * `npm run bench -- --spawn --retention-jobs N`: how fast retention deletes a backlog of expired
 * terminal jobs, with the service's other work going on (the usual run, unless `--jobs 0`).
 *
 * The backlog is made the way production makes it, 200 days in the past: every job is created,
 * claimed and acked (or cancelled) through JobService, so its messages are real appends on the
 * log, and the running service's projector turns them into rows and state counts. Retention is
 * then timed with the scheduler's own code (Retention.pass, back to back while passes are full,
 * as the scheduler runs it) from this process, until none of the seeded jobs is left. The
 * spawned service's own retention pass is set a day apart, so that it finds nothing to do at
 * start and does not share the backlog.
 */

const dayMs = 86_400_000
/** A project per plan; enterprise is left out, having business's numbers unless configured. */
const plans = signupPlans
const queuesPerProject = 4
const seedConcurrency = 128

export interface SeededJobs {
  jobs: Array<{ projectId: string; id: string; state: 'succeeded' | 'dead_letter' | 'cancelled' }>
  /** The highest stream sequence the seeding wrote. */
  lastSeq: number
  /** Messages appended (three per job run to its end, two per cancelled job). */
  messages: number
}

/**
 * Runs `count` jobs to their end through JobService with the clock at `endedAt` (a millisecond
 * apart, the last at `endedAt`), spread over `projectIds` and four queues each: 80% succeed,
 * 10% are dead-lettered, 10% cancelled while pending.
 */
export async function seedEndedJobs(deps: Deps, options: { projectIds: readonly string[]; count: number; endedAt: Date }): Promise<SeededJobs> {
  let lastSeq = 0
  let messages = 0
  let next = 0
  const seeded: SeededJobs['jobs'] = []
  const noteSeq = (seq: number) => {
    messages++
    if (seq > lastSeq) lastSeq = seq
  }
  const runOne = async (i: number) => {
    const endedAt = options.endedAt.getTime() - (options.count - 1 - i)
    let now = endedAt - 40
    const jobs = new JobService({ ...deps, now: () => new Date(now) })
    const projectId = options.projectIds[i % options.projectIds.length]!
    const outcome = i % 10 < 8 ? 'succeeded' : i % 10 === 8 ? 'dead_letter' : 'cancelled'
    const created = await jobs.create(projectId, {
      job_type: `retention.${outcome}`,
      payload: {
        order_id: i,
        customer: `cus_${i % 997}`,
        lines: [{ sku: `sku-${i % 97}`, qty: (i % 7) + 1 }],
        note: 'seeded for the retention bench',
      },
      queue: `retention-${i % queuesPerProject}`,
      run_at: null,
      max_attempts: outcome === 'dead_letter' ? 1 : 3,
      timeout_seconds: 300,
      tags: null,
      parent_job_id: null,
      idempotency_key: null,
    })
    noteSeq(created.seq)
    seeded.push({ projectId, id: created.job.id, state: outcome })
    now = endedAt
    if (outcome === 'cancelled') {
      noteSeq((await jobs.cancel(projectId, created.job.id)).seq)
      return
    }
    now = endedAt - 20
    noteSeq((await jobs.claim(projectId, created.job.id, 'bench-retention')).seq)
    now = endedAt
    const failed = outcome === 'dead_letter'
    const error = failed ? { type: 'Error', message: 'seeded failure', stack_trace: '' } : null
    noteSeq(
      (await jobs.ack(projectId, created.job.id, { worker_id: 'bench-retention', status: failed ? 'failed' : 'succeeded', duration_ms: 20, error }))
        .seq,
    )
  }
  await Promise.all(
    Array.from({ length: Math.min(seedConcurrency, options.count) }, async () => {
      while (next < options.count) await runOne(next++)
    }),
  )
  return { jobs: seeded, lastSeq, messages }
}

export interface RetentionRun {
  jobs: number
  messages: number
  purgedBySubject: number
  passes: number
  elapsedMs: number
  jobsPerSecond: number
  /** Wall time of the full passes (a whole batch each): what one pass of the backlog costs. */
  fullPassP50Ms: number | null
  fullPassMaxMs: number | null
  cpu: CpuBreakdown | null
}

export class RetentionBench {
  readonly #runtime: Runtime
  readonly #projectIds: string[]
  readonly seeded: SeededJobs
  readonly #servicePid: number | undefined

  private constructor(runtime: Runtime, projectIds: string[], seeded: SeededJobs, servicePid: number | undefined) {
    this.#runtime = runtime
    this.#projectIds = projectIds
    this.seeded = seeded
    this.#servicePid = servicePid
  }

  /**
   * Creates a project per plan and seeds `count` jobs ended 200 days ago (past every plan's
   * retention), then waits until the service's projector has projected them.
   */
  static async prepare(
    config: Readonly<Config>,
    count: number,
    servicePid: number | undefined,
    signal: AbortSignal,
    log: (line: string) => void,
  ): Promise<RetentionBench> {
    const runtime = await openRuntime(config, pino({ level: 'warn' }), 'jobsvc-bench-retention', { connections: 4, meteringConnections: 1 })
    try {
      const projectIds: string[] = []
      for (const plan of plans) {
        const created = await createProject(runtime, { name: `retention-${plan}`, plan, ownerEmail: null, keyEnvironment: 'test' })
        projectIds.push(created.project.id)
      }
      const started = performance.now()
      const seeded = await seedEndedJobs(runtime, { projectIds, count, endedAt: new Date(Date.now() - 200 * dayMs) })
      log(
        `bench: ${count} jobs run to their end 200 days ago (${seeded.messages} messages appended) in ${((performance.now() - started) / 1000).toFixed(1)} s`,
      )
      const projecting = performance.now()
      while ((await projectedThrough(runtime.sql, projections)) < seeded.lastSeq) await sleep(100, undefined, { signal })
      const n = (
        await runtime.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM jobs WHERE project_id IN ${runtime.sql(projectIds)} AND state IN ('succeeded', 'dead_letter', 'cancelled')`
      )[0]!.n
      if (n !== count) throw new Error(`the service projected ${n} of the ${count} seeded jobs`)
      log(
        `bench: projected by the service in ${((performance.now() - projecting) / 1000).toFixed(1)} s; ${n} expired terminal jobs in ${plans.length} projects (${plans.join(', ')})`,
      )
      return new RetentionBench(runtime, projectIds, seeded, servicePid)
    } catch (err) {
      await runtime.close()
      throw err
    }
  }

  /** Runs retention passes back to back until none of the seeded jobs is left, timed. */
  async run(): Promise<RetentionRun> {
    const retention = new Retention(this.#runtime)
    const meter = new CpuMeter(this.#servicePid)
    const passMs: number[] = []
    let jobs = 0
    let messages = 0
    let purgedBySubject = 0
    meter.start()
    const started = performance.now()
    try {
      for (;;) {
        const passStarted = performance.now()
        const pass = await retention.pass()
        if (pass.full) passMs.push(performance.now() - passStarted)
        jobs += pass.jobs
        messages += pass.messages
        purgedBySubject += pass.purgedBySubject
        if (pass.full) continue
        const left = await this.#left()
        if (left === 0) break
        if (pass.jobs === 0) throw new Error(`retention stopped with ${left} of the seeded jobs left`)
      }
    } finally {
      retention.close()
    }
    const elapsedMs = performance.now() - started
    const cpu = meter.stop()
    return {
      jobs,
      messages,
      purgedBySubject,
      passes: passMs.length,
      elapsedMs,
      jobsPerSecond: Math.round((jobs / elapsedMs) * 1000),
      fullPassP50Ms: passMs.length === 0 ? null : Math.round(percentile(passMs, 50)!),
      fullPassMaxMs: passMs.length === 0 ? null : Math.round(percentile(passMs, 100)!),
      cpu,
    }
  }

  async #left(): Promise<number> {
    const rows = await this.#runtime.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM jobs WHERE project_id IN ${this.#runtime.sql(this.#projectIds)}`
    return rows[0]!.n
  }

  /** The report's lines; `underLoad`: the usual run went on at the same time. */
  describe(run: RetentionRun, underLoad: boolean): string[] {
    return [
      '',
      `jobsvc retention bench: ${this.seeded.jobs.length} expired terminal jobs (${this.seeded.messages} messages on the log) across ${plans.length} plans${underLoad ? ', while the usual run went on' : ', nothing else running'}`,
      `  retention: ${run.jobsPerSecond} jobs/s purged (${run.jobs} jobs, ${run.messages} log messages removed, in ${(run.elapsedMs / 1000).toFixed(2)} s)`,
      `  passes of ${retentionBatchSize} jobs: ${run.passes}, p50 ${run.fullPassP50Ms ?? 'n/a'} ms, max ${run.fullPassMaxMs ?? 'n/a'} ms; subjects purged whole instead of walked: ${run.purgedBySubject}`,
      ...(run.cpu === null || run.jobs === 0 ? [] : describeCpu(run.cpu, run.jobs).map((line) => line.replace('CPU per job', 'CPU per purged job'))),
    ]
  }

  summary(run: RetentionRun): Record<string, number | null> {
    return { retention_jobs: run.jobs, retention_jobs_per_s: run.jobsPerSecond, retention_pass_p50_ms: run.fullPassP50Ms }
  }

  async close(): Promise<void> {
    await this.#runtime.close()
  }
}
