import {
  flowGateDecider,
  GateContended,
  gateNameOf,
  GateRefusal,
  LimitRefused,
  type BucketRule,
  type FlowGate,
  type FlowGateCommand,
  type FlowGateEvent,
  type GateAddress,
  type GateHolder,
  type GateSpec,
} from '../../../domain/flow-gate.ts'
import type { CommandResult, Ref } from '../../../streams/aggregate-handler.ts'
import { gateHandler } from '../../../streams/aggregates.ts'
import type { Loaded } from '../../../streams/event-store.ts'
import { ConcurrencyConflict } from '../../../streams/errors.ts'
import { sha256Hex } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * The edge of the flow gates (domain/flow-gate.ts): where a claim takes its job's gates, where
 * the end of an attempt frees them, where a worker's "rate limited" holds one. Every step is an
 * append with an expected sequence on the gate's subject; nothing is counted in memory.
 */

/**
 * The gates this process decided on last, state and sequence, so its next decision on one needs
 * no load (the hint of handleCommand): a gate another process moved since makes the append
 * conflict, and the decision is made again on the loaded state. Bounded; the oldest go first.
 */
export class GateStates {
  readonly #known = new Map<string, Loaded<FlowGate>>()
  constructor(readonly capacity = 50_000) {}

  get(ref: Ref<'gate'>): Loaded<FlowGate> | undefined {
    return this.#known.get(`${ref.projectId}/${ref.id}`)
  }

  remember(ref: Ref<'gate'>, result: CommandResult<FlowGateEvent, FlowGate>): void {
    const key = `${ref.projectId}/${ref.id}`
    this.#known.delete(key)
    if (result.state === null) return
    if (this.#known.size >= this.capacity) this.#known.delete(this.#known.keys().next().value!)
    this.#known.set(key, { state: result.state, seq: result.seq })
  }

  forget(ref: Ref<'gate'>): void {
    this.#known.delete(`${ref.projectId}/${ref.id}`)
  }
}

type GateDeps = Pick<Deps, 'store' | 'newUlid' | 'now'> & { gateStates?: GateStates }

/** A decision on a gate, from the state this process knows of it when it knows one. */
async function decideOnGate(deps: GateDeps, ref: Ref<'gate'>, command: FlowGateCommand): Promise<CommandResult<FlowGateEvent, FlowGate>> {
  const states = deps.gateStates
  try {
    const result = await gateHandler.decide(deps, ref, command, { hint: states?.get(ref) })
    states?.remember(ref, result)
    return result
  } catch (err) {
    // A refusal, a conflict or a failure leaves the gate's latest state unknown here.
    states?.forget(ref)
    throw err
  }
}

/** A gate's subject: a digest of its name (a key may hold any character; a subject token may not). */
export function gateRef(projectId: string, name: string): Ref<'gate'> {
  return gateHandler.ref(projectId, `fgt_${sha256Hex(name).slice(0, 40)}`)
}

export function gateRefOf(projectId: string, address: GateAddress): Ref<'gate'> {
  return gateRef(projectId, gateNameOf(address))
}

const meta = (deps: GateDeps) => ({ now: deps.now().toISOString() })

function takeCommand(deps: GateDeps, gate: GateSpec, jobId: string, attempt: number): FlowGateCommand {
  const { queue, by, key, concurrency, rate } = gate
  return { type: 'take_gate', data: { queue, by, key, job_id: jobId, attempt, concurrency, rate }, meta: meta(deps) }
}

/**
 * Whether this process's last word on each of the gates says it has room for the attempt now: a
 * forecast (another process may have taken the room since), which lets the claim append its take
 * and the job's claim together instead of one after the other. False when a gate is unknown here.
 */
export function expectRoom(deps: GateDeps, projectId: string, jobId: string, attempt: number, gates: readonly GateSpec[]): boolean {
  const states = deps.gateStates
  if (states === undefined) return false
  return gates.every((gate) => {
    const known = states.get(gateRefOf(projectId, gate))
    if (known === undefined) return false
    try {
      return flowGateDecider.decide(takeCommand(deps, gate, jobId, attempt), known.state).length > 0
    } catch {
      return false
    }
  })
}

/**
 * Takes a slot (and a token) in each gate for the attempt, in order; on a refusal gives back what
 * it took and throws LimitRefused. Resolves to the names of the gates taken.
 */
export async function takeGates(deps: GateDeps, projectId: string, jobId: string, attempt: number, gates: readonly GateSpec[]): Promise<string[]> {
  const taken: GateSpec[] = []
  for (const gate of gates) {
    try {
      await decideOnGate(deps, gateRefOf(projectId, gate), takeCommand(deps, gate, jobId, attempt))
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
  await decideOnGate(deps, gateRef(projectId, name), { type: 'free_gate', data: { job_id: jobId, attempt, reason, rate }, meta: meta(deps) })
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
  await decideOnGate(deps, gateRefOf(projectId, gate), {
    type: 'hold_gate',
    data: { queue: gate.queue, by: gate.by, key: gate.key, job_id: jobId, until },
    meta: meta(deps),
  })
}

/** The gate as its last message left it; null when nothing ever took it. */
export async function loadGate(deps: GateDeps, projectId: string, address: GateAddress): Promise<FlowGate | null> {
  return (await gateHandler.load(deps.store, gateRefOf(projectId, address))).state
}
