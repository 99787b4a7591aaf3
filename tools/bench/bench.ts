import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { tmpdir } from 'node:os'
import { createWriteStream, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { dropDatabase, openSql } from '../../projections/database.ts'
import { connectNats, type NatsHandles } from '../../streams/connection.ts'
import { deleteNamespace } from '../../streams/definitions.ts'
import { checkpointSubject } from '../../streams/names.ts'
import { ConfigError, devSecretFileName, loadConfig } from '../../services/infrastructure/config.ts'
import { benchMetrics } from './metrics-routes.ts'
import { RetentionBench } from './retention.ts'
import { CpuMeter, describeCpu, type CpuBreakdown } from './cpu.ts'

/**
 * `npm run bench`: drives a service over HTTP as its clients would. Producers create jobs;
 * workers poll with a capacity, then ack every claimed job as succeeded, acks in parallel.
 *
 * - jobs/s end to end: jobs / (first create sent -> the last ack answered AND the read models
 *   holding it). "Projected" is judged by sequence: every write answers with X-Event-Seq, and the
 *   run ends when the projector is seen past the highest sequence any response carried.
 * - create latency: each POST /jobs, request sent to 201 received.
 * - created -> claimed: a job's 201 to the poll answer that returned it, keyed by job id.
 * - projection lag: see ProjectionTracker.
 *
 * Progress goes to stderr once a second; a summary and, as the last line of stdout, one JSON
 * object with the headline numbers.
 *
 * `--export-jobs N` measures something else: the spawned service's resident memory while it
 * streams a jobs export of N rows (see benchExport). So does `--metrics-jobs N`: the metrics
 * routes' latency with N jobs in the read model (tools/bench/metrics-routes.ts). `--retention-jobs N`
 * adds a backlog of N expired jobs and times retention purging it (tools/bench/retention.ts).
 */
const usage = `usage: npm run bench -- (--url URL --api-key KEY [--namespace NS] | --spawn)
  [--jobs N] [--producers P] [--workers W] [--capacity C] [--rate JOBS_PER_S] [--timeout-s S]
  [--nats-url URL] [--service-log FILE] [--service-cpu-prof DIR] [--no-metering] [--webhooks]
  [--idle N] [--batch B] [--retention-jobs N]
       npm run bench -- --spawn --export-jobs N [--export-read-mbps MB_PER_S]
       npm run bench -- --spawn --metrics-jobs N [--metrics-requests R]

A run measures, one after another: an idle phase (--idle N jobs, default 300, paced at 50/s by 2
producers for 4 workers: claim latency on an idle system), the single-request cycle (--jobs,
default 10,000), the batched cycle (--batch B, default 100) and, with --spawn, retention of a
backlog alone (--retention-jobs N, default 20,000). Each figure is printed on its own line and
the JSON last line carries jobs_per_s, idle_claim_p50_ms, batch_jobs_per_s and
retention_jobs_per_s with the rest. 0 turns a phase off (--jobs 0: no cycles, retention alone).

Without --rate producers create as fast as the service answers, so created->claimed includes the
backlog when creation outpaces the workers; --rate paces creation (open loop) to measure claim
latency at a load the service keeps up with.

--batch B runs a second cycle of the same number of jobs after the first, on a queue of its own:
producers create B jobs per POST /jobsvc/v1/jobs/batch and workers (capacity 50 unless --capacity
says otherwise) acknowledge each poll's jobs in one POST /jobsvc/v1/workers/ack/batch. Its rate is
printed on its own line and added to the JSON line as batch_jobs_per_s.

--service-cpu-prof writes a V8 CPU profile of the spawned service into DIR when it stops (node
--cpu-prof), to see where the service's share of the CPU per job goes.

--export-jobs seeds N jobs straight into the spawned service's jobs read model, then samples the
service's resident memory every 100 ms while a client reading at --export-read-mbps (default 16)
downloads the whole window as JSONL and then as CSV.

--metrics-jobs seeds N jobs over 30 days straight into the spawned service's jobs read model and
its metrics rollups (written by the projector's own code), then asks each metrics route R times
(default 200), one request at a time, and prints p50, p99 and the worst per route.

--retention-jobs runs N jobs to their end 200 days ago through the job commands (real messages on
the log, projected by the spawned service), then times the scheduler's retention passes until all
N are deleted, after the cycles, with nothing else running; it prints the jobs purged per second
and the machine's CPU per purged job, and the JSON gains retention_jobs_per_s. The spawned
service's own retention runs once a day in this mode.`

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

/**
 * The list route waits at most this long for the projector (the read_your_writes_wait_ms
 * default); a probe that answers well inside it has seen the projector reach its min_seq.
 */
const serviceListWaitMs = 2_000
const probeReachedWithinMs = serviceListWaitMs * 0.75
const probeIntervalMs = 50
/** Workers hold each poll this long when nothing is claimable, so they notice the end quickly. */
const pollWaitSeconds = 1
const maxRetries = 5
/** Longer than any poll holds (wait_seconds) or a list waits for the projector. */
const requestTimeoutMs = 30_000
/** The service's bound on one batch create. */
const maxBatchJobs = 1000
/** The idle phase's pace and workers: a load the service keeps up with at once, so a claim's latency is its own. */
const idlePhase = { rate: 50, producers: 2, workers: 4 }
/** Poll capacity of the batched cycle unless --capacity is given: the largest a poll may ask. */
const batchedCapacity = 50

interface Options {
  url: string | null
  apiKey: string | null
  spawn: boolean
  namespace: string | null
  natsUrl: string
  databaseUrl: string
  /** False: the spawned service runs with the request limit and allowance off, to measure their cost. */
  metering: boolean
  /** Subscribe a local receiver to job.created and report deliveries per second and delivery lag. */
  webhooks: boolean
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
  /** Jobs to seed and export instead of the throughput run; null: the throughput run. */
  exportJobs: number | null
  /** How fast the export client reads, in MB/s: slower than the service writes, so back-pressure holds. */
  exportReadMbps: number
  /** Jobs to seed before timing the metrics routes instead of the throughput run; null: the throughput run. */
  metricsJobs: number | null
  metricsRequests: number
  /** Expired jobs to seed and time retention on, after the cycles; null: no retention run. */
  retentionJobs: number | null
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

function parseOptions(argv: string[]): Options {
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
      webhooks: { type: 'boolean', default: false },
      'export-jobs': { type: 'string' },
      'export-read-mbps': { type: 'string' },
      'metrics-jobs': { type: 'string' },
      'metrics-requests': { type: 'string' },
      'retention-jobs': { type: 'string' },
    },
  })
  if (values.spawn === (values.url !== undefined)) throw new ConfigError(`give exactly one of --url and --spawn\n${usage}`)
  if (values.url !== undefined && values['api-key'] === undefined) throw new ConfigError(`--url needs --api-key\n${usage}`)
  // The seeding writes to the service's database, which only a spawned service shares with us.
  if (values['export-jobs'] !== undefined && !values.spawn) throw new ConfigError(`--export-jobs needs --spawn\n${usage}`)
  if (values['metrics-jobs'] !== undefined && !values.spawn) throw new ConfigError(`--metrics-jobs needs --spawn\n${usage}`)
  if (values['retention-jobs'] !== undefined && values['retention-jobs'] !== '0' && !values.spawn) throw new ConfigError(`--retention-jobs needs --spawn\n${usage}`)
  // --jobs 0: no cycles (retention alone).
  const noLoad = values.jobs === '0'
  // The same environment the service reads (CONTRACT.md) supplies the defaults for --spawn.
  const config = loadConfig(process.env, { devSecretFile: values.dev ? devSecretFileName : null })
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
    webhooks: values.webhooks,
    exportJobs: values['export-jobs'] === undefined ? null : positiveInt('export-jobs', values['export-jobs'], 0, 10_000_000),
    exportReadMbps: positiveInt('export-read-mbps', values['export-read-mbps'], 16, 10_000),
    metricsJobs: values['metrics-jobs'] === undefined ? null : positiveInt('metrics-jobs', values['metrics-jobs'], 0, 10_000_000),
    metricsRequests: positiveInt('metrics-requests', values['metrics-requests'], 200, 100_000),
    retentionJobs: phaseCount('retention-jobs', values['retention-jobs'], values.spawn ? 20_000 : 0, 10_000_000),
    dev: values.dev,
  }
}

