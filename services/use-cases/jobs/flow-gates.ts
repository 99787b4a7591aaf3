import {
  GateContended,
  gateNameOf,
  GateRefusal,
  LimitRefused,
  type BucketRule,
  type FlowGate,
  type GateAddress,
  type GateHolder,
  type GateSpec,
} from '../../../domain/flow-gate.ts'
import type { Ref } from '../../../streams/aggregate-handler.ts'
import { gateHandler } from '../../../streams/aggregates.ts'
import { ConcurrencyConflict } from '../../../streams/errors.ts'
import { sha256Hex } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * The edge of the flow gates (domain/flow-gate.ts): where a claim takes its job's gates, where
 * the end of an attempt frees them, where a worker's "rate limited" holds one. Every step is an
 * append with an expected sequence on the gate's subject; nothing is counted in memory.
 */

type GateDeps = Pick<Deps, 'store' | 'newUlid' | 'now'>

/** A gate's subject: a digest of its name (a key may hold any character; a subject token may not). */
export function gateRef(projectId: string, name: string): Ref<'gate'> {
  return gateHandler.ref(projectId, `fgt_${sha256Hex(name).slice(0, 40)}`)
}

export function gateRefOf(projectId: string, address: GateAddress): Ref<'gate'> {
  return gateRef(projectId, gateNameOf(address))
}

const meta = (deps: GateDeps) => ({ now: deps.now().toISOString() })

/**
 * Takes a slot (and a token) in each gate for the attempt, in order; on a refusal gives back what
 * it took and throws LimitRefused. Resolves to the names of the gates taken.
 */
export async function takeGates(deps: GateDeps, projectId: string, jobId: string, attempt: number, gates: readonly GateSpec[]): Promise<string[]> {
  const taken: GateSpec[] = []
  for (const gate of gates) {
    try {
      await gateHandler.decide(deps, gateRefOf(projectId, gate), {
        type: 'take_gate',
        data: { queue: gate.queue, by: gate.by, key: gate.key, job_id: jobId, attempt, concurrency: gate.concurrency, rate: gate.rate },
        meta: meta(deps),
      })
      taken.push(gate)
    } catch (err) {
      await giveBack(deps, projectId, jobId, attempt, taken)
      if (err instanceof GateRefusal) throw new LimitRefused(err, gate)
      // A conflict on the gate is not one on the job: the caller must not take the job as moved on.
      if (err instanceof ConcurrencyConflict) throw new GateContended(gate)
      throw err
    }
  }
  return taken.map(gateNameOf)
}

/** Gives back the slots and tokens of a claim that did not happen (its append lost or failed). */
export async function giveBack(deps: GateDeps, projectId: string, jobId: string, attempt: number, gates: readonly GateSpec[]): Promise<void> {
  await Promise.all(gates.map((g) => freeGate(deps, projectId, gateNameOf(g), jobId, attempt, 'unclaimed', g.rate)))
}

/** Frees the attempt's slot in the named gate (a no-op when it holds none there). */
export async function freeGate(
  deps: GateDeps,
  projectId: string,
  name: string,
  jobId: string,
  attempt: number,
  reason: 'ended' | 'unclaimed' | 'reconciled',
  rate: BucketRule | null = null,
): Promise<void> {
  await gateHandler.decide(deps, gateRef(projectId, name), { type: 'free_gate', data: { job_id: jobId, attempt, reason, rate }, meta: meta(deps) })
}

/**
 * How long a slot may be held by an attempt that is not running before the reconciliation frees
 * it: well past the milliseconds between a claim's gate append and its job append.
 */
export const unclaimedSlotGraceMs = 10_000

/**
 * The reaper's reconciliation of one gate (issue 29): frees each slot whose attempt is not the
 * job's running attempt any more and was taken more than `unclaimedSlotGraceMs` ago, the slots a
 * crash left between a gate's append and the job's (a claim that never happened, or an end whose
 * free never ran). `attemptOf` is the job's running attempt, null when it is not running.
 * Resolves to the slots freed.
 */
export async function reconcileGate(
  deps: GateDeps,
  projectId: string,
  gateId: string,
  holders: readonly GateHolder[],
  attemptOf: (jobId: string) => Promise<number | null>,
): Promise<number> {
  const before = deps.now().getTime() - unclaimedSlotGraceMs
  let freed = 0
  for (const holder of holders) {
    if (Date.parse(holder.taken_at) > before) continue
    if ((await attemptOf(holder.job_id)) === holder.attempt) continue
    const result = await gateHandler.decide(deps, gateHandler.ref(projectId, gateId), {
      type: 'free_gate',
      data: { job_id: holder.job_id, attempt: holder.attempt, reason: 'reconciled' },
      meta: meta(deps),
    })
    if (result.appended) freed++
  }
  return freed
}

/** Holds the gate shut until `until` (a worker's `rate_limited` ack). */
export async function holdGate(deps: GateDeps, projectId: string, gate: GateAddress, jobId: string, until: string): Promise<void> {
  await gateHandler.decide(deps, gateRefOf(projectId, gate), {
    type: 'hold_gate',
    data: { queue: gate.queue, by: gate.by, key: gate.key, job_id: jobId, until },
    meta: meta(deps),
  })
}

/** The gate as its last message left it; null when nothing ever took it. */
export async function loadGate(deps: GateDeps, projectId: string, address: GateAddress): Promise<FlowGate | null> {
  return (await gateHandler.load(deps.store, gateRefOf(projectId, address))).state
}
