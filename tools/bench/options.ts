import { parseArgs } from 'node:util'
import { ConfigError, devSecretFileName, loadConfig, type Config } from '../../services/infrastructure/config.ts'

const usage = `usage: npm run bench -- (--url URL --api-key KEY [--namespace NS] | --spawn)
  [--jobs N] [--producers P] [--workers W] [--capacity C] [--rate JOBS_PER_S] [--timeout-s S]
  [--nats-url URL] [--service-log FILE] [--service-cpu-prof DIR] [--no-metering] [--webhooks]
  [--idle N] [--batch B] [--burndown-jobs N] [--replay-events N] [--retention-jobs N] [--priorities] [--paused-queue]
  [--flow-keys N [--flow-limit L]]
       npm run bench -- --spawn --export-jobs N [--export-read-mbps MB_PER_S]
       npm run bench -- --spawn --metrics-jobs N [--metrics-requests R]
       npm run bench -- --spawn --feed-jobs N
       npm run bench -- --spawn --bulk-retry N
       npm run bench -- --spawn --audit-leaves N
       npm run bench -- --spawn --workflows N
       npm run bench -- --spawn --scale-out [--burndown-jobs N]

A run measures, one after another: an idle phase (--idle N jobs, default 300, paced at 50/s by 2
producers for 4 workers: claim latency on an idle system), the single-request cycle (--jobs,
default 10,000), the batched cycle (--batch B, default 100), the burn-down (--burndown-jobs N,
default 20,000) and, with --spawn, the replay (--replay-events N, default 1,000,000) and retention
of a backlog alone (--retention-jobs N, default 20,000). Each figure is printed on its own line
and the JSON last line carries jobs_per_s, idle_claim_p50_ms, batch_jobs_per_s,
enqueue_jobs_per_s, burndown_jobs_per_s, burndown_batch_ack_jobs_per_s, replay_events_per_s and
retention_jobs_per_s with the rest. 0 turns a phase off (--jobs 0: no cycles, no burn-down and no
replay, retention alone).

--burndown-jobs N measures, each alone: the enqueue of N single creates with 50 in flight; the
burn-down of that backlog by the workers (capacity 50 each), one ack request per job; and the
burn-down of a second backlog of N (created in batches, not timed) with each poll's jobs acked in
one request. Each with the CPU per job of the service, the client, NATS and Postgres.

--scale-out (with --spawn) runs the roles as separate processes instead (two API processes, a
projector, a dispatcher and a scheduler) and measures the burn-down's three steps against the two
API processes in turn, each with the CPU per job of every process, counted until the projector has
caught up (issue 31: what scale-out buys, and the sizing rule).

--replay-events N (with --spawn) measures the projector alone: the run's log is topped up to at
least N messages (jobs created in batches and drained with batch acks), then \`npm run replay\`
rebuilds every read model from sequence 1 in a process of its own while the service idles; its
events/s is replay_events_per_s.

Without --rate producers create as fast as the service answers, so created->claimed includes the
backlog when creation outpaces the workers; --rate paces creation (open loop) to measure claim
latency at a load the service keeps up with.

--batch B runs a second cycle of the same number of jobs after the first, on a queue of its own:
producers create B jobs per POST /jobsvc/v1/jobs/batch and workers (capacity 50 unless --capacity
says otherwise) acknowledge each poll's jobs in one POST /jobsvc/v1/workers/ack/batch. Its rate is
printed on its own line and added to the JSON line as batch_jobs_per_s.

--priorities gives every created job a random priority from -600 to 600 (issue 28), so claims
take due jobs by due time minus priority instead of by due time alone.

--paused-queue pauses one more queue of the run before it starts and sends it a create after every
tenth job of the single-request cycles; the workers poll it beside the run's queue, so every poll
leaves a paused queue out (its jobs are never claimed and not counted).

--flow-keys N puts a per-key concurrency limit (--flow-limit L, default 2, by concurrency_key) on
each cycle's queue before it starts and gives the jobs N concurrency keys in turn (issue 29): every
claim then takes its key's slot on the log and every ack frees it. Compare with a run without it.

--service-cpu-prof writes a V8 CPU profile of the spawned service into DIR when it stops (node
--cpu-prof), to see where the service's share of the CPU per job goes.

--export-jobs seeds N jobs straight into the spawned service's jobs read model, then samples the
service's resident memory every 100 ms while a client reading at --export-read-mbps (default 16)
downloads the whole window as JSONL and then as CSV.

--metrics-jobs seeds N jobs over 30 days straight into the spawned service's jobs read model and
its metrics rollups (written by the projector's own code), then asks each metrics route R times
(default 200), one request at a time, and prints p50, p99 and the worst per route.

--feed-jobs runs N jobs to their end through the job commands, half in the bench's project and half
over ten others, then measures the event feed (GET /jobsvc/v1/events): one NDJSON reader of the
project's whole feed (events/s, three runs), 300 pages of 100 walked by cursor (p50, p99), and a
live SSE tail of job_created while jobs are created at 500/s for 10 s (p50, p99 of the time from
an event's decision to its arrival); see event-feed.ts.

--bulk-retry dead-letters N jobs through the job commands, runs a steady workload (500 jobs/s,
one request each) alone for 10 s, then again while POST /jobsvc/v1/jobs/bulk retries the N jobs:
the operation's jobs/s and the workload's claim latency alone and beside it; see bulk-retry.ts.

--workflows N measures issue 30's workflows instead of the throughput run: N alternated pairs of
1,012 independent jobs and a fan-out/fan-in of the same size (a root, 1,000 children, ten fan-ins
of 100 and a sink, created as graph batches), each from the first create to the last ack by 8
workers; then a child of 100 parents, from its last parent's ack to a waiting poll handing it
out (at least 20 times: p50, p99); see workflows.ts.

--no-audit-log runs the spawned service without the projects' Merkle logs (audit_log_enabled off),
to compare the cycles' rates with and without them.

--audit-leaves seeds a project's Merkle log with N leaves straight into the spawned service's
database (the tiles the projector's code would write for N events), then times POST
/jobsvc/v1/audit/checkpoints (a checkpoint over N leaves) and the inclusion and consistency proofs
at random leaves and sizes (p50, p99 of 300 requests each); see audit-proofs.ts.

--retention-jobs runs N jobs to their end 200 days ago through the job commands (real messages on
the log, projected by the spawned service), then times the scheduler's retention passes until all
N are deleted, after the cycles, with nothing else running; it prints the jobs purged per second
and the machine's CPU per purged job, and the JSON gains retention_jobs_per_s. The spawned
service's own retention runs once a day in this mode.`