interface Reply {
  status: number
  headers: http.IncomingHttpHeaders
  body: any
  /** performance.now() when the whole response had arrived. */
  at: number
}

/** The run's own end: its time limit or an interrupt. */
class RunStopped extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'RunStopped'
  }
}

class HttpError extends Error {
  constructor(
    readonly what: string,
    readonly reply: Reply,
  ) {
    super(`${what}: HTTP ${reply.status} ${JSON.stringify(reply.body)}`)
    this.name = 'HttpError'
  }
}

/**
 * A keep-alive client on node:http: one socket per request in flight, so the pool is sized to
 * the bench's concurrency and no request waits for a connection (no pipelining). Requests take no
 * AbortSignal (a listener per request costs client CPU on a 2-core box); `close()` ends whatever
 * is in flight instead, and a stuck request times out.
 */
class Client {
  readonly #options: http.RequestOptions
  readonly #basePath: string
  readonly #auth: string
  readonly #agent: http.Agent
  readonly #transport: typeof http | typeof https

  constructor(base: string, apiKey: string, connections: number) {
    const url = new URL(base)
    const secure = url.protocol === 'https:'
    this.#transport = secure ? https : http
    const agentOptions = { keepAlive: true, maxSockets: connections, maxFreeSockets: connections }
    this.#agent = secure ? new https.Agent(agentOptions) : new http.Agent(agentOptions)
    this.#options = { hostname: url.hostname, port: url.port, agent: this.#agent, timeout: requestTimeoutMs }
    this.#basePath = url.pathname.replace(/\/$/, '')
    this.#auth = `Bearer ${apiKey}`
  }

