import { pipeline, Readable } from 'node:stream'
import { stringify } from 'csv-stringify'
import type { FastifyReply } from 'fastify'
import type { PendingQuery } from 'postgres'
import type { Sql } from '../../../projections/database.ts'
import { jobList, type ExportedJobRow } from '../../../projections/job-list.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { ExportAttestation } from '../../use-cases/audit/export-attestation.ts'
import { invalidFormat, invalidFrom, invalidRange, invalidRequest, invalidUntil, rangeTooLarge } from './errors.ts'

/** Spec, Exports: windows of at most 90 days, one export per project per 60 s. */
export const maxWindowMs = 90 * 24 * 60 * 60 * 1000
export const exportCooldownMs = 60_000
/** Rows fetched from the database cursor at a time: memory holds about one such batch, whatever the window. */
const cursorRows = 500

export interface ExportWindow {
  from: Date
  until: Date
  format: 'jsonl' | 'csv'
}

/**
 * A window bound as the exports and the metrics read it: an ISO 8601 date-time, else 400
 * `invalid_from` / `invalid_until` (a missing bound is passed as '').
 */
export function windowBound(value: string, bound: 'from' | 'until'): Date {
  const at = /^\d{4}-\d{2}-\d{2}/.test(value) ? Date.parse(value) : Number.NaN
  if (!Number.isFinite(at)) throw bound === 'from' ? invalidFrom() : invalidUntil()
  return new Date(at)
}

/** 400 `invalid_range` unless `from` is before `until`. */
export function assertOrderedWindow(from: Date, until: Date): void {
  if (from.getTime() >= until.getTime()) throw invalidRange()
}

/** The spec's window rules, in its order of codes. */
export function parseExportWindow(query: { from?: string | undefined; until?: string | undefined; format?: string | undefined }): ExportWindow {
  const from = windowBound(query.from ?? '', 'from')
  const until = windowBound(query.until ?? '', 'until')
  assertOrderedWindow(from, until)
  if (until.getTime() - from.getTime() > maxWindowMs) throw rangeTooLarge()
  const format = query.format ?? 'jsonl'
  if (format !== 'jsonl' && format !== 'csv') throw invalidFormat()
  return { from, until, format }
}

/** How one kind of export writes a row: a JSONL line (newline included) and a CSV record under `csvColumns`. */
export interface ExportLayout<Row> {
  /** The file is `svc-<name>-<project_id>-<YYYY-MM-DD>.<jsonl|csv>`. */
  name: string
  jsonLine(row: Row): string
  csvColumns: readonly string[]
  csvRecord(row: Row): unknown[]
}

/**
 * An attested JSONL export (`attest=true`, docs/audit.md): each batch of rows becomes its lines
 * with the leaves behind them (read from the log, so asynchronous), and a manifest line ends it.
 */
export interface AttestedLayout<Row> {
  lines(rows: readonly Row[]): Promise<string[]>
  manifest(): Promise<string>
}

/** `attest=true` on an export: JSONL only (a CSV cell has no place for a leaf). */
export function wantsAttestation(attest: string | undefined, window: ExportWindow): boolean {
  if (attest === undefined || attest === 'false') return false
  if (attest !== 'true') throw invalidRequest('attest must be true or false')
  if (window.format !== 'jsonl') throw invalidFormat()
  return true
}

/**
 * OWASP's CSV injection rule: a spreadsheet runs a cell that starts with `=`, `+`, `-`, `@`, a
 * tab or a carriage return as a formula (`=HYPERLINK(…)` in a job type or an error message).
 * Such a text cell gets a leading `'`, which spreadsheets show as text and do not display;
 * numbers and the JSON columns (which start with `{`) are never touched. The JSONL export keeps
 * every value exactly.
 */
export function neutralizeFormula(cell: unknown): unknown {
  return typeof cell === 'string' && /^[=+\-@\t\r]/.test(cell) ? `'${cell}` : cell
}