/** The service's bound on one batch create. */
const maxBatchJobs = 1000
/** Poll capacity of the batched cycle unless --capacity is given: the largest a poll may ask. */
const batchedCapacity = 50

export interface Options {
  url: string | null
  apiKey: string | null
  spawn: boolean
  namespace: string | null
  natsUrl: string
  databaseUrl: string
  /** False: the spawned service runs with the request limit and allowance off, to measure their cost. */
  metering: boolean
  /** False: the spawned service keeps no Merkle log (`audit_log_enabled` off), to measure its cost. */
  auditLog: boolean
  /** Leaves of a project's Merkle log to seed before timing proofs and checkpoints; null: not this mode. */
  auditLeaves: number | null
  /** Subscribe a local receiver to job.created and report deliveries per second and delivery lag. */
  webhooks: boolean
  /** Each created job gets a random priority from -600 to 600. */
  priorities: boolean
  /** A paused queue beside the run's, polled and sent creates, whose jobs are never claimed. */
  pausedQueue: boolean
  /** Concurrency keys the jobs are given in turn, under a per-key limit on the run's queue; null: no limits. */
  flowKeys: number | null
  /** The per-key limit of --flow-keys. */
  flowLimit: number
  jobs: number
  producers: number
  workers: number
  capacity: number
  timeoutMs: number
  serviceLog: string | null
  serviceCpuProfileDir: string | null
  /** Creates per second across all producers; null: as fast as they can. */
  rate: number | null
  /** Jobs per batch create in a second, batched cycle (acks batched too); null: the single-request cycle only. */
  batch: number | null
  /** Jobs of the idle phase before the cycles (paced at 50/s); null: none (a paced run is its own idle phase). */
  idle: number | null
  /** Poll capacity in the batched cycle: --capacity when given, else the largest a poll may ask. */
  batchCapacity: number
  /** Jobs to run to their end before measuring the event feed instead of the throughput run; null: the throughput run. */
  feedJobs: number | null
  /** Alternated runs of the workflows' measures (workflows.ts) instead of the throughput run; null: the throughput run. */
  workflows: number | null
  /** Dead-lettered jobs to retry in bulk beside a steady workload instead of the throughput run; null: the throughput run. */
  bulkRetry: number | null
  /** Jobs to seed and export instead of the throughput run; null: the throughput run. */
  exportJobs: number | null
  /** How fast the export client reads, in MB/s: slower than the service writes, so back-pressure holds. */
  exportReadMbps: number
  /** Jobs to seed before timing the metrics routes instead of the throughput run; null: the throughput run. */
  metricsJobs: number | null
  metricsRequests: number
  /** Expired jobs to seed and time retention on, after the cycles; null: no retention run. */
  retentionJobs: number | null
  /** The burn-down phase's jobs (burndown.ts); null: no burn-down. */
  burndownJobs: number | null
  /** The roles as separate processes, the burn-down against two API processes (issue 31). */
  scaleOut: boolean
  /** Events the log holds at least before `npm run replay` is timed over it (--spawn only); null: no replay. */
  replayEvents: number | null
  /**
   * `--dev` (which `npm run bench` passes, as `npm start` does): without JOBSVC_SECRET, the
   * spawned service and command line use the development mode's secret file too.
   */
  dev: boolean
}