  request(method: string, path: string, body?: unknown): Promise<Reply> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const headers: http.OutgoingHttpHeaders = { authorization: this.#auth, accept: 'application/json' }
    if (payload) {
      headers['content-type'] = 'application/json'
      headers['content-length'] = payload.length
    }
    return new Promise((resolvePromise, reject) => {
      const req = this.#transport.request({ ...this.#options, method, path: this.#basePath + path, headers }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const at = performance.now()
          const text = Buffer.concat(chunks).toString('utf8')
          let parsed: unknown = text
          if (String(res.headers['content-type'] ?? '').includes('json')) {
            try {
              parsed = JSON.parse(text)
            } catch {
              parsed = text
            }
          }
          resolvePromise({ status: res.statusCode ?? 0, headers: res.headers, body: parsed, at })
        })
      })
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${requestTimeoutMs} ms`)))
      req.on('error', reject)
      req.end(payload)
    })
  }

  /** Ends every request in flight; the pool stays usable. */
  close(): void {
    this.#agent.destroy()
  }
}

function eventSeq(reply: Reply): number | null {
  const raw = reply.headers['x-event-seq']
  const n = Number(Array.isArray(raw) ? raw[0] : raw)
  return Number.isFinite(n) && n > 0 ? n : null
}

/** 429 and 503 mean "not done, come back"; anything else is an answer. */
function isRetryable(reply: Reply): boolean {
  return reply.status === 429 || reply.status === 503
}

async function withRetries(what: string, signal: AbortSignal, attempt: () => Promise<Reply>, ok: number): Promise<Reply> {
  for (let i = 0; ; i++) {
    const reply = await attempt()
    if (reply.status === ok) return reply
    if (!isRetryable(reply) || i >= maxRetries) throw new HttpError(what, reply)
    await sleep(50 * 2 ** i, undefined, { signal })
  }
}

/** Nearest-rank percentile; null when nothing was measured. */
function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null
  const sorted = Float64Array.from(values).sort()
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
}

function round(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms * 10) / 10
}

/** A min-heap of writes by sequence, so each checkpoint settles exactly the writes it covers. */
class WriteHeap {
  readonly #items: Array<{ seq: number; at: number }> = []

  get size(): number {
    return this.#items.length
  }

  peek(): { seq: number; at: number } | undefined {
    return this.#items[0]
  }

  push(item: { seq: number; at: number }): void {
    const a = this.#items
    a.push(item)
    for (let i = a.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1
      if (a[parent]!.seq <= a[i]!.seq) break
      ;[a[parent], a[i]] = [a[i]!, a[parent]!]
      i = parent
    }
  }

  pop(): { seq: number; at: number } | undefined {
    const a = this.#items
    const top = a[0]
    const last = a.pop()
    if (a.length > 0 && last !== undefined) {
      a[0] = last
      for (let i = 0; ; ) {
        const l = 2 * i + 1
        const r = l + 1
        let m = i
        if (l < a.length && a[l]!.seq < a[m]!.seq) m = l
        if (r < a.length && a[r]!.seq < a[m]!.seq) m = r
        if (m === i) break
        ;[a[m], a[i]] = [a[i]!, a[m]!]
        i = m
      }
    }
    return top
  }
}

/**
 * Projection lag: for a write the service answered at `at` (a 201 or an ack, with its
 * X-Event-Seq), the time until the read models are seen to include that sequence. It is the
 * staleness a list reader without read-your-writes would see, measured from the moment the
 * client learnt of the write.
 */
interface ProjectionTracker {
  readonly method: string
  observe(seq: number, at: number): void
  /** Resolves with the moment the read models were seen to include `seq`. */
  reachedAt(seq: number, signal: AbortSignal): Promise<number>
  lags(): readonly number[]
  /** The highest sequence known to be projected, when the method knows it. */
  position(): number | null
  close(): void
}

/**
 * Exact, for every write: the projector announces each committed checkpoint on
 * `<ns>.ctl.checkpoint` (the subject the API's read-your-writes waits use). The first
 * announcement at or beyond a write's sequence settles it. An announcement that arrived before
 * the client had its answer counts as zero lag.
 */
class CheckpointTracker implements ProjectionTracker {
  readonly method = 'projector checkpoint announcements (every write)'
  readonly #pending = new WriteHeap()
  readonly #lags: number[] = []
  readonly #waiters = new Set<{ seq: number; resolve: (at: number) => void }>()
  readonly #subscription: { unsubscribe(): void }
  #reached = 0

  constructor(nats: NatsHandles, ns: string) {
    this.#subscription = nats.nc.subscribe(checkpointSubject(ns), {
      callback: (err, msg) => {
        if (err) return
        const seq = Number(msg.string())
        if (Number.isFinite(seq)) this.#advance(seq, performance.now())
      },
    })
  }

  #advance(seq: number, now: number): void {
    if (seq <= this.#reached) return
    this.#reached = seq
    for (let top = this.#pending.peek(); top !== undefined && top.seq <= seq; top = this.#pending.peek()) {
      this.#pending.pop()
      this.#lags.push(Math.max(0, now - top.at))
    }
    for (const w of this.#waiters) {
      if (w.seq <= seq) {
        this.#waiters.delete(w)
        w.resolve(now)
      }
    }
  }

  observe(seq: number, at: number): void {
    if (seq <= this.#reached) this.#lags.push(0)
    else this.#pending.push({ seq, at })
  }

  reachedAt(seq: number, signal: AbortSignal): Promise<number> {
    if (seq <= this.#reached) return Promise.resolve(performance.now())
    return new Promise((resolvePromise, reject) => {
      const waiter = { seq, resolve: resolvePromise }
      this.#waiters.add(waiter)
      signal.addEventListener('abort', () => {
        this.#waiters.delete(waiter)
        reject(signal.reason)
      }, { once: true })
    })
  }

  lags(): readonly number[] {
    return this.#lags
  }

  position(): number | null {
    return this.#reached
  }

  close(): void {
    this.#subscription.unsubscribe()
  }
}

/**
 * Over HTTP only (the namespace is unknown): every ~50 ms a probe takes the newest write seen
 * so far and asks `GET /jobs?limit=1&min_seq=<its seq>`, which the service holds until its
 * projector reaches that sequence (bounded by serviceListWaitMs). The lag sample is from that
 * write's answer to the probe's answer. It is an upper bound: it includes one round trip, and the
 * service also waits for the project's later writes it already made.
 */
class ProbeTracker implements ProjectionTracker {
  readonly method = 'min_seq list probes every 50 ms (upper bound)'
  readonly #client: Client
  readonly #lags: number[] = []
  #newest: { seq: number; at: number } | null = null
  #probed = 0
  readonly #stop = new AbortController()

  constructor(client: Client, signal: AbortSignal) {
    this.#client = client
    this.#sample(AbortSignal.any([signal, this.#stop.signal])).catch(() => undefined)
  }

  async #probe(seq: number, signal: AbortSignal): Promise<number> {
    for (;;) {
      const sent = performance.now()
      signal.throwIfAborted()
      const reply = await this.#client.request('GET', `/jobsvc/v1/jobs?limit=1&min_seq=${seq}`)
      if (reply.status !== 200) throw new HttpError('projection probe', reply)
      if (reply.at - sent < probeReachedWithinMs) return reply.at
    }
  }

  async #sample(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const write = this.#newest
      if (write !== null && write.seq > this.#probed) {
        this.#probed = write.seq
        const at = await this.#probe(write.seq, signal)
        this.#lags.push(Math.max(0, at - write.at))
      }
      await sleep(probeIntervalMs, undefined, { signal })
    }
  }

  observe(seq: number, at: number): void {
    if (this.#newest === null || seq > this.#newest.seq) this.#newest = { seq, at }
  }

  reachedAt(seq: number, signal: AbortSignal): Promise<number> {
    return this.#probe(seq, signal)
  }

  lags(): readonly number[] {
    return this.#lags
  }

  position(): number | null {
    return null
  }

  close(): void {
    this.#stop.abort()
  }
}

interface Results {
  complete: boolean
  jobs: number
  elapsedMs: number | null
  createLatencies: number[]
  claimLatencies: number[]
  lags: readonly number[]
  lagMethod: string
  duplicateClaims: number
  acked: number
  polls: number
  emptyPolls: number
  /** This process's CPU time over the run, to tell whether the client was the bottleneck. */
  clientCpuMs: number
  wallMs: number
}

/** How one cycle creates and acknowledges: one request per job, or batches. */
interface Cycle {
  /** Jobs per batch create, acks of each poll in one request; null: one request per create and per ack. */
  batch: number | null
  capacity: number
}

/** One item of a batch answer. */
interface BatchItemReply {
  status: number
  body?: { id: string }
  error?: { code: string }
}

/**
 * Producers create `jobs` jobs; workers poll, then ack every claimed job: each ack its own request
 * (in parallel), or with `cycle.batch` all of a poll's acks in one request.
 */
async function drive(client: Client, opts: Options, cycle: Cycle, tracker: ProjectionTracker, signal: AbortSignal): Promise<Results> {
  const runId = randomBytes(4).toString('hex')
  // A queue of its own, so that against a shared project the workers claim only this run's jobs.
  const queue = `bench_${runId}`
  const createLatencies: number[] = []
  const claimLatencies: number[] = []
  const createdAt = new Map<string, number>()
  const claimedEarly = new Map<string, number>()
  const claimedIds = new Set<string>()
  let next = 0
  let created = 0
  let claimed = 0
  let acked = 0
  let duplicateClaims = 0
  let polls = 0
  let emptyPolls = 0
  let maxSeq = 0
  let firstCreateAt: number | null = null
  let lastAckAt = 0
  let projected: Promise<number> | null = null
  const finished = new AbortController()
  const halt = new AbortController()
  const stop = AbortSignal.any([signal, finished.signal, halt.signal])
  // A failed or interrupted run ends its requests in flight; a finished one lets polls return.
  const failed = AbortSignal.any([signal, halt.signal])
  const endRequests = () => client.close()
  failed.addEventListener('abort', endRequests, { once: true })

  const noteWrite = (reply: Reply) => {
    const seq = eventSeq(reply)
    if (seq === null) throw new Error(`${reply.headers['x-request-id'] ?? 'a response'} carries no X-Event-Seq; the service is too old for this bench`)
    if (seq > maxSeq) maxSeq = seq
    tracker.observe(seq, reply.at)
  }

  /** A created job's answer (the 201, or its batch's 200): its creation time, matched with an early claim. */
  const noteCreated = (id: string, at: number) => {
    created++
    const early = claimedEarly.get(id)
    // The poll can answer before the 201 reaches us; the job was then claimable at once.
    if (early !== undefined) {
      claimedEarly.delete(id)
      claimLatencies.push(Math.max(0, early - at))
    } else {
      createdAt.set(id, at)
    }
  }

  /**
   * Creates `cycle.batch` jobs per request. Items refused for now (429, 503) are sent again in the
   * producer's next request, up to maxRetries times each; any other item failure ends the run.
   */
  const batchProducer = async () => {
    const again: Array<{ i: number; tries: number }> = []
    while ((next < opts.jobs || again.length > 0) && !stop.aborted) {
      const items = again.splice(0, cycle.batch!)
      while (items.length < cycle.batch! && next < opts.jobs) items.push({ i: next++, tries: 0 })
      let sent = 0
      const reply = await withRetries('batch create', stop, () => {
        sent = performance.now()
        firstCreateAt ??= sent
        return client.request('POST', '/jobsvc/v1/jobs/batch', { jobs: items.map(({ i }) => ({ job_type: 'bench', queue, payload: { i } })) })
      }, 200)
      createLatencies.push(reply.at - sent)
      const results = reply.body.results as BatchItemReply[]
      results.forEach((result, k) => {
        if (result.status === 201) return noteCreated(String(result.body!.id), reply.at)
        const item = items[k]!
        if ((result.status !== 429 && result.status !== 503) || item.tries >= maxRetries) throw new HttpError(`batch create item ${k}`, { ...reply, body: result })
        again.push({ i: item.i, tries: item.tries + 1 })
      })
      if (results.some((r) => r.status === 201)) noteWrite(reply)
      if (again.length > 0 && next >= opts.jobs) await sleep(50, undefined, { signal: stop })
    }
  }

  const singleProducer = async () => {
    while (next < opts.jobs && !stop.aborted) {
      const i = next++
      if (opts.rate !== null && firstCreateAt !== null) {
        const due = firstCreateAt + (i * 1000) / opts.rate - performance.now()
        if (due > 0) await sleep(due, undefined, { signal: stop })
      }
      let sent = 0
      const reply = await withRetries('create', stop, () => {
        sent = performance.now()
        firstCreateAt ??= sent
        return client.request('POST', '/jobsvc/v1/jobs', { job_type: 'bench', queue, payload: { i } })
      }, 201)
      createLatencies.push(reply.at - sent)
      noteWrite(reply)
      noteCreated(String(reply.body.id), reply.at)
    }
  }
  const producer = cycle.batch === null ? singleProducer : batchProducer

  const noteAcked = (count: number, at: number) => {
    lastAckAt = Math.max(lastAckAt, at)
    acked += count
    if (acked === opts.jobs) {
      // Watched from this moment on, not after the workers' last polls have returned.
      projected = tracker.reachedAt(maxSeq, signal)
      projected.catch(() => undefined)
      finished.abort()
    }
  }

  const ack = async (jobId: string, workerId: string) => {
    const reply = await withRetries('ack', stop, () =>
      client.request('POST', '/jobsvc/v1/workers/ack', { job_id: jobId, worker_id: workerId, status: 'succeeded', duration_ms: 0 }),
    200)
    noteWrite(reply)
    noteAcked(1, reply.at)
  }

  /** A poll's jobs acknowledged in one request; acks refused for now (503) are sent again. */
  const ackBatch = async (jobIds: string[], workerId: string) => {
    for (let tries = 0, pending = jobIds; pending.length > 0; tries++) {
      const acks = pending.map((id) => ({ job_id: id, worker_id: workerId, status: 'succeeded', duration_ms: 0 }))
      const reply = await withRetries('batch ack', stop, () => client.request('POST', '/jobsvc/v1/workers/ack/batch', { acks }), 200)
      const results = reply.body.results as BatchItemReply[]
      const failed = results.filter((r) => r.status !== 200)
      if (failed.some((r) => r.status !== 503) || (failed.length > 0 && tries >= maxRetries)) throw new HttpError('batch ack', { ...reply, body: failed[0] })
      if (failed.length < results.length) noteWrite(reply)
      noteAcked(results.length - failed.length, reply.at)
      pending = pending.filter((_, k) => results[k]!.status !== 200)
    }
  }

  const worker = async (w: number) => {
    const workerId = `bench-${runId}-w${w}`
    const body = { worker_id: workerId, queues: [queue], capacity: cycle.capacity, wait_seconds: pollWaitSeconds }
    while (!stop.aborted) {
      const reply = await withRetries('poll', stop, () => client.request('POST', '/jobsvc/v1/workers/poll', body), 200)
      const jobs = reply.body.jobs as Array<{ id: string }>
      polls++
      if (jobs.length === 0) emptyPolls++
      const fresh: typeof jobs = []
      for (const job of jobs) {
        if (claimedIds.has(job.id)) {
          duplicateClaims++
          continue
        }
        claimedIds.add(job.id)
        fresh.push(job)
        claimed++
        const at = createdAt.get(job.id)
        if (at === undefined) claimedEarly.set(job.id, reply.at)
        else {
          createdAt.delete(job.id)
          claimLatencies.push(reply.at - at)
        }
      }
      if (cycle.batch === null) await Promise.all(fresh.map((job) => ack(job.id, workerId)))
      else if (fresh.length > 0) await ackBatch(fresh.map((job) => job.id), workerId)
    }
  }

  const startedAt = performance.now()
  const cpuAtStart = process.cpuUsage()
  const measured = () => {
    const cpu = process.cpuUsage(cpuAtStart)
    return { clientCpuMs: (cpu.user + cpu.system) / 1000, wallMs: performance.now() - startedAt }
  }
  let lastAcked = 0
  const progress = setInterval(() => {
    const s = ((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)
    const projected = tracker.position()
    const where = projected === null ? '' : `  projected seq ${projected}/${maxSeq}`
    process.stderr.write(`[${s}s] created ${created}/${opts.jobs}  claimed ${claimed}  acked ${acked}  (${acked - lastAcked} acked/s)${where}\n`)
    lastAcked = acked
  }, 1000)
  /** What the run saw, complete or not. */
  const observed = () => ({
    jobs: opts.jobs,
    createLatencies,
    claimLatencies,
    lags: tracker.lags(),
    lagMethod: tracker.method,
    duplicateClaims,
    acked,
    polls,
    emptyPolls,
    ...measured(),
  })
  try {
    // The first failure halts the run; what fails after that is only the abort itself.
    const guard = (p: Promise<void>) =>
      p.catch((err) => {
        if (!stop.aborted) halt.abort(err)
      })
    await Promise.all([
      ...Array.from({ length: opts.producers }, () => guard(producer())),
      ...Array.from({ length: opts.workers }, (_, w) => guard(worker(w))),
    ])
    if (halt.signal.aborted) throw halt.signal.reason
    if (!finished.signal.aborted) throw signal.reason ?? new Error('the run stopped early')
    const endAt = Math.max(lastAckAt, await projected!)
    return { ...observed(), complete: true, elapsedMs: endAt - firstCreateAt! }
  } catch (err) {
    process.stderr.write(`bench: run incomplete: ${err instanceof Error ? err.message : String(err)}\n`)
    return { ...observed(), complete: false, elapsedMs: null }
  } finally {
    failed.removeEventListener('abort', endRequests)
    clearInterval(progress)
  }
}

interface SpawnedService {
  url: string
  child: ChildProcess
  output(): string
}

/** Keeps only the tail of a child's output: enough to explain a failure, never unbounded. */
function tailBuffer(limit = 64 * 1024) {
  let text = ''
  return {
    add: (chunk: unknown) => {
      text += String(chunk)
      if (text.length > limit) text = text.slice(-limit)
    },
    text: () => text,
  }
}

async function spawnService(env: NodeJS.ProcessEnv, logPath: string | null, cpuProfileDir: string | null, dev: boolean, signal: AbortSignal): Promise<SpawnedService> {
  const args = [...(cpuProfileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProfileDir}`]), '--import', 'tsx', 'services/roles/main.ts', ...(dev ? ['--dev'] : [])]
  const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const out = tailBuffer()
  // Drained for the whole run: a full pipe would block the service's logging.
  child.stdout!.on('data', out.add)
  child.stderr!.on('data', out.add)
  if (logPath !== null) {
    const file = createWriteStream(logPath)
    child.stdout!.pipe(file)
    child.stderr!.pipe(file)
  }
  const url = await new Promise<string>((resolvePromise, reject) => {
    const fail = (why: string) => {
      clearTimeout(timer)
      reject(new Error(`${why}\n${out.text()}`))
    }
    const timer = setTimeout(() => fail('the service did not start within 30 s'), 30_000)
    const onData = () => {
      const m = /jobsvc listening on (http:\/\/[^"\s]+)/.exec(out.text())
      if (m) {
        clearTimeout(timer)
        child.stdout!.off('data', onData)
        resolvePromise(m[1]!)
      }
    }
    child.stdout!.on('data', onData)
    child.once('exit', (code) => fail(`the service exited with ${code}`))
    signal.addEventListener('abort', () => fail('interrupted'), { once: true })
  })
  return { url, child, output: out.text }
}

async function stopService(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  child.kill('SIGTERM')
  const killer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(killer)
}

function createProject(env: NodeJS.ProcessEnv, dev: boolean): Promise<{ project_id: string; api_key: string }> {
  // business: its request rate (500,000/h) and allowance leave the bench unthrottled.
  const args = ['--import', 'tsx', 'services/roles/cli.ts', ...(dev ? ['--dev'] : []), 'project', 'create', '--name', 'bench', '--plan', 'business']
  return new Promise((resolvePromise, reject) => {
    execFile(process.execPath, args, { cwd: repoRoot, env, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`project create failed: ${err.message}\n${stderr}`))
      try {
        resolvePromise(JSON.parse(stdout.trim().split('\n').at(-1)!))
      } catch {
        reject(new Error(`project create printed no JSON: ${stdout}\n${stderr}`))
      }
    })
  })
}

