/**
 * `npm run bench`: drives a service over HTTP as its clients would. Producers create jobs;
 * workers poll with a capacity, then ack every claimed job as succeeded, acks in parallel
 * (cycle.ts says what each figure measures). The options and what each phase does are in
 * options.ts's usage.
 *
 * Progress goes to stderr once a second; a summary and, as the last line of stdout, one JSON
 * object with the headline numbers (report.ts).
 *
 * `--export-jobs N` measures something else: the spawned service's resident memory while it
 * streams a jobs export of N rows (export-memory.ts). So does `--metrics-jobs N`: the metrics
 * routes' latency with N jobs in the read model (metrics-routes.ts). `--feed-jobs N`: the event
 * feed's reading rate, page latency and live-tail lag (event-feed.ts). `--retention-jobs N` adds a
 * backlog of N expired jobs and times retention purging it (retention.ts). `--workflows N`: issue 30's
 * fan-out/fan-in against independent jobs, and a 100-parent child's activation (workflows.ts).
 */
import { benchAuditProofs } from './audit-proofs.ts'
import { connectNats, type NatsHandles } from '../../streams/connection.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { ConfigError } from '../../services/infrastructure/config.ts'
import type { CycleResults } from './cycle.ts'
import { benchBulkRetry } from './bulk-retry.ts'
import { burndownCapacity, enqueueInFlight, runBurndown } from './burndown.ts'
import { benchEventFeed } from './event-feed.ts'
import { benchExport } from './export-memory.ts'
import { awaitAccess, Client, HttpError } from './http-client.ts'
import { measureLogBytes } from './log-bytes.ts'
import { benchMetrics } from './metrics-routes.ts'
import { loadServiceConfig, parseOptions } from './options.ts'
import { runBatchedCycle, runIdlePhase, runSingleCycle, type PhaseContext } from './phases.ts'
import { PhaseTrackers } from './projection-trackers.ts'
import { report, writeReport, type ReportSection } from './report.ts'
import { RetentionBench } from './retention.ts'
import { RunStopped, startRunControl } from './run-control.ts'
import { prepareServiceEnvironment, removeServiceEnvironment } from './service-environment.ts'
import { createBenchProject, spawnService, stopService, type BenchProject, type SpawnedService } from './service-process.ts'
import { WebhookReceiver } from './webhook-receiver.ts'
import { benchWorkflows } from './workflows.ts'
import { runReplay } from './replay.ts'
import { benchScaleOut } from './scale-out.ts'

const log = (line: string) => process.stderr.write(`${line}\n`)

