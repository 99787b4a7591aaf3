import { performance } from 'node:perf_hooks'
import type { Client, Reply } from './http-client.ts'
import { withCpuMeter } from './cpu.ts'
import { percentileMs } from './percentiles.ts'

/**
 * `npm run bench -- --spawn --workflows N`: issue 30's targets, measured over HTTP as clients
 * and workers would.
 * - Fan-out/fan-in: a root, 1,000 children of it, and their fan-in. A job has at most 100
 *   parents, so the fan-in is ten jobs of 100 parents each and one sink of those ten: 1,012 jobs
 *   (the issue's 1,002 plus the ten in between). Created as one graph batch (refs), and again as
 *   two (as a client whose batches hold 1,000 would: the fan-ins name 999 children by id), run by
 *   the same workers as the baseline: 1,012 independent jobs. Each from the first create to the
 *   last ack. Alternated N times, after a pair that warms the service up.
 * - Activation: a child of 100 parents; the time from the answer of its last parent's ack to the
 *   answer of a poll (waiting on the child's queue all along) that hands it out. N times, p50/p99.
 */

const workers = 8
const capacity = 10
const fanOut = 1_000
/** The issue's cap on one job's parents. */
const maxParents = 100
const activationParents = 100

export interface WorkflowResult {
  workflow_runs: number
  independent_ms: number[]
  fan_out_in_ms: number[]
  /** fan-out/fan-in time over the independent jobs' time, per pair. */
  fan_ratio: number[]
  /** The same graph created in two batches, and its time over the independent jobs'. */
  fan_split_ms: number[]
  fan_split_ratio: number[]
  activation_p50_ms: number | null
  activation_p99_ms: number | null
}

async function ok(what: string, reply: Promise<Reply>, status = 200): Promise<any> {
  const r = await reply
  if (r.status !== status) throw new Error(`${what} answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`)
  return r.body
}

/** Creates the items in batches of at most 1,000; resolves to the created ids in order. */
async function createBatch(client: Client, jobs: unknown[]): Promise<string[]> {
  const body = await ok('batch create', client.request('POST', '/jobsvc/v1/jobs/batch', { jobs }))
  const results = body.results as Array<{ status: number; body?: { id: string }; error?: unknown }>
  const failed = results.find((r) => r.status !== 201)
  if (failed !== undefined) throw new Error(`a batch item answered ${failed.status}: ${JSON.stringify(failed.error)}`)
  return results.map((r) => r.body!.id)
}

/** When the last job of each job type was acked (performance.now()), for the run's breakdown. */
type LastAcks = Map<string, number>

/** Request latencies of a run's workers, for its breakdown. */
interface WorkerTimings {
  pollMs: number[]
  ackMs: number[]
}

const timingsLine = (t: WorkerTimings) =>
  `polls p50 ${percentileMs(t.pollMs, 50)} ms (${t.pollMs.length}), acks p50 ${percentileMs(t.ackMs, 50)} p99 ${percentileMs(t.ackMs, 99)} ms`

