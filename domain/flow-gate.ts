import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { InvalidState } from './errors.ts'
import type { Job } from './job.ts'
import type { ConcurrencyStrategy, FlowLimits, KeyDimension } from './project/queue-limits.ts'

/**
 * A flow gate (issue 29): one aggregate per limited thing of a queue, the queue itself or one of
 * its keys. It holds the slots of the jobs running under it (a concurrency limit), the tokens of
 * its bucket of starts (a rate limit) and a worker's "rate limited" hold. A claim takes a slot in
 * each of its job's gates, each an append with an expected sequence, before it appends the
 * claim itself, so two API processes can never both take the last slot: the loser's append
 * conflicts, it decides again on the winner's state and is refused. Nothing of this lives in one
 * process's memory.
 *
 * An attempt that ends by spending its number (succeeded, failed, dead-lettered, cancelled while
 * running) keeps its slot on the log until a take needs the room: the take names the holders its
 * caller verified ended on the log (`isHolderEnded`, a fact that never becomes untrue) and frees
 * them in its own event, so a job's end costs no append on its gates. A release does not spend
 * the attempt (the next claim reuses the number), so it frees its slots at once. The reaper's
 * reconciliation frees what an idle gate still holds: ended attempts, and the slots a crash left
 * between a gate's append and the job's (services/use-cases/jobs/flow-gates.ts). The limits
 * themselves are the queue's (domain/project/queue-limits.ts) and arrive on each command, so a
 * change applies to the next claim.
 */

/** What names a gate: its queue, and for a key's gate the key's dimension and value. */
export interface GateAddress {
  queue: string
  /** null: the queue's own gate. */
  by: KeyDimension | null
  key: string | null
}

/** One attempt of a job, as a gate names its holders. */
export interface AttemptRef {
  job_id: string
  attempt: number
}

/**
 * One claim's hold on its attempt's slots: `hold` names the claim that took them (one id for all
 * the gates of one claim), because an attempt number alone does not name it — a claim handed back
 * (a release, a take that lost) leaves the next claim the same number, and a free meant for the
 * first must not free the second's slot. Absent in events written before holds were named (such a
 * holder is freed by its attempt alone).
 */
export interface HoldRef extends AttemptRef {
  hold?: string
}

export interface GateHolder extends HoldRef {
  taken_at: string
}

export interface FlowGate extends GateAddress {
  /** The attempts holding a slot, oldest first: running ones, and ended ones no take has needed the room of yet. */
  holders: GateHolder[]
  /** The bucket's tokens at `refilled_at`; null before the first start it counted (a full bucket). */
  tokens: number | null
  refilled_at: string | null
  /** The hold (`job#attempt#hold`) that took the last token, which a claim that failed after it may give back. */
  last_token: string | null
  /** Until when a worker's `rate_limited` ack holds the gate shut; null: not held. */
  held_until: string | null
}

export type FlowGateAggregate = FlowGate | null

export interface BucketRule {
  limit: number
  period_seconds: number
  burst: number
}

export type FlowGateEvent =
  | {
      type: 'gate_slot_taken'
      data: GateAddress & {
        job_id: string
        attempt: number
        taken_at: string
        /** Whether the attempt holds a slot (the gate bounds running jobs) and took a token (it bounds starts). */
        slot: boolean
        token: boolean
        /** The bucket's tokens after this start; null when the gate counts no starts. */
        tokens: number | null
        /** The claim's hold (HoldRef); absent in events written before holds were named. */
        hold?: string
        /** Ended attempts whose slots this take freed first (absent when none, and in events written before it existed). */
        freed?: HoldRef[]
      }
    }
  | {
      type: 'gate_slot_freed'
      data: {
        job_id: string
        attempt: number
        /** The hold freed; absent: every hold of the attempt (events written before holds were named). */
        hold?: string
        freed_at: string
        /** `ended`: the attempt ended (ack, reap, cancel, release); `unclaimed`: its claim did not happen; `reconciled`: the reaper found it gone. */
        reason: 'ended' | 'unclaimed' | 'reconciled'
        /** The bucket's tokens after a token given back (a claim that did not start); absent otherwise. */
        tokens?: number
      }
    }
  | { type: 'gate_held'; data: GateAddress & { job_id: string; until: string; held_at: string } }

