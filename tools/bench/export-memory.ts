import { performance } from 'node:perf_hooks'
import { openSql } from '../../projections/database.ts'
import type { Options } from './options.ts'
import { writeReport } from './report.ts'
import { idleResidentBytes, residentBytes } from './resident-memory.ts'
import type { BenchProject } from './service-process.ts'
import { readExport, type ExportRead } from './slow-export-reader.ts'

const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10

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

interface ExportMeasure extends ExportRead {
  format: 'jsonl' | 'csv'
  rssBefore: number
  rssPeak: number
  samples: number
}

/** One export read to its end while the service's RSS is sampled every 100 ms. */
async function measureExport(
  base: string,
  apiKey: string,
  pid: number | undefined,
  format: 'jsonl' | 'csv',
  bytesPerSecond: number,
  window: { from: Date; until: Date },
): Promise<ExportMeasure> {
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
export async function benchExport(
  opts: Options,
  base: string,
  pid: number | undefined,
  databaseUrl: string,
  projects: BenchProject[],
): Promise<boolean> {
  const count = opts.exportJobs!
  const newest = new Date()
  const window = { from: new Date(newest.getTime() - count - 3_600_000), until: new Date(newest.getTime() + 60_000) }
  const seedStarted = performance.now()
  process.stderr.write(`bench: seeding ${count} jobs in each of ${projects.length} projects (bulk INSERT into the jobs read model)\n`)
  await seedJobs(
    databaseUrl,
    projects.map((p) => p.project_id),
    count,
    newest,
  )
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
  const summary = {
    export_jobs: count,
    seeded: 'bulk insert into the jobs read model',
    read_mbps: opts.exportReadMbps,
    baseline_rss_mb: mb(baseline),
    peak_rss_mb: mb(peak),
    rss_growth_mb: mb(growth),
    ...byFormat,
  }
  writeReport(lines, summary)
  return complete && growth < limitMb * 1024 * 1024
}
