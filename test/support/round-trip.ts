import { withClockShifted, type Harness } from './harness.ts'
import { parseCsv } from './rfc4180.ts'

/**
 * Reading jobs back from every route that shows them (issue 23, item 1): the list (Postgres), a
 * single GET (the log), and the JSONL and CSV exports (Postgres, streamed), each view reduced to
 * JSON text so that a test compares them byte for byte, key order included.
 */

/** A JSON value as the service answers it: the JSON text of what a JSON parser made of it (`-0` is `0`, `1e999` is refused). */
export const asAnswered = (value: unknown): string => JSON.stringify(value)

/** JSON text sent as a request's body part, as the service answers it back. */
export const answeredFromText = (jsonText: string): string => asAnswered(JSON.parse(jsonText))

/**
 * What a worker-reported error text is stored as: each U+0000 and each unpaired surrogate made
 * U+FFFD. Written code unit by code unit, apart from the service's own pattern.
 */
export function asStoredErrorText(s: string): string {
  let out = ''
  for (let i = 0; i < s.length; i++) {
    const unit = s.charCodeAt(i)
    const next = i + 1 < s.length ? s.charCodeAt(i + 1) : -1
    if (unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      out += s[i]! + s[i + 1]!
      i++
    } else if (unit === 0 || (unit >= 0xd800 && unit <= 0xdfff)) out += '\ufffd'
    else out += s[i]!
  }
  return out
}

/** What one route shows of a job: its payload and tags as JSON text, its error's texts (no stack trace in the CSV). */
export interface JobView {
  payload: string
  tags: string | null
  errorType: string | null
  errorMessage: string | null
  errorStack?: string | null
}

export type Views = Record<'list' | 'get' | 'jsonl' | 'csv', Map<string, JobView>>

/** A cell the CSV export guarded against spreadsheet formulas (docs/api-notes.md, "Jobs export") back as it was. */
const unguarded = (cell: string): string => (/^'[=+\-@\t\r]/.test(cell) ? cell.slice(1) : cell)

function viewOfDetail(job: any): JobView {
  return {
    payload: asAnswered(job.payload),
    tags: job.tags === null ? null : asAnswered(job.tags),
    errorType: job.error?.type ?? null,
    errorMessage: job.error?.message ?? null,
    errorStack: job.error?.stack_trace ?? null,
  }
}

/**
 * Each of `ids` as the list route (waiting for `minSeq`), GET, and the two exports show it. The
 * exports run with the service clock `exportShiftMs` and `exportShiftMs + 61 s` ahead, past the
 * project's export cooldown.
 */
export async function readJobsBack(h: Harness, ids: readonly string[], minSeq: number, exportShiftMs = 0): Promise<Views> {
  const views: Views = { list: new Map(), get: new Map(), jsonl: new Map(), csv: new Map() }
  const wanted = new Set(ids)
  let cursor: string | null = null
  do {
    const page: any = await h.request('GET', `/jobsvc/v1/jobs?limit=100&min_seq=${minSeq}${cursor ? `&cursor=${cursor}` : ''}`)
    if (page.status !== 200) throw new Error(`list answered ${page.status}: ${JSON.stringify(page.body)}`)
    for (const job of page.body.data) if (wanted.has(job.id)) views.list.set(job.id, viewOfDetail(job))
    cursor = page.body.next_cursor
  } while (cursor !== null)
  for (const id of ids) {
    const got = await h.request('GET', `/jobsvc/v1/jobs/${id}`)
    if (got.status === 200) views.get.set(id, viewOfDetail(got.body))
  }
  const window = `from=${new Date(Date.now() - 86_400_000).toISOString()}&until=${new Date(Date.now() + 86_400_000).toISOString()}`
  const jsonl = await withClockShifted(h.runtime, exportShiftMs, () => h.request('GET', `/jobsvc/v1/jobs/export?${window}`))
  if (jsonl.status !== 200) throw new Error(`the JSONL export answered ${jsonl.status}: ${JSON.stringify(jsonl.body)}`)
  for (const line of String(jsonl.body).split('\n').filter(Boolean)) {
    const row = JSON.parse(line)
    if (!wanted.has(row.id)) continue
    views.jsonl.set(row.id, {
      payload: asAnswered(row.payload),
      tags: row.tags,
      errorType: row.error_type,
      errorMessage: row.error_message,
      errorStack: row.error_stack_trace,
    })
  }
  const csv = await withClockShifted(h.runtime, exportShiftMs + 61_000, () => h.request('GET', `/jobsvc/v1/jobs/export?${window}&format=csv`))
  if (csv.status !== 200) throw new Error(`the CSV export answered ${csv.status}: ${JSON.stringify(csv.body)}`)
  const [header, ...records] = parseCsv(String(csv.body))
  const column = (name: string) => header!.indexOf(name)
  for (const record of records) {
    const id = record[column('Id')]!
    if (!wanted.has(id)) continue
    const cell = (name: string) => (record[column(name)] === '' ? null : unguarded(record[column(name)]!))
    views.csv.set(id, {
      payload: answeredFromText(record[column('Payload')]!),
      tags: cell('Tags'),
      errorType: cell('ErrorType'),
      errorMessage: cell('ErrorMessage'),
    })
  }
  return views
}

/** A value in an assertion's message: ASCII only, since U+2028 or U+0085 would break the TAP output's lines. */
function shown(value: string | null | undefined): string {
  return (JSON.stringify(value) ?? 'undefined').slice(0, 200).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/**
 * The differences between what each route shows of each job and what was expected of it: an
 * empty list when every view of every job holds exactly the expected texts. A view may lack the
 * error stack trace (the CSV has none).
 */
export function roundTripMismatches(views: Views, expected: ReadonlyMap<string, JobView>): string[] {
  const problems: string[] = []
  for (const [id, want] of expected) {
    for (const [route, seen] of Object.entries(views) as Array<[keyof Views, Map<string, JobView>]>) {
      const view = seen.get(id)
      if (view === undefined) {
        problems.push(`${route}: ${id} missing`)
        continue
      }
      for (const field of ['payload', 'tags', 'errorType', 'errorMessage', 'errorStack'] as const) {
        if (field === 'errorStack' && view.errorStack === undefined) continue
        if (view[field] !== want[field]) problems.push(`${route}: ${id} ${field} ${shown(view[field])} ≠ ${shown(want[field])}`)
      }
    }
  }
  return problems
}
