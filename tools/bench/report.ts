/**
 * What a run prints to stdout: each figure on its own line, then, as the last line, one JSON
 * object with the headline numbers (the README's "Benchmark" and docs/benchmark.md name its keys).
 */
import { describeCpu, type Metered } from './cpu.ts'
import type { CycleResults } from './cycle.ts'
import type { Options } from './options.ts'
import { percentileMs } from './percentiles.ts'
import { idlePhase } from './phases.ts'
import type { WebhookReceiver } from './webhook-receiver.ts'

/** A measurement's lines for the report and its keys for the JSON line. */
export interface ReportSection {
  lines: string[]
  summary: Record<string, number | null>
}

/** The lines, then the JSON line; `lines` ends with '' so that the JSON starts a line of its own. */
export function writeReport(lines: readonly string[], summary: Record<string, unknown>): void {
  process.stdout.write(lines.join('\n') + JSON.stringify(summary) + '\n')
}

function jobsPerS(r: CycleResults): number | null {
  return r.complete && r.elapsedMs !== null ? Math.round((r.jobs / r.elapsedMs) * 1000 * 10) / 10 : null
}

const ms = (v: number | null) => (v === null ? 'n/a' : `${v} ms`)

function describePercentiles(values: readonly number[]): string {
  return `p50 ${ms(percentileMs(values, 50))}  p99 ${ms(percentileMs(values, 99))}`
}

/** A cycle's lines after its heading: rate, latencies, lag, polls, the client's CPU. */
function describeCycle(r: CycleResults, createWhat: string): string[] {
  return [
    `  end to end (first create -> last ack projected): ${r.elapsedMs === null ? 'n/a' : `${(r.elapsedMs / 1000).toFixed(2)} s`}, ${jobsPerS(r) ?? 'n/a'} jobs/s`,
    `  create latency      ${describePercentiles(r.createLatencies)}  (${r.createLatencies.length} ${createWhat})`,
    `  created -> claimed  ${describePercentiles(r.claimLatencies)}  (${r.claimLatencies.length} claims)`,
    `  projection lag      ${describePercentiles(r.lags)}  (${r.lags.length} samples; ${r.lagMethod})`,
    `  acked ${r.acked}/${r.jobs}; jobs claimed twice: ${r.duplicateClaims}; polls ${r.polls} (${r.emptyPolls} empty, ${r.polls === r.emptyPolls ? 0 : (r.acked / (r.polls - r.emptyPolls)).toFixed(1)} jobs per non-empty poll)`,
    `  bench client CPU: ${(r.clientCpuMs / 1000).toFixed(1)} s over ${(r.wallMs / 1000).toFixed(1)} s (${Math.round((r.clientCpuMs / r.wallMs) * 100)}% of one core)`,
  ]
}

/** The CPU per acknowledged job, when /proc was there to measure it and any job was acknowledged. */
function describeCycleCpu({ result, cpu }: Metered<CycleResults>): string[] {
  return cpu === null || result.acked === 0 ? [] : describeCpu(cpu, result.acked)
}

/** A cycle's latency figures for the JSON line. */
function latencySummary(r: CycleResults) {
  return {
    create_p50_ms: percentileMs(r.createLatencies, 50),
    create_p99_ms: percentileMs(r.createLatencies, 99),
    claim_p50_ms: percentileMs(r.claimLatencies, 50),
    claim_p99_ms: percentileMs(r.claimLatencies, 99),
    projection_lag_p99_ms: percentileMs(r.lags, 99),
  }
}

function withPrefix(prefix: string, figures: Record<string, number | null>): Record<string, number | null> {
  return Object.fromEntries(Object.entries(figures).map(([key, value]) => [`${prefix}${key}`, value]))
}

/** The throughput run's report: the idle phase, the single-request cycle, the batched cycle, the burn-down, retention, then the log's bytes. */
export function report(
  opts: Options,
  single: Metered<CycleResults>,
  webhooks: ReturnType<WebhookReceiver['summary']> | null,
  idle: CycleResults | null,
  batched: Metered<CycleResults> | null,
  retention: ReportSection | null,
  logBytes: ReportSection | null,
  burndown: ReportSection | null = null,
  replay: ReportSection | null = null,
): void {
  const r = single.result
  const b = batched?.result
  const summary = {
    ...(opts.flowKeys === null ? {} : { flow_keys: opts.flowKeys, flow_limit: opts.flowLimit }),
    jobs_per_s: jobsPerS(r),
    ...latencySummary(r),
    ...(idle === null
      ? {}
      : {
          idle_claim_p50_ms: percentileMs(idle.claimLatencies, 50),
          idle_claim_p99_ms: percentileMs(idle.claimLatencies, 99),
          idle_create_p50_ms: percentileMs(idle.createLatencies, 50),
        }),
    ...(webhooks ?? {}),
    ...(b === undefined ? {} : { batch_jobs_per_s: jobsPerS(b), batch_size: opts.batch, ...withPrefix('batch_', latencySummary(b)) }),
    ...(burndown?.summary ?? {}),
    ...(replay?.summary ?? {}),
    ...(retention?.summary ?? {}),
    ...(logBytes?.summary ?? {}),
  }
  const lines = [
    ...(idle === null
      ? []
      : [
          '',
          `jobsvc bench, idle: ${idle.jobs} jobs paced at ${idlePhase.rate}/s, ${idlePhase.producers} producers, ${idlePhase.workers} workers${idle.complete ? '' : ' (INCOMPLETE)'}`,
          `  idle claim: created -> claimed ${describePercentiles(idle.claimLatencies)}; create p50 ${ms(percentileMs(idle.createLatencies, 50))}`,
        ]),
    '',
    `jobsvc bench: ${r.jobs} jobs, ${opts.producers} producers${opts.rate === null ? '' : ` paced at ${opts.rate}/s`}, ${opts.workers} workers x capacity ${opts.capacity}${opts.priorities ? ', random priorities' : ''}${opts.pausedQueue ? ', a paused queue polled beside' : ''}${opts.flowKeys === null ? '' : `, ${opts.flowKeys} concurrency keys at a per-key limit of ${opts.flowLimit}`}${r.complete ? '' : ' (INCOMPLETE)'}`,
    ...describeCycle(r, 'creates'),
    ...(webhooks
      ? [
          `  webhooks: ${webhooks.webhook_deliveries} job.created delivered, ${webhooks.webhook_deliveries_per_s ?? 'n/a'}/s, lag p50 ${ms(webhooks.webhook_lag_p50_ms)} p99 ${ms(webhooks.webhook_lag_p99_ms)}`,
        ]
      : []),
    ...describeCycleCpu(single),
    ...(b === undefined
      ? []
      : [
          '',
          `jobsvc bench, batched: ${b.jobs} jobs, ${opts.producers} producers creating ${opts.batch} per request, ${opts.workers} workers x capacity ${opts.batchCapacity} acking each poll's jobs in one request${b.complete ? '' : ' (INCOMPLETE)'}`,
          `  batch cycle: ${jobsPerS(b) ?? 'n/a'} jobs/s`,
          ...describeCycle(b, `batch creates of up to ${opts.batch}`),
          ...describeCycleCpu(batched!),
        ]),
    ...(burndown?.lines ?? []),
    ...(replay?.lines ?? []),
    ...(retention?.lines ?? []),
    ...(logBytes?.lines ?? []),
    '',
  ]
  writeReport(lines, summary)
}