/** A count where 0 turns its phase off (null). */
function phaseCount(name: string, raw: string | undefined, fallback: number, max: number): number | null {
  if (raw === '0') return null
  return raw === undefined && fallback === 0 ? null : positiveInt(name, raw, fallback, max)
}

function positiveInt(name: string, raw: string | undefined, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  if (raw === undefined) return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > max) throw new ConfigError(`--${name} must be an integer from 1 to ${max}`)
  return n
}

/** The command line's options; a ConfigError (with the usage) when they do not make a run. */
export function parseOptions(argv: string[]): Options {
  try {
    return toOptions(argv)
  } catch (err) {
    if (err instanceof ConfigError) throw err
    throw new ConfigError(`${(err as Error).message}\n${usage}`)
  }
}

function toOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      'api-key': { type: 'string' },
      spawn: { type: 'boolean', default: false },
      dev: { type: 'boolean', default: false },
      namespace: { type: 'string' },
      'nats-url': { type: 'string' },
      jobs: { type: 'string' },
      producers: { type: 'string' },
      workers: { type: 'string' },
      capacity: { type: 'string' },
      'timeout-s': { type: 'string' },
      'service-log': { type: 'string' },
      'service-cpu-prof': { type: 'string' },
      rate: { type: 'string' },
      batch: { type: 'string' },
      idle: { type: 'string' },
      'no-metering': { type: 'boolean', default: false },
      'no-audit-log': { type: 'boolean', default: false },
      'audit-leaves': { type: 'string' },
      webhooks: { type: 'boolean', default: false },
      priorities: { type: 'boolean', default: false },
      'paused-queue': { type: 'boolean', default: false },
      'flow-keys': { type: 'string' },
      'flow-limit': { type: 'string' },
      'export-jobs': { type: 'string' },
      'export-read-mbps': { type: 'string' },
      'metrics-jobs': { type: 'string' },
      'metrics-requests': { type: 'string' },
      'retention-jobs': { type: 'string' },
      'burndown-jobs': { type: 'string' },
      'replay-events': { type: 'string' },
      'feed-jobs': { type: 'string' },
      'bulk-retry': { type: 'string' },
      workflows: { type: 'string' },
      'scale-out': { type: 'boolean', default: false },
    },
  })
  if (values.spawn === (values.url !== undefined)) throw new ConfigError(`give exactly one of --url and --spawn\n${usage}`)
  if (values.url !== undefined && values['api-key'] === undefined) throw new ConfigError(`--url needs --api-key\n${usage}`)
  // The seeding writes to the service's database, which only a spawned service shares with us.
  if (values['export-jobs'] !== undefined && !values.spawn) throw new ConfigError(`--export-jobs needs --spawn\n${usage}`)
  if (values['metrics-jobs'] !== undefined && !values.spawn) throw new ConfigError(`--metrics-jobs needs --spawn\n${usage}`)
  if (values['feed-jobs'] !== undefined && !values.spawn) throw new ConfigError(`--feed-jobs needs --spawn\n${usage}`)
  if (values['bulk-retry'] !== undefined && !values.spawn) throw new ConfigError(`--bulk-retry needs --spawn\n${usage}`)
  if (values['audit-leaves'] !== undefined && !values.spawn) throw new ConfigError(`--audit-leaves needs --spawn\n${usage}`)
  if (values['scale-out'] && !values.spawn) throw new ConfigError(`--scale-out needs --spawn\n${usage}`)
  if (values['replay-events'] !== undefined && values['replay-events'] !== '0' && !values.spawn)
    throw new ConfigError(`--replay-events needs --spawn\n${usage}`)
  if (values['retention-jobs'] !== undefined && values['retention-jobs'] !== '0' && !values.spawn)
    throw new ConfigError(`--retention-jobs needs --spawn\n${usage}`)
  // --jobs 0: no cycles (retention alone).
  const noLoad = values.jobs === '0'
  // The same environment the service reads (CONTRACT.md) supplies the defaults for --spawn.
  const config = loadServiceConfig(process.env, values.dev)
  return {
    url: values.url ?? null,
    apiKey: values['api-key'] ?? null,
    spawn: values.spawn,
    namespace: values.namespace ?? null,
    natsUrl: values['nats-url'] ?? config.natsUrl,
    databaseUrl: config.databaseUrl,
    jobs: noLoad ? 0 : positiveInt('jobs', values.jobs, 10_000),
    producers: positiveInt('producers', values.producers, 16, 1000),
    workers: positiveInt('workers', values.workers, 8, 1000),
    capacity: positiveInt('capacity', values.capacity, 10, 50),
    timeoutMs: positiveInt('timeout-s', values['timeout-s'], 300) * 1000,
    serviceLog: values['service-log'] ?? null,
    serviceCpuProfileDir: values['service-cpu-prof'] ?? null,
    rate: values.rate === undefined ? null : positiveInt('rate', values.rate, 0),
    batch: noLoad ? null : phaseCount('batch', values.batch, 100, maxBatchJobs),
    idle: noLoad || values.rate !== undefined ? null : phaseCount('idle', values.idle, 300, 100_000),
    batchCapacity: positiveInt('capacity', values.capacity, batchedCapacity, 50),
    metering: !values['no-metering'],
    auditLog: !values['no-audit-log'],
    auditLeaves: values['audit-leaves'] === undefined ? null : positiveInt('audit-leaves', values['audit-leaves'], 0, 100_000_000),
    webhooks: values.webhooks,
    priorities: values.priorities,
    pausedQueue: values['paused-queue'],
    flowKeys: values['flow-keys'] === undefined ? null : positiveInt('flow-keys', values['flow-keys'], 0, 1_000_000),
    flowLimit: positiveInt('flow-limit', values['flow-limit'], 2, 1000),
    exportJobs: values['export-jobs'] === undefined ? null : positiveInt('export-jobs', values['export-jobs'], 0, 10_000_000),
    exportReadMbps: positiveInt('export-read-mbps', values['export-read-mbps'], 16, 10_000),
    metricsJobs: values['metrics-jobs'] === undefined ? null : positiveInt('metrics-jobs', values['metrics-jobs'], 0, 10_000_000),
    metricsRequests: positiveInt('metrics-requests', values['metrics-requests'], 200, 100_000),
    feedJobs: values['feed-jobs'] === undefined ? null : positiveInt('feed-jobs', values['feed-jobs'], 0, 10_000_000),
    workflows: values.workflows === undefined ? null : positiveInt('workflows', values.workflows, 0, 100),
    bulkRetry: values['bulk-retry'] === undefined ? null : positiveInt('bulk-retry', values['bulk-retry'], 0, 1_000_000),
    burndownJobs: noLoad ? null : phaseCount('burndown-jobs', values['burndown-jobs'], 20_000, 1_000_000),
    scaleOut: values['scale-out'],
    replayEvents: noLoad ? null : phaseCount('replay-events', values['replay-events'], values.spawn ? 1_000_000 : 0, 100_000_000),
    retentionJobs: phaseCount('retention-jobs', values['retention-jobs'], values.spawn ? 20_000 : 0, 10_000_000),
    dev: values.dev,
  }
}

/** The configuration the service reads from `env`; under --dev, with the development mode's secret file. */
export function loadServiceConfig(env: NodeJS.ProcessEnv, dev: boolean): Readonly<Config> {
  return loadConfig(env, { devSecretFile: dev ? devSecretFileName : null, dev })
}