/** The key may need a moment to become usable (the key table is a read model); also checks the URL. */
async function awaitAccess(client: Client, signal: AbortSignal): Promise<void> {
  const deadline = performance.now() + 15_000
  for (;;) {
    signal.throwIfAborted()
    const reply = await client.request('GET', '/jobsvc/v1/jobs?limit=1')
    if (reply.status === 200) return
    if (performance.now() > deadline) throw new HttpError('GET /jobsvc/v1/jobs', reply)
    await sleep(100, undefined, { signal })
  }
}

/**
 * A webhook receiver on loopback (`--webhooks`): answers 200 at once and notes, per delivery, the
 * lag from the event's `created_at` to its arrival (service and bench share the machine's clock).
 */
class WebhookReceiver {
  readonly lags: number[] = []
  readonly jobs = new Set<string>()
  firstAt: number | null = null
  lastAt = 0
  readonly #server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      res.writeHead(200).end()
      try {
        const envelope = JSON.parse(body) as { created_at: string; data: { job_id: string } }
        if (this.jobs.has(envelope.data.job_id)) return
        const now = Date.now()
        this.jobs.add(envelope.data.job_id)
        this.lags.push(now - Date.parse(envelope.created_at))
        this.firstAt ??= now
        this.lastAt = now
      } catch {
        // not a delivery
      }
    })
  })

  async listen(): Promise<number> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r))
    return (this.#server.address() as { port: number }).port
  }

  /** Waits until `count` jobs were delivered or `ms` passed. */
  async settle(count: number, ms: number): Promise<void> {
    const end = performance.now() + ms
    while (this.jobs.size < count && performance.now() < end) await sleep(50)
  }

  summary() {
    const spanS = this.firstAt === null ? 0 : (this.lastAt - this.firstAt) / 1000
    return {
      webhook_deliveries: this.jobs.size,
      webhook_deliveries_per_s: spanS > 0 ? Math.round((this.jobs.size / spanS) * 10) / 10 : null,
      webhook_lag_p50_ms: round(percentile(this.lags, 50)),
      webhook_lag_p99_ms: round(percentile(this.lags, 99)),
    }
  }

  close(): void {
    this.#server.close()
  }
}

