import type { EventRecord } from '../streams/event-store.ts'
import type { Sql, Tx } from './database.ts'
import { isHandledBy, type Projection } from './projection.ts'
import { toStorableText } from './storable-values.ts'

/**
 * Messages a read model could not hold, kept in `projection_failures` (one row per message and
 * projection) until a re-projection succeeds: written by the projector and the replay, read by
 * the readiness probe and by `npm run replay -- --subject | --project`.
 */

/** What a projection did with a message Postgres refused: wrote its storable copy, or nothing. */
export type Projected = 'sanitised' | 'skipped'

export interface ProjectionFailure {
  record: EventRecord
  projection: string
  projected: Projected
  err: unknown
}

/**
 * True when Postgres refused the data itself (SQLSTATE classes 22 data exception, 23 integrity
 * constraint, 54 program limit): applying the same message again can never succeed. Anything
 * else (a lost connection, a restart) is transient and is retried.
 */
export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' && /^(22|23|54)[0-9A-Z]{3}$/.test(code)
}

/** Runs `write` under a savepoint of `tx`: null when it succeeded, the data error when Postgres refused it (rolled back). */
async function attempt(tx: Tx, write: (sp: Tx) => Promise<unknown>): Promise<unknown> {
  try {
    await tx.savepoint((sp) => write(sp as unknown as Tx))
    return null
  } catch (err) {
    if (!isDataError(err)) throw err
    return err
  }
}

/**
 * Applies `records` to one projection inside `tx`, isolating what Postgres refuses on its data:
 * each try runs under a savepoint, a part that fails is split in two and each half tried again,
 * in order, down to the one message that fails alone. That message is written as the
 * projection's storable copy when it has one (`applyStorableCopy`), else skipped; either way it
 * is returned as a failure to record. So one bad message in a batch of 1,000 costs about twenty
 * savepoints in the batch's own transaction, and the others are applied together, once.
 */
export async function applyIsolating(tx: Tx, projection: Projection, records: readonly EventRecord[]): Promise<ProjectionFailure[]> {
  const failures: ProjectionFailure[] = []
  const parts: Array<readonly EventRecord[]> = [records]
  while (parts.length > 0) {
    const part = parts.pop()!
    const err = await attempt(tx, (sp) => projection.apply(sp, part))
    if (err === null) continue
    if (part.length > 1) {
      const middle = part.length >> 1
      parts.push(part.slice(middle), part.slice(0, middle))
      continue
    }
    const record = part[0]!
    const copy = projection.applyStorableCopy
    const copied = copy !== undefined && (await attempt(tx, (sp) => copy(sp, record))) === null
    failures.push({ record, projection: projection.name, projected: copied ? 'sanitised' : 'skipped', err })
  }
  return failures
}

/** Records failures; a message and projection recorded before gets its row replaced. */
export async function recordFailures(tx: Tx, failures: readonly ProjectionFailure[]): Promise<void> {
  if (failures.length === 0) return
  const rows = failures.map((f) => {
    const e = f.err as { code?: unknown; message?: unknown } | null
    return {
      seq: f.record.seq,
      projection: f.projection,
      subject: f.record.subject,
      project_id: toStorableText(String(f.record.message.project_id)),
      projected: f.projected,
      error_code: typeof e?.code === 'string' ? e.code : null,
      error_message: toStorableText(String(e?.message ?? f.err)),
    }
  })
  await tx`
    INSERT INTO projection_failures ${tx(rows, 'seq', 'projection', 'subject', 'project_id', 'projected', 'error_code', 'error_message')}
    ON CONFLICT (seq, projection) DO UPDATE SET projected = excluded.projected, error_code = excluded.error_code,
      error_message = excluded.error_message, failed_at = now()`
}

export interface FailureSummary {
  /** Messages with at least one projection failure not yet resolved. */
  messages: number
  /** Aggregates (subjects) they belong to. */
  subjects: number
  /** The latest failures, newest first: no subject or project, as the summary may be public. */
  latest: Array<{ seq: number; projection: string; projected: Projected; failed_at: string }>
}

