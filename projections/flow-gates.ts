import { tokensAt, type BucketRule, type FlowGate, type GateHolder } from '../domain/flow-gate.ts'
import type { QueueLimits } from '../domain/project/index.ts'
import type { EventRecord } from '../streams/event-store.ts'
import type { Queryable } from './database.ts'
import { latestPerAggregate, readModel } from './projection.ts'

/**
 * The flow gates (domain/flow-gate.ts) as their last messages left them, one row per gate: what
 * the limits state route shows, and where the reaper finds slots held by attempts that are gone
 * (services/use-cases/jobs/flow-gates.ts, reconciliation).
 *
 * `holders` (and `running`, its length) lists what the log holds, which includes attempts that
 * ended and whose slots no take has needed yet. What runs is counted by joining the holders with
 * the jobs read model: a holder is live while its job is processing that attempt.
 */
async function applyGateRows(db: Queryable, records: readonly EventRecord[]): Promise<void> {
  const rows = latestPerAggregate(records.filter((x) => x.message.aggregate === 'gate')).flatMap((r) => {
    const gate = r.message.state as FlowGate | null
    if (gate === null) return []
    const { queue, by: key_by, key, holders, tokens, refilled_at, held_until } = gate
    const { project_id, aggregate_id: gate_id } = r.message
    return [{ project_id, gate_id, queue, key_by, key, holders, running: holders.length, tokens, refilled_at, held_until, last_seq: r.seq }]
  })
  if (rows.length === 0) return
  // One statement for the batch's gates, as one json document (as the jobs' rows are written).
  await db`
    INSERT INTO flow_gates (project_id, gate_id, queue, key_by, key, holders, running, tokens, refilled_at, held_until, last_seq)
    SELECT project_id, gate_id, queue, key_by, key, holders, running, tokens, refilled_at, held_until, last_seq
    FROM json_populate_recordset(null::flow_gates, ${JSON.stringify(rows)}::text::json)
    ON CONFLICT (project_id, gate_id) DO UPDATE SET holders = excluded.holders, running = excluded.running, tokens = excluded.tokens,
      refilled_at = excluded.refilled_at, held_until = excluded.held_until, last_seq = excluded.last_seq
    WHERE flow_gates.last_seq < excluded.last_seq`
}

interface GateRow {
  gate_id: string
  key_by: string | null
  key: string | null
  /** Live holders: their jobs run their attempts. */
  running: number
  tokens: number | null
  refilled_at: Date | null
  held_until: Date | null
}

/** Key gates one state reads at most (a queue's busiest). */
const maxGatesRead = 10_000

export interface KeyState {
  key: string
  running: number
  waiting: number
  oldest_waiting_since: string | null
  tokens: number | null
  held_until: string | null
}

export interface LimitsState {
  running: number
  waiting: number
  oldest_waiting_since: string | null
  tokens: number | null
  held_until: string | null
  keys_at_limit: number
  keys: KeyState[]
}

/** The number of a gate row `g`'s holders whose jobs are running those attempts (one index lookup per holder). */
const liveHolders = (db: Queryable) => db`(
  SELECT count(*)::int FROM jsonb_array_elements(g.holders) h
  JOIN jobs j ON j.id = h ->> 'job_id' AND j.project_id = g.project_id AND j.state = 'processing' AND j.attempt = (h ->> 'attempt')::int)`

const iso = (d: Date | null) => (d === null ? null : d.toISOString())