function jobsPerS(r: Results): number | null {
  return r.complete && r.elapsedMs !== null ? Math.round((r.jobs / r.elapsedMs) * 1000 * 10) / 10 : null
}

const ms = (v: number | null) => (v === null ? 'n/a' : `${v} ms`)

/** A cycle's lines after its heading: rate, latencies, lag, polls, the client's CPU. */
function describeCycle(r: Results, createWhat: string): string[] {
  return [
    `  end to end (first create -> last ack projected): ${r.elapsedMs === null ? 'n/a' : `${(r.elapsedMs / 1000).toFixed(2)} s`}, ${jobsPerS(r) ?? 'n/a'} jobs/s`,
    `  create latency      p50 ${ms(round(percentile(r.createLatencies, 50)))}  p99 ${ms(round(percentile(r.createLatencies, 99)))}  (${r.createLatencies.length} ${createWhat})`,
    `  created -> claimed  p50 ${ms(round(percentile(r.claimLatencies, 50)))}  p99 ${ms(round(percentile(r.claimLatencies, 99)))}  (${r.claimLatencies.length} claims)`,
    `  projection lag      p50 ${ms(round(percentile(r.lags, 50)))}  p99 ${ms(round(percentile(r.lags, 99)))}  (${r.lags.length} samples; ${r.lagMethod})`,
    `  acked ${r.acked}/${r.jobs}; jobs claimed twice: ${r.duplicateClaims}; polls ${r.polls} (${r.emptyPolls} empty, ${r.polls === r.emptyPolls ? 0 : ((r.acked) / (r.polls - r.emptyPolls)).toFixed(1)} jobs per non-empty poll)`,
    `  bench client CPU: ${(r.clientCpuMs / 1000).toFixed(1)} s over ${(r.wallMs / 1000).toFixed(1)} s (${Math.round((r.clientCpuMs / r.wallMs) * 100)}% of one core)`,
  ]
}

/** The batched cycle's measurement and the CPU it took, when --batch ran one. */
interface BatchedRun {
  results: Results
  cpu: CpuBreakdown | null
}