/** What the readiness probe shows of the failures (at most `latest` of them). */
export async function summarizeFailures(sql: Sql, latest = 5): Promise<FailureSummary> {
  const [counts] = await sql<{ messages: number; subjects: number }[]>`
    SELECT count(DISTINCT seq)::int AS messages, count(DISTINCT subject)::int AS subjects FROM projection_failures`
  const rows = await sql<{ seq: number; projection: string; projected: Projected; failed_at: Date }[]>`
    SELECT seq, projection, projected, failed_at FROM projection_failures ORDER BY failed_at DESC, seq DESC LIMIT ${latest}`
  return {
    messages: counts?.messages ?? 0,
    subjects: counts?.subjects ?? 0,
    latest: rows.map((r) => ({ seq: r.seq, projection: r.projection, projected: r.projected, failed_at: r.failed_at.toISOString() })),
  }
}

/** Failures of one aggregate's subject, or of every aggregate of one project. */
export type FailureScope = { subject: string } | { projectId: string }

export interface RecordedFailure {
  seq: number
  projection: string
  subject: string
  project_id: string | null
  projected: Projected
  error_code: string | null
  error_message: string
  failed_at: Date
}

/** The recorded failures in `scope` (all of them without one), in log order. */
export async function listFailures(sql: Sql, scope: FailureScope | null): Promise<RecordedFailure[]> {
  const where = scope === null ? sql`` : 'subject' in scope ? sql`WHERE subject = ${scope.subject}` : sql`WHERE project_id = ${scope.projectId}`
  return sql<RecordedFailure[]>`
    SELECT seq, projection, subject, project_id, projected, error_code, error_message, failed_at
    FROM projection_failures ${where} ORDER BY seq, projection`
}

export interface Reprojection {
  /** Failures resolved: their message is now held, superseded by a later one, or gone from the log. */
  resolved: number
  /** Failures that stand, recorded again. */
  failing: ProjectionFailure[]
}

/**
 * Re-applies each recorded failure in `scope` with the projections' own code, and clears the
 * ones that now succeed. Each failure is its own transaction, holding its row so that two
 * re-projections cannot apply one message twice. Only the failed projection sees the message
 * again (rows recorded before failures were per projection, `*`, go to every projection that
 * handles it), so no read model counts it twice, and nothing else is touched: the live projector
 * and the other tenants' rows go on. A storable copy is removed first, so the message's own rows
 * replace it; when the message fails again, the copy is written again and the failure stays.
 * `recordAt` reads one message of the log by sequence (null: retention removed it).
 */
export async function reprojectFailures(
  sql: Sql,
  projections: readonly Projection[],
  scope: FailureScope,
  recordAt: (seq: number) => Promise<EventRecord | null>,
): Promise<Reprojection> {
  const outcome: Reprojection = { resolved: 0, failing: [] }
  for (const failure of await listFailures(sql, scope)) {
    const again = (await sql.begin(async (tx) => {
      const [held] = await tx<{ projected: Projected }[]>`
        SELECT projected FROM projection_failures WHERE seq = ${failure.seq} AND projection = ${failure.projection} FOR UPDATE`
      if (held === undefined) return null
      await tx`DELETE FROM projection_failures WHERE seq = ${failure.seq} AND projection = ${failure.projection}`
      const record = await recordAt(failure.seq)
      if (record === null) return []
      const targets = projections.filter((p) => (failure.projection === '*' ? isHandledBy(p, record) : p.name === failure.projection))
      const failures: ProjectionFailure[] = []
      for (const p of targets) {
        if (held.projected === 'sanitised') await p.removeStorableCopy?.(tx, record)
        failures.push(...(await applyIsolating(tx, p, [record])))
      }
      await recordFailures(tx, failures)
      return failures
    })) as ProjectionFailure[] | null
    if (again === null) continue
    if (again.length === 0) outcome.resolved++
    else outcome.failing.push(...again)
  }
  return outcome
}