export type FlowGateCommand =
  | {
      type: 'take_gate'
      /** `ended`: holders the caller verified ended on the log (isHolderEnded); their slots are freed before the room is counted. */
      data: GateAddress & {
        job_id: string
        attempt: number
        /** The claim's hold, one id for all the gates one claim takes (HoldRef). */
        hold?: string
        concurrency: number | null
        rate: BucketRule | null
        ended: readonly AttemptRef[]
      }
      meta: CommandMeta
    }
  | {
      type: 'free_gate'
      /** `rate`: the gate's bucket, when a token is to be given back (`unclaimed`). */
      data: { job_id: string; attempt: number; hold?: string; reason: 'ended' | 'unclaimed' | 'reconciled'; rate?: BucketRule | null }
      meta: CommandMeta
    }
  | {
      type: 'free_gate_slots'
      /** Several attempts' slots at once, one event each in one message (the reaper's reconciliation of an idle gate). */
      data: { holders: readonly HoldRef[]; reason: 'ended' | 'reconciled' }
      meta: CommandMeta
    }
  | { type: 'hold_gate'; data: GateAddress & { job_id: string; until: string }; meta: CommandMeta }

export type RefusalReason = 'concurrency' | 'rate' | 'held'

/**
 * A gate that has no room for the attempt: full (`concurrency`, with its oldest holder, whom
 * `cancel_in_progress` asks to stop), out of tokens (`rate`) or held by a worker (`held`), the
 * last two with when to try again. Not a DomainError: it never reaches a client, the claimer
 * passes over the job.
 */
export class GateRefusal extends Error {
  constructor(
    readonly reason: RefusalReason,
    readonly retryAtMs: number | null,
    readonly oldestHolder: GateHolder | null,
  ) {
    super(`the gate refuses: ${reason}`)
    this.name = 'GateRefusal'
  }
}

/** A claim refused by one of its gates, and which (never reaches a client: the claimer passes over the job). */
export class LimitRefused extends Error {
  constructor(
    readonly refusal: GateRefusal,
    readonly gate: GateSpec,
  ) {
    super(`job refused by gate ${gateNameOf(gate)}: ${refusal.reason}`)
    this.name = 'LimitRefused'
  }
}

/**
 * A gate so contended that the take lost every re-decision (many claims of one key at once): the
 * job is not claimed now, and not refused either; it stays a candidate (the job itself did not move).
 */
export class GateContended extends Error {
  constructor(readonly gate: GateSpec) {
    super(`gate ${gateNameOf(gate)} is contended`)
    this.name = 'GateContended'
  }
}

/** The bucket's tokens at `now`: what it had, refilled at `limit` per `period_seconds`, never above `burst`. */
export function tokensAt(gate: Pick<FlowGate, 'tokens' | 'refilled_at'> | null, rule: BucketRule, now: string): number {
  if (gate === null || gate.tokens === null || gate.refilled_at === null) return rule.burst
  const elapsedS = Math.max(0, (Date.parse(now) - Date.parse(gate.refilled_at)) / 1000)
  return Math.min(rule.burst, gate.tokens + (elapsedS * rule.limit) / rule.period_seconds)
}

function holds(gate: FlowGate | null, jobId: string, attempt: number): boolean {
  return gate?.holders.some((h) => h.job_id === jobId && h.attempt === attempt) ?? false
}

const isSameAttempt = (a: AttemptRef, b: AttemptRef) => a.job_id === b.job_id && a.attempt === b.attempt

/** Whether `ref` names the holder's hold: the same attempt, and the same claim where both name theirs. */
const isSameHold = (ref: HoldRef, holder: HoldRef) =>
  isSameAttempt(ref, holder) && (ref.hold === undefined || holder.hold === undefined || ref.hold === holder.hold)

const holdData = (hold: string | undefined) => (hold === undefined ? {} : { hold })

/**
 * Whether a gate's holder has ended, given its job as the log has it now (null: the job is gone,
 * deleted by retention). An attempt that spent its number never runs again: the job's attempt
 * only moves past it, and a job on that attempt is not running it any more. A released attempt
 * is not spent (the job goes back to the number before it), so it never counts as ended here:
 * the next claim may take the same number.
 */
export function isHolderEnded(job: Pick<Job, 'attempt' | 'state'> | null, holder: AttemptRef): boolean {
  if (job === null) return true
  return job.attempt > holder.attempt || (job.attempt === holder.attempt && job.state !== 'processing')
}

const attemptName = (jobId: string, attempt: number) => `${jobId}#${attempt}`

/** What `last_token` records: the attempt and, where named, its hold. */
const tokenName = (ref: HoldRef) =>
  ref.hold === undefined ? attemptName(ref.job_id, ref.attempt) : `${attemptName(ref.job_id, ref.attempt)}#${ref.hold}`