function report(
  opts: Options,
  r: Results,
  webhooks: ReturnType<WebhookReceiver['summary']> | null,
  cpu: CpuBreakdown | null,
  idle: Results | null,
  batched: BatchedRun | null,
  retention: { lines: string[]; summary: Record<string, number | null> } | null,
): void {
  const b = batched?.results
  const summary = {
    jobs_per_s: jobsPerS(r),
    create_p50_ms: round(percentile(r.createLatencies, 50)),
    create_p99_ms: round(percentile(r.createLatencies, 99)),
    claim_p50_ms: round(percentile(r.claimLatencies, 50)),
    claim_p99_ms: round(percentile(r.claimLatencies, 99)),
    projection_lag_p99_ms: round(percentile(r.lags, 99)),
    ...(idle === null
      ? {}
      : { idle_claim_p50_ms: round(percentile(idle.claimLatencies, 50)), idle_claim_p99_ms: round(percentile(idle.claimLatencies, 99)), idle_create_p50_ms: round(percentile(idle.createLatencies, 50)) }),
    ...(webhooks ?? {}),
    ...(b === undefined
      ? {}
      : {
          batch_jobs_per_s: jobsPerS(b),
          batch_size: opts.batch,
          batch_create_p50_ms: round(percentile(b.createLatencies, 50)),
          batch_create_p99_ms: round(percentile(b.createLatencies, 99)),
          batch_claim_p50_ms: round(percentile(b.claimLatencies, 50)),
          batch_claim_p99_ms: round(percentile(b.claimLatencies, 99)),
          batch_projection_lag_p99_ms: round(percentile(b.lags, 99)),
        }),
    ...(retention?.summary ?? {}),
  }
  const lines = [
    ...(idle === null
      ? []
      : [
          '',
          `jobsvc bench, idle: ${idle.jobs} jobs paced at ${idlePhase.rate}/s, ${idlePhase.producers} producers, ${idlePhase.workers} workers${idle.complete ? '' : ' (INCOMPLETE)'}`,
          `  idle claim: created -> claimed p50 ${ms(round(percentile(idle.claimLatencies, 50)))}  p99 ${ms(round(percentile(idle.claimLatencies, 99)))}; create p50 ${ms(round(percentile(idle.createLatencies, 50)))}`,
        ]),
    '',
    `jobsvc bench: ${r.jobs} jobs, ${opts.producers} producers${opts.rate === null ? '' : ` paced at ${opts.rate}/s`}, ${opts.workers} workers x capacity ${opts.capacity}${r.complete ? '' : ' (INCOMPLETE)'}`,
    ...describeCycle(r, 'creates'),
    ...(webhooks
      ? [`  webhooks: ${webhooks.webhook_deliveries} job.created delivered, ${webhooks.webhook_deliveries_per_s ?? 'n/a'}/s, lag p50 ${ms(webhooks.webhook_lag_p50_ms)} p99 ${ms(webhooks.webhook_lag_p99_ms)}`]
      : []),
    ...(cpu === null || r.acked === 0 ? [] : describeCpu(cpu, r.acked)),
    ...(b === undefined
      ? []
      : [
          '',
          `jobsvc bench, batched: ${b.jobs} jobs, ${opts.producers} producers creating ${opts.batch} per request, ${opts.workers} workers x capacity ${opts.batchCapacity} acking each poll's jobs in one request${b.complete ? '' : ' (INCOMPLETE)'}`,
          `  batch cycle: ${jobsPerS(b) ?? 'n/a'} jobs/s`,
          ...describeCycle(b, `batch creates of up to ${opts.batch}`),
          ...(batched!.cpu === null || b.acked === 0 ? [] : describeCpu(batched!.cpu, b.acked)),
        ]),
    ...(retention?.lines ?? []),
    '',
  ]
  process.stdout.write(lines.join('\n') + JSON.stringify(summary) + '\n')
}

const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10

/** A process's resident set size in bytes (Linux /proc; null elsewhere or once it has exited). */
function residentBytes(pid: number | undefined): number | null {
  if (pid === undefined) return null
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m === null ? null : Number(m[1]) * 1024
  } catch {
    return null
  }
}

/** The median of `count` RSS samples 100 ms apart: the idle level, not one moment's noise. */
async function idleResidentBytes(pid: number | undefined, count = 10): Promise<number> {
  const samples: number[] = []
  for (let i = 0; i < count; i++) {
    const rss = residentBytes(pid)
    if (rss !== null) samples.push(rss)
    await sleep(100)
  }
  if (samples.length === 0) throw new Error('cannot read the service process RSS from /proc')
  return percentile(samples, 50)!
}

/**
 * Seeds `count` finished jobs of one project with a single INSERT ... SELECT over
 * generate_series, straight into the jobs read model, with no events behind them. The export
 * reads only that table, so this is exactly what it streams, and 200,000 jobs take seconds where
 * creating them over HTTP would take minutes. Payloads are about 300 bytes of JSON; creation
 * times are 1 ms apart, ending at `newest`.
 */
async function seedJobs(databaseUrl: string, projects: readonly string[], count: number, newest: Date): Promise<void> {
  const sql = openSql(databaseUrl, { max: 1, applicationName: 'jobsvc-bench-seed' })
  try {
    for (const [p, projectId] of projects.entries()) {
      await sql`
        INSERT INTO jobs (id, project_id, state, job_type, queue, payload, created_at, run_at, started_at, completed_at, attempt, max_attempts,
          timeout_seconds, progress, duration_ms, error, tags, parent_job_id, waiting_for_parent, worker_id, idempotency_key, updated_at, last_seq)
        SELECT 'job_bench' || ${p} || '_' || lpad(i::text, 9, '0'), ${projectId}, 'succeeded', 'bench.export', 'exports',
          json_build_object('order_id', i, 'customer', 'cus_' || md5(i::text), 'lines', json_build_array(json_build_object('sku', 'sku-' || (i % 97), 'qty', i % 7 + 1, 'price_cents', i % 10000)),
            'note', 'seeded for the export memory bench, "quoted", with a comma', 'padding', repeat('x', 96)),
          at, at, at, at + interval '12 ms', 1, 3, 300, 1, 12, NULL, '{"team":"bench","tier":"gold"}'::json, NULL, false, 'bench-worker-1', NULL, at, 0
        FROM generate_series(1, ${count}::int) AS i, LATERAL (SELECT ${newest}::timestamptz - (${count}::int - i) * interval '1 ms' AS at) t`
    }
    // As autovacuum would soon: fresh statistics, so the export's plan is the index scan it gets in production.
    await sql`ANALYZE jobs`
  } finally {
    await sql.end()
  }
}

/** The next quote, or (outside quotes) the next newline, from `from` on; -1 when there is none. */
function nextCsvMark(chunk: Buffer, from: number, quoted: boolean): number {
  const quote = chunk.indexOf(0x22, from)
  if (quoted) return quote
  const newline = chunk.indexOf(0x0a, from)
  return newline === -1 ? quote : quote === -1 ? newline : Math.min(newline, quote)
}

interface ExportRead {
  status: number
  rows: number
  bytes: number
  elapsedMs: number
}

/**
 * Downloads an export at no more than `bytesPerSecond` (pausing the response, so the service
 * sees a slow reader's back-pressure) and counts its rows: JSONL lines, or CSV records found by
 * an RFC 4180 scan (a line break inside quotes is not a record's end), the header left out.
 */
