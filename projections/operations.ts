import type { Operation, OperationError, OperationEventType, OperationStatus } from '../domain/operation.ts'
import type { Queryable } from './database.ts'
import { pageOf, readModel, snapshotRows, type Page, type PagePosition } from './projection.ts'

/** Operations as snapshots guarded by `last_seq` (their params and cursor stay on the log). */
export const applyOperationRows = snapshotRows<Operation>(
  'operation',
  (db, op, seq) => db`
    INSERT INTO operations (project_id, id, kind, status, matched, processed, succeeded, failed, error, created_at, finished_at, last_seq)
    VALUES (${op.project_id}, ${op.id}, ${op.kind}, ${op.status}, ${op.matched}, ${op.processed}, ${op.succeeded}, ${op.failed},
      ${op.error === null ? null : JSON.stringify(op.error)}::text::json, ${op.created_at}, ${op.finished_at}, ${seq})
    ON CONFLICT (id) DO UPDATE SET status = excluded.status, matched = excluded.matched, processed = excluded.processed,
      succeeded = excluded.succeeded, failed = excluded.failed, error = excluded.error, finished_at = excluded.finished_at,
      last_seq = excluded.last_seq
    WHERE operations.last_seq < excluded.last_seq`,
)

/** An operation as its list shows it. */
export interface OperationEntry {
  id: string
  kind: string
  status: OperationStatus
  matched: number
  processed: number
  succeeded: number
  failed: number
  error: OperationError | null
  created_at: Date
  finished_at: Date | null
}

/** The project's operations, newest first, after `after`. */
async function page(db: Queryable, projectId: string, after: PagePosition | null, limit: number): Promise<Page<OperationEntry>> {
  const rows = await db<OperationEntry[]>`
    SELECT id, kind, status, matched, processed, succeeded, failed, error, created_at, finished_at FROM operations
    WHERE project_id = ${projectId} ${after ? db`AND (created_at, id) < (${after.created_at}, ${after.id})` : db``}
    ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`
  return pageOf(rows, limit, (r) => r)
}

/** Operations still running, oldest first, at most `limit`: what the role that runs them picks up. */
async function running(db: Queryable, limit: number): Promise<Array<{ project_id: string; id: string; kind: string }>> {
  return db<Array<{ project_id: string; id: string; kind: string }>>`
    SELECT project_id, id, kind FROM operations WHERE status = 'running' ORDER BY created_at, id LIMIT ${limit}`
}

export const operationList = readModel(
  {
    name: 'operations',
    handles: [
      'operation_started',
      'operation_progressed',
      'operation_succeeded',
      'operation_cancelled',
      'operation_failed',
    ] satisfies OperationEventType[],
    tables: ['operations'],
    apply: applyOperationRows,
  },
  { page, running },
)