/**
 * The rows of `query`, rendered by `render`, as an object stream that pulls the next batch from
 * the database only once its reader has taken the last one (stream back-pressure).
 *
 * It uses postgres.js's callback cursor, not its async iterator: with the iterator, V8's heap
 * profiler showed every row surviving young-generation GCs and being promoted, to wait in the old
 * generation for a full GC (an export of 200,000 jobs grew the service's RSS by 130 MB); with the
 * callback the rows die young (`npm run bench -- --spawn --export-jobs 200000`).
 */
function cursorStream<Row extends object>(
  sql: Sql,
  query: PendingQuery<Row[]>,
  render: (rows: readonly Row[]) => unknown[] | Promise<unknown[]>,
  trailer?: () => Promise<unknown>,
): Readable {
  let resume: (() => void) | null = null
  const wake = () => {
    const waiting = resume
    resume = null
    waiting?.()
  }
  const stream = new Readable({
    objectMode: true,
    highWaterMark: cursorRows,
    read: wake,
    destroy(err, callback) {
      wake()
      callback(err)
    },
  })
  // postgres.js awaits the callback of every batch but the last: the query resolves as soon as
  // that one is handed over, so its rendering (asynchronous for an attested export) is awaited here.
  let lastBatch: Promise<unknown> = Promise.resolve()
  query
    .cursor(cursorRows, (batch) => {
      lastBatch = (async () => {
        let wantsMore = true
        for (const item of await render(batch)) wantsMore = stream.push(item)
        if (!wantsMore && !stream.destroyed) await new Promise<void>((resolve) => (resume = resolve))
        // A reader that went away (the client hung up) closes the cursor instead of reading on.
        return stream.destroyed ? sql.CLOSE : undefined
      })()
      return lastBatch
    })
    .then(async () => {
      await lastBatch
      if (trailer !== undefined && !stream.destroyed) stream.push(await trailer())
      stream.push(null)
    })
    .catch((err: unknown) => stream.destroy(err as Error))
  return stream
}

/**
 * Streams an export's rows as JSONL or RFC 4180 CSV, in the order `query` gives them, from a
 * database cursor: memory holds about one batch of rows however large the window. Chunked: the
 * length is never known in advance.
 */
