import type { Sql, Tx } from '../../projections/database.ts'
import { projections } from '../../projections/index.ts'

/**
 * Every read-model table, row by row in primary-key order. A row is compared as Postgres's own
 * text form of the whole row, so json payloads are compared byte for byte. Checkpoints are
 * compared by sequence only, and skipped messages without their time: `updated_at` and
 * `failed_at` say when a batch was applied, not what it applied.
 */
export async function readModels(sql: Sql) {
  const rows = async (query: Promise<{ row: string }[]>) => (await query).map((r) => r.row)
  return {
    jobs: await rows(sql`SELECT r::text AS row FROM jobs r ORDER BY id`),
    projects: await rows(sql`SELECT r::text AS row FROM projects r ORDER BY id`),
    api_keys: await rows(sql`SELECT r::text AS row FROM api_keys r ORDER BY prefix`),
    recurring_jobs: await rows(sql`SELECT r::text AS row FROM recurring_jobs r ORDER BY project_id, id`),
    job_state_counts: await rows(sql`SELECT r::text AS row FROM job_state_counts r ORDER BY project_id, queue, state`),
    job_throughput: await rows(sql`SELECT r::text AS row FROM job_throughput r ORDER BY project_id, resolution, bucket_start, queue`),
    job_type_stats: await rows(sql`SELECT r::text AS row FROM job_type_stats r ORDER BY project_id, resolution, bucket_start, job_type`),
    activity: await rows(sql`SELECT r::text AS row FROM activity r ORDER BY id`),
    alerts: await rows(sql`SELECT r::text AS row FROM alerts r ORDER BY project_id, id`),
    webhooks: await rows(sql`SELECT r::text AS row FROM webhooks r ORDER BY project_id, id`),
    deliveries: await rows(sql`SELECT r::text AS row FROM deliveries r ORDER BY id`),
    event_consumers: await rows(sql`SELECT r::text AS row FROM event_consumers r ORDER BY project_id, name`),
    flow_gates: await rows(sql`SELECT r::text AS row FROM flow_gates r ORDER BY project_id, gate_id`),
    operations: await rows(sql`SELECT r::text AS row FROM operations r ORDER BY id`),
    // The Merkle logs: every tile's hashes, so equal tables mean equal roots at every size.
    audit_trees: await rows(sql`SELECT r::text AS row FROM audit_trees r ORDER BY project_id`),
    audit_tiles: await rows(sql`SELECT r::text AS row FROM audit_tiles r ORDER BY project_id, level, idx`),
    audit_positions: await rows(sql`SELECT r::text AS row FROM audit_positions r ORDER BY project_id, seq`),
    audit_checkpoints: await rows(sql`SELECT r::text AS row FROM audit_checkpoints r ORDER BY project_id, tree_size`),
    audit_signing_keys: await rows(sql`SELECT r::text AS row FROM audit_signing_keys r ORDER BY key_id`),
    audit_expired_leaves: await rows(sql`SELECT r::text AS row FROM audit_expired_leaves r ORDER BY project_id, leaf_index`),
    projection_checkpoints: await rows(sql`SELECT name || ' ' || last_seq AS row FROM projection_checkpoints ORDER BY name`),
    projection_failures: await rows(sql`SELECT concat_ws(' ', seq, subject, error_code, error_message) AS row FROM projection_failures ORDER BY seq`),
  }
}

/** The read-model tables a `readModels` snapshot holds (checkpoints and failures aside), sorted. */
export function tablesIn(models: object): string[] {
  return Object.keys(models)
    .filter((k) => !k.startsWith('projection_'))
    .sort()
}

/** Every table the projections declare, sorted: a snapshot that lacks one compares too little. */
export function projectionTables(): string[] {
  return projections.flatMap((p) => p.tables).sort()
}

/**
 * Holds `LOCK TABLE jobs IN EXCLUSIVE MODE` (every claim query and row write waits, plain reads
 * pass) on one of `sql`'s connections until the returned release is called (at most once; it is
 * also registered as a teardown of `t`).
 */
export function lockJobsTable(sql: Sql, t: { teardown(fn: () => unknown): void }): Promise<() => Promise<void>> {
  return holdInTransaction(sql, t, (tx) => tx`LOCK TABLE jobs IN EXCLUSIVE MODE`)
}

/**
 * Holds every projection checkpoint row `FOR UPDATE` on one of `sql`'s connections until the
 * returned release is called (at most once; also registered as a teardown of `t`). The projector
 * locks the checkpoints first in each batch, so it applies nothing meanwhile: what is appended
 * stays in the log and out of the read models, while plain reads and claim queries pass.
 */
export function holdProjector(sql: Sql, t: { teardown(fn: () => unknown): void }): Promise<() => Promise<void>> {
  return holdInTransaction(sql, t, (tx) => tx`SELECT name FROM projection_checkpoints FOR UPDATE`)
}

/** Runs `take` in a transaction kept open until the returned release is called. */
async function holdInTransaction(
  sql: Sql,
  t: { teardown(fn: () => unknown): void },
  take: (tx: Tx) => Promise<unknown>,
): Promise<() => Promise<void>> {
  let release!: () => void
  const held = new Promise<void>((r) => (release = r))
  let locked!: () => void
  const acquired = new Promise<void>((r) => (locked = r))
  const tx = sql.begin(async (lock) => {
    await take(lock)
    locked()
    await held
  })
  // A transaction that fails before it holds the lock rejects here rather than hanging.
  await Promise.race([acquired, tx])
  let done = false
  const unlock = async () => {
    if (done) return
    done = true
    release()
    await tx
  }
  t.teardown(unlock)
  return unlock
}
