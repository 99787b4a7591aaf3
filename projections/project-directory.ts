import type { Plan, Project, ProjectEventType } from '../domain/project/index.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable, Sql } from './database.ts'
import { readModel, snapshotRows } from './projection.ts'

/** The project events that can change the name, plan, status, owner, keys or when a queue pause ends. */
const handledTypes: readonly ProjectEventType[] = [
  'project_created',
  'api_key_issued',
  'api_key_rotated',
  'api_key_revoked',
  'project_renamed',
  'project_deleted',
  'member_invited',
  'team_invite_accepted',
  'member_joined',
  'member_role_changed',
  'member_removed',
  'ownership_transferred',
  'plan_changed',
  'queue_paused',
  'queue_resumed',
]

/**
 * Projects and their API keys as authentication reads them. Like the job list, rows are
 * snapshots guarded by `last_seq`; the operator command line writes them directly too, so a
 * project is usable the moment it is created, before any projector runs.
 */
export const upsertProjectRows = snapshotRows<Project>('project', async (db, p, seq) => {
  const ends = (p.queue_pauses ?? []).flatMap((q) => (q.until === null ? [] : [q.until])).sort()
  const pauseEndsAt = ends[0] ?? null
  const updated = await db`
    INSERT INTO projects (id, name, plan, owner_email, status, created_at, updated_at, last_seq, queue_pause_ends_at)
    VALUES (${p.id}, ${p.name}, ${p.plan}, ${p.owner_email}, ${p.status ?? 'active'}, ${p.created_at}, ${p.updated_at}, ${seq}, ${pauseEndsAt})
    ON CONFLICT (id) DO UPDATE SET name = excluded.name, plan = excluded.plan, owner_email = excluded.owner_email,
      status = excluded.status, updated_at = excluded.updated_at, last_seq = excluded.last_seq,
      queue_pause_ends_at = excluded.queue_pause_ends_at
    WHERE projects.last_seq < excluded.last_seq
    RETURNING id`
  if (updated.length === 0) return
  await db`DELETE FROM api_keys WHERE project_id = ${p.id}`
  if (p.keys.length === 0) return
  const keys = p.keys.map((k) => ({
    prefix: k.prefix,
    project_id: p.id,
    key_hash: k.key_hash,
    status: k.status,
    issued_at: k.issued_at,
    expires_at: k.expires_at,
    last_seq: seq,
  }))
  await db`INSERT INTO api_keys ${db(keys, 'prefix', 'project_id', 'key_hash', 'status', 'issued_at', 'expires_at', 'last_seq')}`
})

/**
 * The same rows written by a request, outside the projector, so a new or rotated key works at
 * once. One transaction: its first statement locks the project's row, so the delete-and-insert
 * of its keys never interleaves with another writer's (the projector's, or a concurrent
 * request's) and a stale snapshot changes nothing.
 */
export async function writeProjectRowsNow(sql: Sql, records: readonly EventRecord[]): Promise<void> {
  await sql.begin((tx) => upsertProjectRows(tx, records))
}

/** The plans of the given projects, as the directory has them (a project not in it is absent). */
async function plansOf(db: Queryable, projectIds: readonly string[]): Promise<Map<string, Plan>> {
  const rows = await db<{ id: string; plan: Plan }[]>`SELECT id, plan FROM projects WHERE id = ANY(${projectIds as string[]})`
  return new Map(rows.map((r) => [r.id, r.plan]))
}

/** The ids of the active projects. */
async function activeProjectIds(db: Queryable): Promise<string[]> {
  const rows = await db<{ id: string }[]>`SELECT id FROM projects WHERE status = 'active'`
  return rows.map((r) => r.id)
}

/** The project holding the API key with this prefix, if any. */
async function projectOfKeyPrefix(db: Queryable, prefix: string): Promise<string | undefined> {
  const rows = await db<{ project_id: string }[]>`SELECT project_id FROM api_keys WHERE prefix = ${prefix}`
  return rows[0]?.project_id
}

/** Active projects with a queue pause whose `until` has passed by `now`, at most `limit`, earliest first. */
async function projectsWithEndedPauses(db: Queryable, now: Date, limit: number): Promise<string[]> {
  const rows = await db<{ id: string }[]>`
    SELECT id FROM projects WHERE queue_pause_ends_at <= ${now} AND status = 'active'
    ORDER BY queue_pause_ends_at LIMIT ${limit}`
  return rows.map((r) => r.id)
}

export const projectDirectory = readModel(
  { name: 'project-directory', handles: handledTypes, tables: ['api_keys', 'projects'], apply: upsertProjectRows },
  { plansOf, activeProjectIds, projectOfKeyPrefix, projectsWithEndedPauses },
)