export function sendExport<Row extends object>(
  deps: Deps,
  reply: FastifyReply,
  layout: ExportLayout<Row>,
  exported: { projectId: string; window: ExportWindow; query: PendingQuery<Row[]>; attested?: AttestedLayout<Row> },
): FastifyReply {
  const { projectId, window, query, attested } = exported
  const ext = window.format === 'csv' ? 'csv' : 'jsonl'
  void reply
    .header('Content-Disposition', `attachment; filename="svc-${layout.name}-${projectId}-${deps.now().toISOString().slice(0, 10)}.${ext}"`)
    .type(window.format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson; charset=utf-8')
  if (attested !== undefined) return reply.send(cursorStream(deps.sql, query, attested.lines, attested.manifest))
  if (window.format === 'jsonl') return reply.send(cursorStream(deps.sql, query, (rows) => rows.map(layout.jsonLine)))
  // RFC 4180: CRLF between records, fields quoted when they hold a quote, comma or line break.
  const csv = stringify({ header: true, columns: [...layout.csvColumns], record_delimiter: 'windows' })
  // pipeline, not pipe: a client that hangs up destroys `csv`, and the cursor behind it must be
  // closed too rather than left waiting, holding its database connection. Errors reach Fastify
  // through `csv`, which pipeline destroys with them.
  const records = (rows: readonly Row[]) => rows.map((row) => layout.csvRecord(row).map(neutralizeFormula))
  return reply.send(pipeline(cursorStream(deps.sql, query, records), csv, () => undefined))
}

type ExportRow = ExportedJobRow

const iso = (d: Date | null) => (d === null ? null : d.toISOString())

function errorOf(row: ExportRow): { type: string | null; message: string | null; stack_trace: string | null } {
  const e = row.error === null ? null : (JSON.parse(row.error) as { type?: string; message?: string; stack_trace?: string } | null)
  return { type: e?.type ?? null, message: e?.message ?? null, stack_trace: e?.stack_trace ?? null }
}

/** One JSONL line: flat, `tags` as JSON text, `payload` spliced in as the raw JSON it was stored as. */
function jsonLine(row: ExportRow): string {
  const error = errorOf(row)
  const flat = {
    id: row.id,
    created_at: iso(row.created_at),
    job_type: row.job_type,
    queue: row.queue,
    state: row.state,
    attempt_number: row.attempt,
    max_attempts: row.max_attempts,
    timeout_seconds: row.timeout_seconds,
    run_at: iso(row.run_at),
    started_at: iso(row.started_at),
    completed_at: iso(row.completed_at),
    next_retry_at: row.state === 'pending' && row.attempt > 0 ? iso(row.run_at) : null,
    duration_ms: row.duration_ms,
    worker_id: row.worker_id,
    progress: row.progress,
    parent_job_id: row.parent_job_id,
    idempotency_key: row.idempotency_key,
    tags: row.tags,
    error_type: error.type,
    error_message: error.message,
    error_stack_trace: error.stack_trace,
  }
  return `${JSON.stringify(flat).slice(0, -1)},"payload":${row.payload}}\n`
}

const csvColumns: readonly string[] = [
  'Id',
  'CreatedAt',
  'JobType',
  'Queue',
  'State',
  'AttemptNumber',
  'MaxAttempts',
  'StartedAt',
  'CompletedAt',
  'DurationMs',
  'WorkerId',
  'ParentJobId',
  'IdempotencyKey',
  'ErrorType',
  'ErrorMessage',
  'Tags',
  'Payload',
]

function csvRecord(row: ExportRow): unknown[] {
  const error = errorOf(row)
  return [
    row.id,
    iso(row.created_at),
    row.job_type,
    row.queue,
    row.state,
    row.attempt,
    row.max_attempts,
    iso(row.started_at),
    iso(row.completed_at),
    row.duration_ms,
    row.worker_id,
    row.parent_job_id,
    row.idempotency_key,
    error.type,
    error.message,
    row.tags,
    row.payload,
  ]
}

const jobsLayout: ExportLayout<ExportRow> = { name: 'jobs', jsonLine, csvColumns, csvRecord }

/**
 * The spec's layout with each job's result last (`include=result`, an extension): raw JSON in
 * JSONL (null without one), JSON text in a `Result` column. Without it an export is the spec's.
 */
const jobsWithResultLayout: ExportLayout<ExportRow> = {
  name: 'jobs',
  jsonLine: (row) => `${jsonLine(row).slice(0, -2)},"result":${row.result ?? 'null'}}\n`,
  csvColumns: [...csvColumns, 'Result'],
  csvRecord: (row) => [...csvRecord(row), row.result],
}

/** A project's jobs in the window, oldest first, as JSONL or CSV (spec, Jobs export). */
export function sendJobsExport(
  deps: Deps,
  reply: FastifyReply,
  projectId: string,
  window: ExportWindow,
  options: { withResult: boolean; attestation?: ExportAttestation } = { withResult: false },
): FastifyReply {
  const layout = options.withResult ? jobsWithResultLayout : jobsLayout
  const attestation = options.attestation
  const attested: AttestedLayout<ExportRow> | undefined =
    attestation === undefined
      ? undefined
      : {
          lines: async (rows) => {
            const leaves = await attestation.ofJobs(rows.map((r) => ({ id: r.id, lastSeq: Number(r.last_seq) })))
            return rows.map((row, i) => `${layout.jsonLine(row).slice(0, -2)},"attestation":${JSON.stringify(leaves[i])}}\n`)
          },
          manifest: async () => `${JSON.stringify({ manifest: await attestation.manifest('jobs', window) })}\n`,
        }
  return sendExport(deps, reply, layout, { projectId, window, query: jobList.exportRows(deps.sql, projectId, window), attested })
}