function readExport(base: string, apiKey: string, path: string, format: 'jsonl' | 'csv', bytesPerSecond: number): Promise<ExportRead> {
  const url = new URL(path, base)
  return new Promise((resolvePromise, reject) => {
    const started = performance.now()
    const req = http.get(url, { headers: { authorization: `Bearer ${apiKey}` } }, (res) => {
      let bytes = 0
      let records = 0
      let quoted = false
      let errorBody = ''
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length
        if (res.statusCode !== 200) errorBody += chunk.toString('utf8')
        if (format === 'jsonl') {
          for (let i = chunk.indexOf(0x0a); i !== -1; i = chunk.indexOf(0x0a, i + 1)) records++
        } else {
          // A quote toggles quoting ("" toggles twice); a newline outside quotes ends a record.
          for (let i = nextCsvMark(chunk, 0, quoted); i !== -1; i = nextCsvMark(chunk, i + 1, quoted)) {
            if (chunk[i] === 0x22) quoted = !quoted
            else records++
          }
        }
        const wait = started + (bytes / bytesPerSecond) * 1000 - performance.now()
        if (wait > 1) {
          res.pause()
          setTimeout(() => res.resume(), wait)
        }
      })
      res.on('error', reject)
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`GET ${path}: HTTP ${res.statusCode} ${errorBody}`))
        resolvePromise({ status: res.statusCode, rows: format === 'csv' ? records - 1 : records, bytes, elapsedMs: performance.now() - started })
      })
    })
    req.on('error', reject)
  })
}

interface ExportMeasure extends ExportRead {
  format: 'jsonl' | 'csv'
  rssBefore: number
  rssPeak: number
  samples: number
}

/** One export read to its end while the service's RSS is sampled every 100 ms. */
async function measureExport(base: string, apiKey: string, pid: number | undefined, format: 'jsonl' | 'csv', bytesPerSecond: number, window: { from: Date; until: Date }): Promise<ExportMeasure> {
  const rssBefore = await idleResidentBytes(pid)
  let rssPeak = rssBefore
  let samples = 0
  const sample = () => {
    const rss = residentBytes(pid)
    if (rss === null) return
    samples++
    rssPeak = Math.max(rssPeak, rss)
  }
  const sampler = setInterval(sample, 100)
  try {
    const path = `/jobsvc/v1/jobs/export?from=${window.from.toISOString()}&until=${window.until.toISOString()}&format=${format}`
    const read = await readExport(base, apiKey, path, format, bytesPerSecond)
    sample()
    return { ...read, format, rssBefore, rssPeak, samples }
  } finally {
    clearInterval(sampler)
  }
}

/**
 * `--export-jobs N`: the memory cost of streaming a large export (issue: "an export of 200,000
 * jobs streams with the service's resident memory growing by less than 50 MB"). One project per
 * format, so the second export does not wait out the first one's 60-second cooldown. Growth is
 * the highest RSS seen during an export over the lowest idle RSS measured before any export
 * (idle readings differ by tens of MB as V8 shrinks its heap while idle: the lowest is the
 * conservative one).
 */
async function benchExport(opts: Options, base: string, pid: number | undefined, databaseUrl: string, projects: Array<{ project_id: string; api_key: string }>): Promise<boolean> {
  const count = opts.exportJobs!
  const newest = new Date()
  const window = { from: new Date(newest.getTime() - count - 3_600_000), until: new Date(newest.getTime() + 60_000) }
  const seedStarted = performance.now()
  process.stderr.write(`bench: seeding ${count} jobs in each of ${projects.length} projects (bulk INSERT into the jobs read model)\n`)
  await seedJobs(databaseUrl, projects.map((p) => p.project_id), count, newest)
  process.stderr.write(`bench: seeded in ${((performance.now() - seedStarted) / 1000).toFixed(1)} s\n`)
  const bytesPerSecond = opts.exportReadMbps * 1024 * 1024
  const initial = await idleResidentBytes(pid, 20)
  const runs: ExportMeasure[] = []
  for (const [i, format] of (['jsonl', 'csv'] as const).entries()) {
    process.stderr.write(`bench: ${format} export, read at ${opts.exportReadMbps} MB/s\n`)
    runs.push(await measureExport(base, projects[i]!.api_key, pid, format, bytesPerSecond, window))
  }
  const baseline = Math.min(initial, ...runs.map((r) => r.rssBefore))
  const peak = Math.max(...runs.map((r) => r.rssPeak))
  const growth = peak - baseline
  const complete = runs.every((r) => r.rows === count)
  const limitMb = 50
  const lines = [
    '',
    `jobsvc export bench: ${count} jobs per export (seeded by bulk INSERT into the jobs read model), client reading at ${opts.exportReadMbps} MB/s${complete ? '' : ' (INCOMPLETE)'}`,
    ...runs.map(
      (r) =>
        `  ${r.format.padEnd(5)} ${r.rows} rows, ${mb(r.bytes)} MB in ${(r.elapsedMs / 1000).toFixed(1)} s; service RSS before ${mb(r.rssBefore)} MB, peak ${mb(r.rssPeak)} MB (${r.samples} samples every 100 ms)`,
    ),
    `  service RSS: baseline ${mb(baseline)} MB, peak ${mb(peak)} MB, growth ${mb(growth)} MB (${growth < limitMb * 1024 * 1024 ? 'under' : 'OVER'} the ${limitMb} MB limit)`,
    '',
  ]
  const byFormat = Object.fromEntries(
    runs.flatMap((r) => [
      [`${r.format}_rows`, r.rows],
      [`${r.format}_mb`, mb(r.bytes)],
      [`${r.format}_s`, Math.round(r.elapsedMs / 100) / 10],
      [`${r.format}_peak_rss_mb`, mb(r.rssPeak)],
    ]),
  )
  const summary = { export_jobs: count, seeded: 'bulk insert into the jobs read model', read_mbps: opts.exportReadMbps, baseline_rss_mb: mb(baseline), peak_rss_mb: mb(peak), rss_growth_mb: mb(growth), ...byFormat }
  process.stdout.write(lines.join('\n') + JSON.stringify(summary) + '\n')
  return complete && growth < limitMb * 1024 * 1024
}