/** What the queue's limits hold back at `now`: its gates' slots, tokens and holds, and its waiting jobs by key. */
async function stateOf(
  db: Queryable,
  projectId: string,
  queue: string,
  limits: QueueLimits | null,
  now: Date,
  maxKeys: number,
): Promise<LimitsState> {
  const rows = await db<GateRow[]>`
    SELECT g.gate_id, g.key_by, g.key, ${liveHolders(db)} AS running, g.tokens, g.refilled_at, g.held_until FROM flow_gates g
    WHERE g.project_id = ${projectId} AND g.queue = ${queue} ORDER BY g.running DESC LIMIT ${maxGatesRead}`
  const [waiting] = await db<{ n: number; oldest: Date | null }[]>`
    SELECT count(*)::int AS n, min(available_at) AS oldest FROM jobs
    WHERE project_id = ${projectId} AND queue = ${queue} AND state = 'pending' AND available_at <= ${now}`
  const by = limits?.concurrency?.per_key?.by ?? limits?.rate?.by ?? null
  const rateRule = (forKey: boolean): BucketRule | null => {
    const rate = limits?.rate ?? null
    return rate === null || (rate.by !== null) !== forKey ? null : rate
  }
  const tokensOf = (row: GateRow | undefined, rule: BucketRule | null) =>
    rule === null ? null : tokensAt(row === undefined ? null : { tokens: row.tokens, refilled_at: iso(row.refilled_at) }, rule, now.toISOString())
  const queueGate = rows.find((r) => r.key_by === null)
  const keyGates = rows.filter((r) => r.key_by !== null && r.key_by === by)
  let keys: KeyState[] = []
  if (by !== null) {
    const keyColumn = by === 'concurrency_key' ? db`concurrency_key` : by === 'job_type' ? db`job_type` : db`(tags ->> ${by.slice('tag:'.length)})`
    const waitingByKey = await db<{ key: string; n: number; oldest: Date }[]>`
      SELECT ${keyColumn} AS key, count(*)::int AS n, min(available_at) AS oldest FROM jobs
      WHERE project_id = ${projectId} AND queue = ${queue} AND state = 'pending' AND available_at <= ${now} AND ${keyColumn} IS NOT NULL
      GROUP BY 1 ORDER BY 2 DESC LIMIT ${maxKeys}`
    const gateOf = new Map(keyGates.map((g) => [g.key!, g]))
    const listed = new Set<string>()
    const keyState = (key: string, n: number, oldest: Date | null): KeyState => {
      listed.add(key)
      const gate = gateOf.get(key)
      return {
        key,
        running: gate?.running ?? 0,
        waiting: n,
        oldest_waiting_since: iso(oldest),
        tokens: tokensOf(gate, rateRule(true)),
        held_until: gate?.held_until != null && gate.held_until > now ? gate.held_until.toISOString() : null,
      }
    }
    keys = waitingByKey.map((w) => keyState(w.key, w.n, w.oldest))
    // Keys running but with nothing waiting fill what the list has room for.
    for (const g of keyGates) {
      if (keys.length >= maxKeys) break
      if (g.running > 0 && !listed.has(g.key!)) keys.push(keyState(g.key!, 0, null))
    }
  }
  const perKey = limits?.concurrency?.per_key?.limit ?? null
  return {
    running: queueGate !== undefined && limits?.concurrency?.limit != null ? queueGate.running : keyGates.reduce((n, g) => n + g.running, 0),
    waiting: waiting!.n,
    oldest_waiting_since: iso(waiting!.oldest),
    tokens: tokensOf(queueGate, rateRule(false)),
    held_until: queueGate?.held_until != null && queueGate.held_until > now ? queueGate.held_until.toISOString() : null,
    keys_at_limit: perKey === null ? 0 : keyGates.filter((g) => g.running >= perKey).length,
    keys,
  }
}

/**
 * Gates for the reaper's reconciliation, the least recently changed first, at most `limit`: those
 * holding a slot taken before `takenBefore` by an attempt the jobs read model does not show
 * running (ended, never claimed, or gone). A gate whose takes keep coming frees its ended holders
 * itself (a take frees those its process ended, and any it needs the room of), so such a gate is
 * mostly one that went idle, or one a crash left a slot on; once reconciled it holds only live
 * attempts and is not returned again.
 */
async function heldSlots(
  db: Queryable,
  heldBack: readonly string[],
  takenBefore: Date,
  limit: number,
): Promise<Array<{ id: string; project_id: string; gate_id: string; holders: GateHolder[] }>> {
  // `id` names the item for the pass that isolates failing ones (services/infrastructure/failing-items.ts).
  return db<Array<{ id: string; project_id: string; gate_id: string; holders: GateHolder[] }>>`
    SELECT g.project_id || '/' || g.gate_id AS id, g.project_id, g.gate_id, g.holders FROM flow_gates g
    WHERE g.running > 0 AND g.project_id || '/' || g.gate_id <> ALL(${heldBack as string[]}::text[])
      AND EXISTS (
        SELECT 1 FROM jsonb_array_elements(g.holders) h
        LEFT JOIN jobs j ON j.id = h ->> 'job_id' AND j.project_id = g.project_id
        WHERE (h ->> 'taken_at')::timestamptz < ${takenBefore}
          AND (j.id IS NULL OR j.state <> 'processing' OR j.attempt <> (h ->> 'attempt')::int))
    ORDER BY g.last_seq LIMIT ${limit}`
}

/** All projects together, for /metrics: running attempts holding a slot, pending jobs a gate refused, gates held shut now. */
async function totals(db: Queryable, now: Date): Promise<{ running: number; waiting: number; held: number }> {
  const [gates] = await db<{ running: number; held: number }[]>`
    SELECT (SELECT count(DISTINCT j.id)::int FROM flow_gates g CROSS JOIN LATERAL jsonb_array_elements(g.holders) h
        JOIN jobs j ON j.id = h ->> 'job_id' AND j.project_id = g.project_id AND j.state = 'processing' AND j.attempt = (h ->> 'attempt')::int
        WHERE g.running > 0) AS running,
      (SELECT count(*)::int FROM flow_gates WHERE held_until > ${now}) AS held`
  const [jobs] = await db<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE state = 'pending' AND limit_waiting IS NOT NULL`
  return { running: gates!.running, waiting: jobs!.n, held: gates!.held }
}

export const flowGates = readModel(
  {
    name: 'flow_gates',
    handles: ['gate_slot_taken', 'gate_slot_freed', 'gate_held'],
    tables: ['flow_gates'],
    apply: applyGateRows,
  },
  { stateOf, heldSlots, totals },
)
