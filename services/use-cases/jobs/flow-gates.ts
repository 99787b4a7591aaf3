import { InvalidState } from '../../../domain/errors.ts'
import {
  flowGateDecider,
  GateContended,
  gateNameOf,
  GateRefusal,
  isHolderEnded,
  LimitRefused,
  type AttemptRef,
  type BucketRule,
  type FlowGate,
  type FlowGateCommand,
  type FlowGateEvent,
  type GateAddress,
  type GateHolder,
  type GateSpec,
  type HoldRef,
} from '../../../domain/flow-gate.ts'
import { randomBytes } from 'node:crypto'
import type { CommandResult, Ref } from '../../../streams/aggregate-handler.ts'
import type { Job } from '../../../domain/job.ts'
import { gateHandler, jobHandler } from '../../../streams/aggregates.ts'
import type { Loaded } from '../../../streams/event-store.ts'
import { ConcurrencyConflict } from '../../../streams/errors.ts'
import { sha256Hex } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * The edge of the flow gates (domain/flow-gate.ts): where a claim takes its job's gates (freeing
 * on the way the slots of attempts that ended), where a release or a claim that did not happen
 * frees them, where a worker's "rate limited" holds one, and where the reaper tidies an idle gate.
 * Every step is an append with an expected sequence on the gate's subject; what memory holds
 * (GateStates, EndedAttempts) only saves loads, never decides.
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

/**
 * Attempts this process ended by spending them (an ack, a reap, a running cancel), whose slots
 * stay on their gates until a take needs the room: a take finds them here instead of loading
 * their jobs. That an attempt spent its number never becomes untrue, so an entry can only be
 * forgotten, never wrong. Bounded; the oldest go first (a take then loads the job).
 */
export class EndedAttempts {
  readonly #ended = new Set<string>()
  constructor(readonly capacity = 100_000) {}

  add(projectId: string, jobId: string, attempt: number): void {
    const name = endedName(projectId, { job_id: jobId, attempt })
    this.#ended.delete(name)
    if (this.#ended.size >= this.capacity) this.#ended.delete(this.#ended.values().next().value!)
    this.#ended.add(name)
  }

  has(projectId: string, holder: AttemptRef): boolean {
    return this.#ended.has(endedName(projectId, holder))
  }
}

const endedName = (projectId: string, holder: AttemptRef) => `${projectId}/${holder.job_id}#${holder.attempt}`

type GateDeps = Pick<Deps, 'store' | 'newUlid' | 'now'> & { gateStates?: GateStates; endedAttempts?: EndedAttempts }

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
  return gateHandler.ref(projectId, gateIdOf(name))
}

/** Digests of the gate names met lately: every limited claim names its gates, mostly the same few thousand. */
const gateIds = new Map<string, string>()
const gateIdsKept = 20_000

function gateIdOf(name: string): string {
  let id = gateIds.get(name)
  if (id !== undefined) return id
  id = `fgt_${sha256Hex(name).slice(0, 40)}`
  if (gateIds.size >= gateIdsKept) gateIds.delete(gateIds.keys().next().value!)
  gateIds.set(name, id)
  return id
}

export function gateRefOf(projectId: string, address: GateAddress): Ref<'gate'> {
  return gateRef(projectId, gateNameOf(address))
}

const meta = (deps: GateDeps) => ({ now: deps.now().toISOString() })

function takeCommand(deps: GateDeps, gate: GateSpec, claim: ClaimHold, ended: readonly AttemptRef[]): FlowGateCommand {
  const { queue, by, key, concurrency, rate } = gate
  const { job_id, attempt, hold } = claim
  return { type: 'take_gate', data: { queue, by, key, job_id, attempt, hold, concurrency, rate, ended }, meta: meta(deps) }
}

/** One claim of a job's attempt, as its gates name it: the hold is the claim's own id, the same in each of its gates and on the job's claim. */
export interface ClaimHold {
  job_id: string
  attempt: number
  hold: string
}

/** A new claim's hold id: it tells apart claims of one attempt number (a claim handed back leaves the next one its number). */
export const newHoldId = (): string => randomBytes(6).toString('base64url')