async function main(argv: string[]): Promise<boolean> {
  const opts = parseOptions(argv)
  const run = new AbortController()
  const timeout = setTimeout(() => run.abort(new RunStopped(`timed out after ${opts.timeoutMs / 1000} s`)), opts.timeoutMs)
  let interrupts = 0
  const onSigint = () => {
    if (++interrupts > 1) process.exit(130)
    run.abort(new RunStopped('interrupted'))
  }
  process.on('SIGINT', onSigint)
  process.on('SIGTERM', onSigint)

  const runId = randomBytes(4).toString('hex')
  const namespace = opts.spawn ? `jobsvc_bench_${runId}` : opts.namespace
  const dbUrl = new URL(opts.databaseUrl)
  dbUrl.pathname = `/${namespace}`
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: '0',
    JOBSVC_NAMESPACE: namespace ?? '',
    DATABASE_URL: dbUrl.toString(),
    NATS_URL: opts.natsUrl,
  }
  const receiver = opts.webhooks ? new WebhookReceiver() : null
  const receiverPort = receiver === null ? null : await receiver.listen()
  if (receiverPort !== null && opts.spawn) env.WEBHOOK_ALLOW_HOSTS = `127.0.0.1:${receiverPort}`
  let configPath: string | null = null
  if (opts.spawn && (!opts.metering || opts.retentionJobs !== null)) {
    configPath = join(tmpdir(), `jobsvc-bench-${runId}.json`)
    const tunables = {
      ...(opts.metering ? {} : { metering_enabled: false }),
      // The retention timed is this process's; the service's would share the backlog.
      ...(opts.retentionJobs === null ? {} : { retention_interval_ms: 86_400_000 }),
    }
    writeFileSync(configPath, JSON.stringify({ tunables }))
    env.JOBSVC_CONFIG = configPath
  }
  let service: SpawnedService | null = null
  let nats: NatsHandles | null = null
  let client: Client | null = null
  let tracker: ProjectionTracker | null = null
  let retention: RetentionBench | null = null
  try {
    if (namespace !== null) nats = await connectNats(opts.natsUrl, 'jobsvc-bench')
    let url = opts.url
    let apiKey = opts.apiKey
    const projects: Array<{ project_id: string; api_key: string }> = []
    if (opts.spawn) {
      process.stderr.write(`bench: starting a service in namespace ${namespace}\n`)
      service = await spawnService(env, opts.serviceLog, opts.serviceCpuProfileDir, opts.dev, run.signal)
      projects.push(await createProject(env, opts.dev))
      apiKey = projects[0]!.api_key
      url = service.url
    }
    client = new Client(url!, apiKey!, opts.producers + opts.workers * opts.capacity + 4)
    await awaitAccess(client, run.signal)
    if (opts.exportJobs !== null) {
      projects.push(await createProject(env, opts.dev))
      const second = new Client(url!, projects[1]!.api_key, 1)
      await awaitAccess(second, run.signal).finally(() => second.close())
      return await benchExport(opts, url!, service?.child.pid, dbUrl.toString(), projects)
    }
    if (opts.metricsJobs !== null) {
      const results = await benchMetrics({
        baseUrl: url!,
        apiKey: apiKey!,
        projectId: projects[0]!.project_id,
        databaseUrl: dbUrl.toString(),
        jobs: opts.metricsJobs,
        requests: opts.metricsRequests,
        log: (line) => process.stderr.write(`${line}\n`),
      })
      const worst = Math.max(...results.map((r) => r.p99_ms))
      process.stdout.write(JSON.stringify({ metrics_jobs: opts.metricsJobs, worst_p99_ms: worst, routes: results }) + '\n')
      return true
    }
    if (opts.retentionJobs !== null) {
      const config = loadConfig(env, { devSecretFile: opts.dev ? devSecretFileName : null })
      retention = await RetentionBench.prepare(config, opts.retentionJobs, service?.child.pid, run.signal, (line) => process.stderr.write(`${line}\n`))
    }
    tracker = nats !== null && namespace !== null ? new CheckpointTracker(nats, namespace) : new ProbeTracker(client, run.signal)
    process.stderr.write(`bench: ${opts.jobs} jobs against ${url}${retention === null ? '' : ', then retention of the backlog'}\n`)
    if (receiverPort !== null) {
      const sub = await client.request('POST', '/jobsvc/v1/webhooks', { url: `http://127.0.0.1:${receiverPort}/bench`, events: ['job.created'] })
      if (sub.status !== 201) throw new HttpError('webhook subscription', sub)
    }
    const newTracker = () => {
      tracker?.close()
      tracker = nats !== null && namespace !== null ? new CheckpointTracker(nats, namespace) : new ProbeTracker(client!, run.signal)
      return tracker
    }
    let idle: Results | null = null
    if (opts.idle !== null) {
      process.stderr.write(`bench: idle phase, ${opts.idle} jobs paced at ${idlePhase.rate}/s\n`)
      idle = await drive(client, { ...opts, ...idlePhase, jobs: opts.idle }, { batch: null, capacity: opts.capacity }, newTracker(), run.signal)
    }
    let results: Results | null = null
    let cpu: CpuBreakdown | null = null
    if (opts.jobs > 0) {
      const cpuMeter = new CpuMeter(service?.child.pid)
      cpuMeter.start()
      results = await drive(client, opts, { batch: null, capacity: opts.capacity }, newTracker(), run.signal)
      cpu = cpuMeter.stop()
    }
    if (results !== null && receiver !== null) await receiver.settle(results.jobs, 60_000)
    const webhooks = receiver?.summary() ?? null
    let batched: BatchedRun | null = null
    if (opts.batch !== null && results?.complete) {
      process.stderr.write(`bench: batched cycle, ${opts.jobs} jobs in batches of ${opts.batch}\n`)
      const batchMeter = new CpuMeter(service?.child.pid)
      batchMeter.start()
      const batchResults = await drive(client, opts, { batch: opts.batch, capacity: opts.batchCapacity }, newTracker(), run.signal)
      batched = { results: batchResults, cpu: batchMeter.stop() }
    }
    let retentionReport: { lines: string[]; summary: Record<string, number | null> } | null = null
    if (retention !== null) {
      process.stderr.write(`bench: retention of ${retention.seeded.jobs.length} expired jobs, nothing else running\n`)
      const purged = await retention.run()
      retentionReport = { lines: retention.describe(purged, false), summary: retention.summary(purged) }
    }
    if (results === null) {
      process.stdout.write([...(retentionReport?.lines ?? []), ''].join('\n') + JSON.stringify(retentionReport?.summary ?? {}) + '\n')
      return true
    }
    report(opts, results, webhooks, cpu, idle, batched, retentionReport)
    if (service !== null && service.child.exitCode !== null) process.stderr.write(`bench: the service died:\n${service.output()}\n`)
    const clean = (r: Results | null) => r === null || (r.complete && r.duplicateClaims === 0)
    return clean(idle) && clean(results) && clean(batched?.results ?? null)
  } finally {
    clearTimeout(timeout)
    tracker?.close()
    client?.close()
    receiver?.close()
    await retention?.close()
    if (service !== null) await stopService(service.child)
    if (opts.spawn && namespace !== null) {
      if (nats !== null) await deleteNamespace(nats.jsm, namespace).catch((err) => process.stderr.write(`bench: cleanup: ${err}\n`))
      await dropDatabase(dbUrl.toString()).catch((err) => process.stderr.write(`bench: cleanup: ${err}\n`))
    }
    await nats?.nc.close()
    if (configPath !== null) rmSync(configPath, { force: true })
    process.off('SIGINT', onSigint)
    process.off('SIGTERM', onSigint)
  }
}

main(process.argv.slice(2)).then(
  (ok) => {
    process.exitCode = ok ? 0 : 1
  },
  (err) => {
    // Expected failures (bad options, an unreachable or refusing service) need no stack trace.
    const expected = err instanceof ConfigError || err instanceof HttpError || err instanceof RunStopped || typeof err?.code === 'string' || err?.name === 'AbortError'
    process.stderr.write(`bench failed: ${expected ? err.message : String(err?.stack ?? err)}\n`)
    process.exitCode = err instanceof ConfigError ? 2 : 1
  },
)