async function main(argv: string[]): Promise<boolean> {
  const opts = parseOptions(argv)
  const run = startRunControl(opts.timeoutMs)
  const receiver = opts.webhooks ? new WebhookReceiver() : null
  const receiverPort = receiver === null ? null : await receiver.listen()
  const environment = prepareServiceEnvironment(opts, receiverPort)
  const { namespace, env } = environment
  let service: SpawnedService | null = null
  let nats: NatsHandles | null = null
  let client: Client | null = null
  let trackers: PhaseTrackers | null = null
  let retention: RetentionBench | null = null
  try {
    if (namespace !== null) nats = await connectNats(opts.natsUrl, 'jobsvc-bench')
    if (opts.scaleOut && nats !== null && namespace !== null) {
      const load = { jobs: opts.burndownJobs ?? 20_000, workers: opts.workers, env, databaseUrl: environment.databaseUrl, namespace, dev: opts.dev }
      const section = await benchScaleOut(load, nats, run.signal, log)
      writeReport([...section.lines, ''], section.summary)
      return true
    }
    let url = opts.url
    let apiKey = opts.apiKey
    const projects: BenchProject[] = []
    if (opts.spawn) {
      log(`bench: starting a service in namespace ${namespace}`)
      service = await spawnService(env, opts.serviceLog, opts.serviceCpuProfileDir, opts.dev, run.signal)
      projects.push(await createBenchProject(env, opts.dev))
      apiKey = projects[0]!.api_key
      url = service.url
    }
    client = new Client(url!, apiKey!, opts.producers + opts.workers * opts.capacity + 4)
    await awaitAccess(client, run.signal)
    if (opts.exportJobs !== null) {
      projects.push(await createBenchProject(env, opts.dev))
      const second = new Client(url!, projects[1]!.api_key, 1)
      await awaitAccess(second, run.signal).finally(() => second.close())
      return await benchExport(opts, url!, service?.child.pid, environment.databaseUrl, projects)
    }
    if (opts.metricsJobs !== null) {
      const results = await benchMetrics({
        baseUrl: url!,
        apiKey: apiKey!,
        projectId: projects[0]!.project_id,
        databaseUrl: environment.databaseUrl,
        jobs: opts.metricsJobs,
        requests: opts.metricsRequests,
        log,
      })
      const worst = Math.max(...results.map((r) => r.p99_ms))
      process.stdout.write(JSON.stringify({ metrics_jobs: opts.metricsJobs, worst_p99_ms: worst, routes: results }) + '\n')
      return true
    }
    if (opts.auditLeaves !== null) {
      const result = await benchAuditProofs({
        baseUrl: url!,
        apiKey: apiKey!,
        projectId: projects[0]!.project_id,
        databaseUrl: environment.databaseUrl,
        leaves: opts.auditLeaves,
        log,
      })
      process.stdout.write(JSON.stringify(result) + '\n')
      return true
    }
    if (opts.feedJobs !== null) {
      const result = await benchEventFeed({
        config: loadServiceConfig(env, opts.dev),
        baseUrl: url!,
        project: projects[0]!,
        jobs: opts.feedJobs,
        signal: run.signal,
        log,
      })
      process.stdout.write(JSON.stringify(result) + '\n')
      return true
    }
    if (opts.workflows !== null) {
      const handles = nats
      const logState =
        handles === null || namespace === null
          ? null
          : async () => {
              const { state } = await handles.jsm.streams.info(eventsStreamName(namespace))
              return { messages: state.messages, bytes: state.bytes }
            }
      const result = await benchWorkflows(client, opts.workflows, log, { logState, servicePid: service?.child.pid })
      process.stdout.write(JSON.stringify(result) + '\n')
      return true
    }
    if (opts.bulkRetry !== null) {
      trackers = new PhaseTrackers(nats, namespace, client, run.signal)
      const result = await benchBulkRetry({
        config: loadServiceConfig(env, opts.dev),
        client,
        opts,
        projectId: projects[0]!.project_id,
        jobs: opts.bulkRetry,
        trackers,
        signal: run.signal,
        log,
      })
      process.stdout.write(JSON.stringify(result) + '\n')
      return true
    }
    if (opts.retentionJobs !== null) {
      retention = await RetentionBench.prepare(loadServiceConfig(env, opts.dev), opts.retentionJobs, service?.child.pid, run.signal, log)
    }
    // First, while nothing else appends (no webhook subscription yet): what a job and a heartbeat store.
    const logBytes = nats === null || namespace === null ? null : await measureLogBytes(client, nats, namespace, run.signal)
    log(`bench: ${opts.jobs} jobs against ${url}${retention === null ? '' : ', then retention of the backlog'}`)
    await receiver?.subscribe(client)
    trackers = new PhaseTrackers(nats, namespace, client, run.signal)
    const phases: PhaseContext = { client, opts, servicePid: service?.child.pid, trackers, signal: run.signal }
    const idle = opts.idle === null ? null : await runIdlePhase(phases, opts.idle)
    const single = opts.jobs > 0 ? await runSingleCycle(phases) : null
    if (single !== null && receiver !== null) await receiver.settle(single.result.jobs, 60_000)
    const webhooks = receiver?.summary() ?? null
    const batched = opts.batch !== null && single?.result.complete ? await runBatchedCycle(phases, opts.batch) : null
    let burndown: ReportSection | null = null
    if (opts.burndownJobs !== null) {
      const drainer = new Client(url!, apiKey!, enqueueInFlight + opts.workers * burndownCapacity + 4)
      try {
        burndown = await runBurndown(drainer, { jobs: opts.burndownJobs, workers: opts.workers }, service?.child.pid, run.signal)
      } finally {
        drainer.close()
      }
    }
    let replay: ReportSection | null = null
    if (opts.replayEvents !== null && nats !== null && namespace !== null) {
      replay = await runReplay(nats, { events: opts.replayEvents, workers: opts.workers, namespace, env, dev: opts.dev, url: url! }, run.signal, log)
    }
    let retentionReport: ReportSection | null = null
    if (retention !== null) {
      log(`bench: retention of ${retention.seeded.jobs.length} expired jobs, nothing else running`)
      const purged = await retention.run()
      retentionReport = { lines: retention.describe(purged, false), summary: retention.summary(purged) }
    }
    if (single === null) {
      const sections = [logBytes, retentionReport].filter((s) => s !== null)
      writeReport([...sections.flatMap((s) => s.lines), ''], Object.assign({}, ...sections.map((s) => s.summary)))
      return true
    }
    report(opts, single, webhooks, idle, batched, retentionReport, logBytes, burndown, replay)
    if (service !== null && service.child.exitCode !== null) log(`bench: the service died:\n${service.output()}`)
    const isClean = (r: CycleResults | null) => r === null || (r.complete && r.duplicateClaims === 0)
    return isClean(idle) && isClean(single.result) && isClean(batched?.result ?? null)
  } finally {
    trackers?.close()
    client?.close()
    receiver?.close()
    await retention?.close()
    if (service !== null) await stopService(service.child)
    await removeServiceEnvironment(environment, opts.spawn, nats)
    await nats?.nc.close()
    run.release()
  }
}

main(process.argv.slice(2)).then(
  (ok) => {
    process.exitCode = ok ? 0 : 1
  },
  (err) => {
    // Expected failures (bad options, an unreachable or refusing service) need no stack trace.
    const expected =
      err instanceof ConfigError ||
      err instanceof HttpError ||
      err instanceof RunStopped ||
      typeof err?.code === 'string' ||
      err?.name === 'AbortError'
    process.stderr.write(`bench failed: ${expected ? err.message : String(err?.stack ?? err)}\n`)
    process.exitCode = err instanceof ConfigError ? 2 : 1
  },
)