/** Workers poll `queue` and ack every job until `total` jobs were acked; resolves when they have. */
async function work(client: Client, queue: string, total: number, lastAcks: LastAcks, timings: WorkerTimings): Promise<number> {
  let acked = 0
  let last = 0
  const worker = async (w: number) => {
    while (acked < total) {
      const sent = performance.now()
      const polled = await ok(
        'poll',
        client.request('POST', '/jobsvc/v1/workers/poll', { worker_id: `wf-${w}`, queues: [queue], capacity, wait_seconds: 1 }),
      )
      if (polled.jobs.length > 0) timings.pollMs.push(performance.now() - sent)
      await Promise.all(
        (polled.jobs as Array<{ id: string; job_type: string }>).map(async (job) => {
          const sent = performance.now()
          const reply = await client.request('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: `wf-${w}`, status: 'succeeded' })
          timings.ackMs.push(reply.at - sent)
          if (reply.status !== 200) throw new Error(`ack answered ${reply.status}`)
          acked++
          last = Math.max(last, reply.at)
          lastAcks.set(job.job_type, Math.max(lastAcks.get(job.job_type) ?? 0, reply.at))
        }),
      )
    }
  }
  await Promise.all(Array.from({ length: workers }, (_, w) => worker(w)))
  return last
}

/** 1,012 independent jobs on a queue of their own: first create to last ack, in ms. */
async function runIndependent(client: Client, run: number, log: (line: string) => void): Promise<number> {
  const queue = `wf-ind-${run}-${Date.now()}`
  const total = 1 + fanOut + fanOut / maxParents + 1
  const started = performance.now()
  const timings: WorkerTimings = { pollMs: [], ackMs: [] }
  const working = work(client, queue, total, new Map(), timings)
  const item = () => ({ job_type: 'wf', payload: {}, queue })
  await createBatch(client, Array.from({ length: fanOut }, item))
  await createBatch(client, Array.from({ length: total - fanOut }, item))
  const end = await working
  log(`bench: independent: ${timingsLine(timings)}`)
  return end - started
}

/**
 * The root, its 1,000 children, ten fan-ins of 100 and the sink: first create to the sink's ack,
 * in ms. Created whole in one graph batch, or `split` as two (the root and 999 children, then the
 * last child, the fan-ins naming the first 999 by id and the sink), as a client whose batches
 * hold 1,000 would.
 */
async function runFanOutIn(client: Client, run: number, log: (line: string) => void, split: boolean): Promise<number> {
  const what = split ? 'fan-out/fan-in in two batches' : 'fan-out/fan-in'
  const queue = `wf-fan-${run}-${Date.now()}`
  const total = 1 + fanOut + fanOut / maxParents + 1
  const started = performance.now()
  const lastAcks: LastAcks = new Map()
  const timings: WorkerTimings = { pollMs: [], ackMs: [] }
  const working = work(client, queue, total, lastAcks, timings)
  const item = (type: string, extra: Record<string, unknown>) => ({ job_type: `wf-${type}`, payload: {}, queue, ...extra })
  let firstIds: string[]
  let secondIds: string[] = []
  let createdFirst: number
  let createdSecond: number | null = null
  if (!split) {
    // The whole graph in one batch, every parent named by ref.
    const children = Array.from({ length: fanOut }, (_, i) => item('child', { ref: `c${i}`, depends_on_refs: ['root'] }))
    const fanIns = Array.from({ length: fanOut / maxParents }, (_, k) =>
      item('in', { ref: `in${k}`, depends_on_refs: Array.from({ length: maxParents }, (_, i) => `c${k * maxParents + i}`) }),
    )
    const sink = item('sink', { depends_on_refs: fanIns.map((_, k) => `in${k}`) })
    const ids = await createBatch(client, [item('root', { ref: 'root' }), ...children, ...fanIns, sink])
    createdFirst = performance.now()
    firstIds = ids.slice(0, 1)
    secondIds = [ids[fanOut]!, ...ids.slice(fanOut + 1)]
  } else {
    // Batch 1: the root and 999 children by ref.
    firstIds = await createBatch(client, [
      item('root', { ref: 'root' }),
      ...Array.from({ length: fanOut - 1 }, () => item('child', { depends_on_refs: ['root'] })),
    ])
    createdFirst = performance.now()
    // Batch 2: the last child, the ten fan-ins (by id, each an attach to a running child, and by ref) and the sink.
    const children = [...firstIds.slice(1)]
    const second = [item('child', { ref: 'last', depends_on: [firstIds[0]!] })]
    for (let k = 0; k < fanOut / maxParents; k++) {
      const parents = children.slice(k * maxParents, (k + 1) * maxParents)
      const last = parents.length < maxParents
      second.push(item('in', { ref: `in${k}`, depends_on: parents, ...(last ? { depends_on_refs: ['last'] } : {}) }))
    }
    second.push(item('sink', { depends_on_refs: Array.from({ length: fanOut / maxParents }, (_, k) => `in${k}`) }))
    secondIds = await createBatch(client, second)
    createdSecond = performance.now()
  }
  const root = firstIds[0]!
  const end = await working
  const at = (type: string) => `${((lastAcks.get(`wf-${type}`) ?? 0) - started).toFixed(0)}`
  log(
    `bench: ${what}: created at ${(createdFirst - started).toFixed(0)} ms${createdSecond === null ? '' : `, its second batch at ${(createdSecond - started).toFixed(0)} ms`}; last acks: root ${at('root')}, children ${at('child')}, fan-ins ${at('in')}, sink ${at('sink')} ms`,
  )
  log(`bench: ${what}: ${timingsLine(timings)}`)
  log(`bench: ${what}, the service's clock: ${await fanInTimeline(client, root, secondIds.slice(1))}`)
  return end - started
}

/** Times in a job's history, by event type (the first of each), in ms of the service's clock. */
async function historyTimes(client: Client, jobId: string): Promise<Map<string, number[]>> {
  const types = 'job_created,job_parent_settled,job_activated,job_claimed,job_succeeded'
  const times = new Map<string, number[]>()
  for (let cursor: string | null = null; ;) {
    const page = await ok(
      'history',
      client.request('GET', `/jobsvc/v1/jobs/${jobId}/history?limit=100&types=${types}${cursor === null ? '' : `&cursor=${cursor}`}`),
    )
    for (const e of page.data as Array<{ type: string; time: string }>) times.set(e.type, [...(times.get(e.type) ?? []), Date.parse(e.time)])
    if (!page.has_more) return times
    cursor = page.next_cursor
  }
}

/**
 * Where a fan-out/fan-in's time went, from the jobs' histories: the root's end, and for the
 * fan-ins (the last of them) and the sink their first and last settlement, activation, claim and
 * end, each in ms after the root's job_created.
 */
async function fanInTimeline(client: Client, root: string, fanIns: string[]): Promise<string> {
  const rootTimes = await historyTimes(client, root)
  const zero = rootTimes.get('job_created')![0]!
  const rel = (t: number | undefined) => (t === undefined ? '-' : `${t - zero}`)
  const steps = async (id: string) => {
    const h = await historyTimes(client, id)
    const settled = h.get('job_parent_settled') ?? []
    return `settled ${rel(settled[0])}..${rel(settled.at(-1))} (${settled.length}), activated ${rel(h.get('job_activated')?.[0])}, claimed ${rel(h.get('job_claimed')?.[0])}, succeeded ${rel(h.get('job_succeeded')?.[0])}`
  }
  const ins = await Promise.all(fanIns.slice(0, -1).map(async (id) => ({ id, h: await historyTimes(client, id) })))
  const lastIn = ins.reduce((a, b) => ((a.h.get('job_activated')?.[0] ?? 0) >= (b.h.get('job_activated')?.[0] ?? 0) ? a : b))
  return `root claimed ${rel(rootTimes.get('job_claimed')?.[0])}, succeeded ${rel(rootTimes.get('job_succeeded')?.[0])}; last fan-in ${await steps(lastIn.id)}; sink ${await steps(fanIns.at(-1)!)}`
}

/** A child of 100 parents: from the answer of the last parent's ack to the poll answer that hands the child out, in ms. */
async function measureActivation(client: Client, run: number): Promise<number> {
  const queue = `wf-act-${run}-${Date.now()}`
  const parents = await createBatch(
    client,
    Array.from({ length: activationParents }, () => ({ job_type: 'wf', payload: {}, queue: `${queue}-p` })),
  )
  const [child] = await createBatch(client, [{ job_type: 'wf', payload: {}, queue, depends_on: parents }])
  const claimed: string[] = []
  while (claimed.length < activationParents) {
    const polled = await ok(
      'poll',
      client.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wf-p', queues: [`${queue}-p`], capacity: 50, wait_seconds: 1 }),
    )
    claimed.push(...(polled.jobs as Array<{ id: string }>).map((j) => j.id))
  }
  const ack = (id: string) => ok('ack', client.request('POST', '/jobsvc/v1/workers/ack', { job_id: id, worker_id: 'wf-p', status: 'succeeded' }))
  await Promise.all(claimed.slice(0, -1).map(ack))
  // The child's poll waits before the last ack is sent.
  const waiting = client.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wf-c', queues: [queue], capacity: 1, wait_seconds: 10 })
  await new Promise((r) => setTimeout(r, 50))
  const lastAck = await client.request('POST', '/jobsvc/v1/workers/ack', { job_id: claimed.at(-1)!, worker_id: 'wf-p', status: 'succeeded' })
  const handed = await waiting
  const jobs = (handed.body as { jobs: Array<{ id: string }> }).jobs
  if (jobs[0]?.id !== child) throw new Error(`the child's poll answered ${JSON.stringify(handed.body).slice(0, 200)}`)
  await ok('ack', client.request('POST', '/jobsvc/v1/workers/ack', { job_id: child, worker_id: 'wf-c', status: 'succeeded' }))
  return handed.at - lastAck.at
}

/** The events stream's size, to say what a run appended; null against --url. */
export type LogState = (() => Promise<{ messages: number; bytes: number }>) | null

/** Where the bench reads what a run cost: the events stream's size and the spawned service's process. */
export interface RunCosts {
  logState: LogState
  servicePid: number | undefined
}

/** Runs `step` and logs the messages and bytes it appended to the log and the CPU it took, where they can be read. */
async function measured<T>(costs: RunCosts, what: string, log: (line: string) => void, step: () => Promise<T>): Promise<T> {
  const before = await costs.logState?.()
  const { result, cpu } = await withCpuMeter(costs.servicePid, step)
  const after = await costs.logState?.()
  const parts: string[] = []
  if (before !== undefined && after !== undefined) {
    parts.push(`appended ${after.messages - before.messages} messages, ${((after.bytes - before.bytes) / 1e6).toFixed(2)} MB`)
  }
  if (cpu !== null) {
    const ms = (s: number | null) => (s === null ? 'n/a' : `${Math.round(s * 1000)} ms`)
    parts.push(
      `CPU: service ${ms(cpu.seconds.service)}, nats-server ${ms(cpu.seconds['nats-server'])}, postgres ${ms(cpu.seconds.postgres)}, machine ${ms(cpu.machineSeconds)}`,
    )
  }
  if (parts.length > 0) log(`bench: ${what}: ${parts.join('; ')}`)
  return result
}

export async function benchWorkflows(
  client: Client,
  runs: number,
  log: (line: string) => void,
  costs: RunCosts = { logState: null, servicePid: undefined },
): Promise<WorkflowResult> {
  const independent: number[] = []
  const fan: number[] = []
  // A first pair warms the service (JIT, pools, the ready index's lanes); the first measured
  // independent run was otherwise twice as slow as the next ones, and flattered its pair's ratio.
  await runIndependent(client, -1, () => undefined)
  await runFanOutIn(client, -1, () => undefined, false)
  const split: number[] = []
  for (let run = 0; run < runs; run++) {
    independent.push(await measured(costs, 'independent', log, () => runIndependent(client, run, log)))
    fan.push(await measured(costs, 'fan-out/fan-in', log, () => runFanOutIn(client, run, log, false)))
    split.push(await measured(costs, 'fan-out/fan-in in two batches', log, () => runFanOutIn(client, run, log, true)))
    log(
      `bench: workflows run ${run + 1}: independent ${independent.at(-1)!.toFixed(0)} ms, fan-out/fan-in ${fan.at(-1)!.toFixed(0)} ms, in two batches ${split.at(-1)!.toFixed(0)} ms`,
    )
  }
  const activations: number[] = []
  for (let run = 0; run < Math.max(20, runs * 10); run++) activations.push(await measureActivation(client, run))
  return {
    workflow_runs: runs,
    independent_ms: independent.map(Math.round),
    fan_out_in_ms: fan.map(Math.round),
    fan_ratio: fan.map((f, i) => Math.round((f / independent[i]!) * 100) / 100),
    fan_split_ms: split.map(Math.round),
    fan_split_ratio: split.map((f, i) => Math.round((f / independent[i]!) * 100) / 100),
    activation_p50_ms: percentileMs(activations, 50),
    activation_p99_ms: percentileMs(activations, 99),
  }
}