/** Whether the gate's last token was taken by the attempt (any of its holds). */
const tookLastToken = (gate: FlowGate | null, jobId: string, attempt: number) =>
  gate?.last_token != null && (gate.last_token === attemptName(jobId, attempt) || gate.last_token.startsWith(`${attemptName(jobId, attempt)}#`))

/** Whether the gate's last token is the hold's (a token taken before holds were named is its attempt's). */
const isLastTokenOf = (gate: FlowGate, ref: HoldRef) =>
  gate.last_token === tokenName(ref) || (ref.hold !== undefined && gate.last_token === attemptName(ref.job_id, ref.attempt))

function decide(command: FlowGateCommand, state: FlowGateAggregate): FlowGateEvent[] {
  const { now } = command.meta
  switch (command.type) {
    case 'take_gate': {
      const { job_id, attempt, hold, concurrency, rate, queue, by, key, ended } = command.data
      // The ended holders' slots are free already; the room is counted without them.
      const freed = state?.holders.filter((h) => ended.some((e) => isSameAttempt(e, h))) ?? []
      const gate: FlowGateAggregate = freed.length === 0 ? state : { ...state!, holders: state!.holders.filter((h) => !freed.includes(h)) }
      // Another claim of the same attempt (another poll, another process) took it first: this
      // claim will lose the job's append too, so it must not count the other's slot as its own
      // (giving it back would free a slot that a running job holds).
      if (holds(gate, job_id, attempt) || tookLastToken(gate, job_id, attempt)) {
        throw new InvalidState(`attempt ${attempt} of job ${job_id} holds this gate already`)
      }
      if (gate?.held_until != null && Date.parse(gate.held_until) > Date.parse(now)) {
        throw new GateRefusal('held', Date.parse(gate.held_until), null)
      }
      if (concurrency !== null && (gate?.holders.length ?? 0) >= concurrency) {
        throw new GateRefusal('concurrency', null, gate!.holders[0] ?? null)
      }
      let tokens: number | null = gate?.tokens ?? null
      if (rate !== null) {
        const available = tokensAt(gate, rate, now)
        if (available < 1)
          throw new GateRefusal('rate', Date.parse(now) + Math.ceil(((1 - available) * rate.period_seconds * 1000) / rate.limit), null)
        tokens = available - 1
      }
      return [
        {
          type: 'gate_slot_taken',
          data: {
            queue,
            by,
            key,
            job_id,
            attempt,
            ...holdData(hold),
            taken_at: now,
            slot: concurrency !== null,
            token: rate !== null,
            tokens: rate === null ? null : tokens,
            ...(freed.length === 0 ? {} : { freed: freed.map((h) => ({ job_id: h.job_id, attempt: h.attempt, ...holdData(h.hold) })) }),
          },
        },
      ]
    }
    case 'free_gate': {
      const { job_id, attempt, hold, reason } = command.data
      if (state === null) return []
      // Only the named claim's hold: a free meant for a claim that was handed back must not free
      // the slot of the next claim of the same attempt number.
      const held = state.holders.some((h) => isSameHold({ job_id, attempt, hold }, h))
      // A token goes back only for the start that took it and did not happen, once.
      const rule = command.data.rate ?? null
      const tokenBack = reason === 'unclaimed' && rule !== null && isLastTokenOf(state, { job_id, attempt, hold })
      if (!held && !tokenBack) return []
      const tokens = tokenBack ? { tokens: Math.min(rule.burst, tokensAt(state, rule, now) + 1) } : {}
      return [{ type: 'gate_slot_freed', data: { job_id, attempt, ...holdData(hold), freed_at: now, reason, ...tokens } }]
    }
    case 'free_gate_slots': {
      const { holders, reason } = command.data
      if (state === null) return []
      return state.holders
        .filter((h) => holders.some((x) => isSameHold(x, h)))
        .map((h) => ({
          type: 'gate_slot_freed' as const,
          data: { job_id: h.job_id, attempt: h.attempt, ...holdData(h.hold), freed_at: now, reason },
        }))
    }
    case 'hold_gate': {
      const { queue, by, key, job_id, until } = command.data
      if (state?.held_until != null && Date.parse(state.held_until) >= Date.parse(until)) return []
      return [{ type: 'gate_held', data: { queue, by, key, job_id, until, held_at: now } }]
    }
  }
}

function created(address: GateAddress): FlowGate {
  return { queue: address.queue, by: address.by, key: address.key, holders: [], tokens: null, refilled_at: null, last_token: null, held_until: null }
}