/** The gate's holders this process knows ended (EndedAttempts): no I/O. */
function knownEndedOf(deps: GateDeps, projectId: string, gate: FlowGate | null): AttemptRef[] {
  const ended = deps.endedAttempts
  if (gate === null || ended === undefined) return []
  return gate.holders.filter((h) => ended.has(projectId, h))
}

/**
 * The gate's holders that ended, as far as a take needs to know: those this process knows of,
 * and when they leave the gate full, every other holder checked against its job on the log (one
 * direct get each, at once). A holder found ended is remembered, so the next take knows it.
 */
async function endedHoldersOf(deps: GateDeps, projectId: string, spec: GateSpec, gate: FlowGate | null): Promise<AttemptRef[]> {
  const known = knownEndedOf(deps, projectId, gate)
  if (gate === null || spec.concurrency === null || gate.holders.length - known.length < spec.concurrency) return known
  const unknown = gate.holders.filter((h) => !known.includes(h))
  const jobs = await Promise.all(unknown.map((h) => jobHandler.load(deps.store, jobHandler.ref(projectId, h.job_id))))
  const found = unknown.filter((h, i) => isHolderEnded(jobs[i]!.state, h))
  for (const h of found) deps.endedAttempts?.add(projectId, h.job_id, h.attempt)
  return [...known, ...found]
}

/**
 * Whether this process's last word on each of the gates says it has room for the attempt now
 * (counting the slots of attempts it knows ended as room): a forecast (another process may have
 * taken the room since), which lets the claim append its take and the job's claim together
 * instead of one after the other. False when a gate is unknown here.
 */
export function expectRoom(deps: GateDeps, projectId: string, claim: ClaimHold, gates: readonly GateSpec[]): boolean {
  const states = deps.gateStates
  if (states === undefined) return false
  return gates.every((gate) => {
    const known = states.get(gateRefOf(projectId, gate))
    if (known === undefined) return false
    try {
      const ended = knownEndedOf(deps, projectId, known.state)
      return flowGateDecider.decide(takeCommand(deps, gate, claim, ended), known.state).length > 0
    } catch {
      return false
    }
  })
}

/** Decisions of one take, each on a newer state of the gate, before it counts as contended (handleCommand's 1 + 3). */
const maxTakeDecisions = 4

/**
 * Takes a slot (and a token) in one gate for the attempt. The ended holders a take frees depend
 * on the state it is decided on, so the take decides on its state itself rather than letting
 * handleCommand decide the same command again on a newer one: each decision starts from a state
 * (this process's last word on the gate, else a load), finds its ended holders, and is appended
 * once at that state's sequence. A conflict, or a refusal decided on a remembered state, is
 * decided again on a loaded one; a refusal is final only on a state just loaded, whose every
 * holder was checked.
 */
async function takeGate(deps: GateDeps, projectId: string, gate: GateSpec, claim: ClaimHold): Promise<void> {
  const ref = gateRefOf(projectId, gate)
  const states = deps.gateStates
  let known = states?.get(ref)
  for (let decision = 1; ; decision++) {
    const loaded = known === undefined
    const at = known ?? (await gateHandler.load(deps.store, ref))
    known = undefined
    try {
      const ended = await endedHoldersOf(deps, projectId, gate, at.state)
      const command = takeCommand(deps, gate, claim, ended)
      const result = await gateHandler.decide(deps, ref, command, { hint: at, trustHint: true })
      states?.remember(ref, result)
      return
    } catch (err) {
      states?.forget(ref)
      const decidedOnStale = err instanceof ConcurrencyConflict || (!loaded && (err instanceof GateRefusal || err instanceof InvalidState))
      if (!decidedOnStale || decision >= maxTakeDecisions) throw err
    }
  }
}

/**
 * Takes a slot (and a token) in each gate for the attempt, in order; on a refusal gives back what
 * it took and throws LimitRefused. Resolves to the names of the gates taken.
 */