function evolve(state: FlowGateAggregate, event: FlowGateEvent): FlowGateAggregate {
  switch (event.type) {
    case 'gate_slot_taken': {
      const gate = state ?? created(event.data)
      const { job_id, attempt, hold, taken_at, slot, token, tokens, freed = [] } = event.data
      const kept = freed.length === 0 ? gate.holders : gate.holders.filter((h) => !freed.some((f) => isSameHold(f, h)))
      return {
        ...gate,
        holders: slot ? [...kept, { job_id, attempt, ...holdData(hold), taken_at }] : kept,
        ...(token ? { tokens, refilled_at: taken_at, last_token: tokenName({ job_id, attempt, hold }) } : {}),
      }
    }
    case 'gate_slot_freed': {
      if (state === null) throw new EventBeforeCreation(event.type, 'gate_slot_taken')
      const { job_id, attempt, hold, freed_at, tokens } = event.data
      return {
        ...state,
        holders: state.holders.filter((h) => !isSameHold({ job_id, attempt, hold }, h)),
        ...(tokens === undefined ? {} : { tokens, refilled_at: freed_at, last_token: null }),
      }
    }
    case 'gate_held':
      return { ...(state ?? created(event.data)), held_until: event.data.until }
  }
}

export const flowGateDecider: Decider<FlowGateCommand, FlowGateEvent, FlowGateAggregate> = {
  initialState: null,
  decide,
  evolve,
}

/** The fields of a job that make its keys. */
export type KeyedJob = Pick<Job, 'queue' | 'job_type' | 'tags'> & { concurrency_key?: string }

/** The job's key in a dimension; null when it has none there (no `concurrency_key`, no such tag): no key gate then. */
export function keyOf(job: KeyedJob, by: KeyDimension): string | null {
  if (by === 'concurrency_key') return job.concurrency_key ?? null
  if (by === 'job_type') return job.job_type
  return job.tags?.[by.slice('tag:'.length)] ?? null
}

/** One gate a claim of the job must take, with what it bounds. */
export interface GateSpec extends GateAddress {
  concurrency: number | null
  rate: BucketRule | null
  strategy: ConcurrencyStrategy
}

/**
 * The gates a claim of `job` must take under its queue's `limits`, its keys' first (the likelier
 * to refuse, so a refused claim has usually taken nothing yet), the queue's last. A key's
 * concurrency and its rate share one gate when they are counted by the same dimension.
 */
export function gatesOf(limits: FlowLimits, job: KeyedJob): GateSpec[] {
  const { concurrency, rate } = limits
  const strategy = concurrency?.strategy ?? 'queue'
  const bucket = (r: NonNullable<FlowLimits['rate']>): BucketRule => ({ limit: r.limit, period_seconds: r.period_seconds, burst: r.burst })
  const keyed: GateSpec[] = []
  const addKeyed = (by: KeyDimension, part: { concurrency?: number; rate?: BucketRule }) => {
    const key = keyOf(job, by)
    if (key === null) return
    const same = keyed.find((g) => g.by === by && g.key === key)
    if (same !== undefined) Object.assign(same, part)
    else keyed.push({ queue: job.queue, by, key, concurrency: part.concurrency ?? null, rate: part.rate ?? null, strategy })
  }
  if (concurrency?.per_key != null) addKeyed(concurrency.per_key.by, { concurrency: concurrency.per_key.limit })
  if (rate?.by != null) addKeyed(rate.by, { rate: bucket(rate) })
  const queueConcurrency = concurrency?.limit ?? null
  const queueRate = rate !== null && rate.by === null ? bucket(rate) : null
  if (queueConcurrency === null && queueRate === null) return keyed
  return [...keyed, { queue: job.queue, by: null, key: null, concurrency: queueConcurrency, rate: queueRate, strategy }]
}

/**
 * The gate a worker's `rate_limited` ack holds shut: the one that counts the job's starts (its
 * key's, else the queue's), else its key's concurrency gate; null when its queue limits nothing
 * it has (the job alone then waits).
 */
export function holdGateOf(gates: readonly GateSpec[]): GateSpec | null {
  return gates.find((g) => g.rate !== null) ?? gates[0] ?? null
}

/**
 * A gate's stable name: what the job's claim records, what its subject is a digest of, and what
 * the API's polls pass over. JSON, since a queue's name and a key may hold any character.
 */
export function gateNameOf(address: GateAddress): string {
  return JSON.stringify(address.by === null ? [address.queue] : [address.queue, address.by, address.key])
}

/** The queue a gate name belongs to. */
export function queueOfGateName(name: string): string {
  return (JSON.parse(name) as string[])[0]!
}