export async function takeGates(deps: GateDeps, projectId: string, claim: ClaimHold, gates: readonly GateSpec[]): Promise<string[]> {
  const taken: GateSpec[] = []
  for (const gate of gates) {
    try {
      await takeGate(deps, projectId, gate, claim)
      taken.push(gate)
    } catch (err) {
      await giveBack(deps, projectId, claim, taken)
      if (err instanceof GateRefusal) throw new LimitRefused(err, gate)
      // A conflict on the gate is not one on the job: the caller must not take the job as moved on.
      if (err instanceof ConcurrencyConflict) throw new GateContended(gate)
      throw err
    }
  }
  return taken.map(gateNameOf)
}

/** Gives back the slots and tokens of a claim that did not happen (its append lost or failed). */
export async function giveBack(deps: GateDeps, projectId: string, claim: ClaimHold, gates: readonly GateSpec[]): Promise<void> {
  await Promise.all(gates.map((g) => freeGate(deps, projectId, gateNameOf(g), claim, 'unclaimed', g.rate)))
}

/** Frees the claim's slot in the named gate (a no-op when it holds none there; `hold` absent: any hold of the attempt). */
export async function freeGate(
  deps: GateDeps,
  projectId: string,
  name: string,
  claim: HoldRef,
  reason: 'ended' | 'unclaimed' | 'reconciled',
  rate: BucketRule | null = null,
): Promise<void> {
  const { job_id, attempt, hold } = claim
  await decideOnGate(deps, gateRef(projectId, name), { type: 'free_gate', data: { job_id, attempt, hold, reason, rate }, meta: meta(deps) })
}

/**
 * How long a slot may be held by an attempt that is not running (and has not ended) before the
 * reconciliation frees it: well past the milliseconds between a claim's gate append and its job
 * append. It is also how long a gate's slot stays unchecked by the reaper.
 */
export const unclaimedSlotGraceMs = 10_000

/**
 * The reaper's reconciliation of one gate (issue 29), one append for all it frees: the slots of
 * attempts that ended (no take needed their room; `isHolderEnded`), and those of attempts that
 * are not running and were taken more than `unclaimedSlotGraceMs` ago, which a crash left between
 * a gate's append and the job's (a claim that never happened, or a release whose free never ran).
 * `jobOf` is the job as the log has it now, null when it is gone. Resolves to the slots freed, of each kind.
 */
export async function reconcileGate(
  deps: GateDeps,
  projectId: string,
  gateId: string,
  holders: readonly GateHolder[],
  jobOf: (jobId: string) => Promise<Pick<Job, 'attempt' | 'state' | 'gate_hold'> | null>,
): Promise<{ ended: number; unclaimed: number }> {
  const before = deps.now().getTime() - unclaimedSlotGraceMs
  const jobs = await Promise.all(holders.map((h) => jobOf(h.job_id)))
  const ended: GateHolder[] = []
  const unclaimed: GateHolder[] = []
  holders.forEach((h, i) => {
    const job = jobs[i] ?? null
    if (isHolderEnded(job, h)) ended.push(h)
    else if (job !== null && !isRunningHold(job, h) && Date.parse(h.taken_at) <= before) unclaimed.push(h)
  })
  if (ended.length + unclaimed.length === 0) return { ended: 0, unclaimed: 0 }
  const result = await gateHandler.decide(deps, gateHandler.ref(projectId, gateId), {
    type: 'free_gate_slots',
    data: { holders: [...ended, ...unclaimed].map(({ job_id, attempt, hold }) => ({ job_id, attempt, hold })), reason: 'reconciled' },
    meta: meta(deps),
  })
  const freed = new Set(result.events.map((e) => endedName(projectId, e.data as AttemptRef)))
  const count = (of: GateHolder[]) => of.filter((h) => freed.has(endedName(projectId, h))).length
  return { ended: count(ended), unclaimed: count(unclaimed) }
}

/** Whether the job is running the holder's claim: its attempt, under the same hold where both name one. */
function isRunningHold(job: Pick<Job, 'attempt' | 'state' | 'gate_hold'>, holder: HoldRef): boolean {
  if (job.state !== 'processing' || job.attempt !== holder.attempt) return false
  return job.gate_hold === undefined || holder.hold === undefined || job.gate_hold === holder.hold
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
