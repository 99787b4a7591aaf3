import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { InvalidState, OperationNotFound } from './errors.ts'

/**
 * A long-running action of a project, run in the background and followed through
 * `GET /jobsvc/v1/operations/{id}`: a webhook replay today, bulk job actions later. The aggregate
 * knows nothing of what its kind does: `params` are the kind's, `cursor` is where its run has
 * reached (opaque here, the kind's own position), and the counts are the run's. A run records its
 * progress before it acts on the items it counts, so a run that stops (a restart, a crash) goes on
 * from its cursor, and a cancellation is seen by the next record, which it refuses.
 */

export const operationStatuses = ['running', 'succeeded', 'cancelled', 'failed'] as const
export type OperationStatus = (typeof operationStatuses)[number]

/** Why an operation failed: a code of the error reference and a sentence. */
export interface OperationError {
  code: string
  message: string
}

export interface Operation {
  id: string
  project_id: string
  kind: string
  params: Record<string, unknown>
  status: OperationStatus
  /** Items the operation found to act on. */
  matched: number
  /** Items it has acted on (or handed on to be acted on), never taken back. */
  processed: number
  /** Of those, the ones that ended well, and the ones that ended badly, as far as known. */
  succeeded: number
  failed: number
  /** Where the run has reached, in the kind's own terms; null before its first item. */
  cursor: string | null
  error: OperationError | null
  created_at: string
  updated_at: string
  finished_at: string | null
}

export type OperationAggregate = Operation | null

export type OperationEvent =
  | {
      type: 'operation_started'
      data: { operation_id: string; project_id: string; kind: string; params: Record<string, unknown>; matched: number; started_at: string }
    }
  | { type: 'operation_progressed'; data: { cursor: string | null; processed: number; succeeded: number; failed: number; progressed_at: string } }
  | { type: 'operation_succeeded'; data: { matched: number; processed: number; succeeded: number; failed: number; finished_at: string } }
  | { type: 'operation_cancelled'; data: { cancelled_at: string } }
  | { type: 'operation_failed'; data: { error: OperationError; failed_at: string } }

export type OperationEventType = OperationEvent['type']

export type OperationCommand =
  | {
      type: 'start_operation'
      data: { operation_id: string; project_id: string; kind: string; params: Record<string, unknown>; matched: number }
      meta: CommandMeta
    }
  /** Counts are totals, not increments: a record older than the state's (a stale run) decides nothing. */
  | { type: 'record_progress'; data: { cursor: string | null; processed: number; succeeded: number; failed: number }; meta: CommandMeta }
  /**
   * The outcomes (totals) of items already counted as processed, also once the operation was
   * stopped: a run that had handed items on before the stop records how they ended, so that a
   * cancelled operation's counts add up. Refused once it has ended otherwise.
   */
  | { type: 'record_outcomes'; data: { succeeded: number; failed: number }; meta: CommandMeta }
  /** `matched`: what the run found in the end, when it differs from the count it was started with. */
  | { type: 'finish_operation'; data: { matched: number; succeeded: number; failed: number }; meta: CommandMeta }
  | { type: 'cancel_operation'; data: Record<string, never>; meta: CommandMeta }
  | { type: 'fail_operation'; data: { error: OperationError }; meta: CommandMeta }

function requireOperation(state: OperationAggregate): Operation {
  if (state === null) throw new OperationNotFound('the operation was not found')
  return state
}

function requireRunning(state: OperationAggregate): Operation {
  const op = requireOperation(state)
  if (op.status !== 'running') throw new InvalidState(`the operation is ${op.status}`)
  return op
}

function decide(command: OperationCommand, state: OperationAggregate): OperationEvent[] {
  const now = command.meta.now
  switch (command.type) {
    case 'start_operation':
      if (state !== null) throw new InvalidState('an operation with this id exists already')
      return [{ type: 'operation_started', data: { ...command.data, started_at: now } }]
    case 'record_progress': {
      const op = requireRunning(state)
      const d = command.data
      if (d.processed < op.processed) return []
      if (d.processed === op.processed && d.cursor === op.cursor && d.succeeded === op.succeeded && d.failed === op.failed) return []
      return [{ type: 'operation_progressed', data: { ...d, progressed_at: now } }]
    }
    case 'record_outcomes': {
      const op = requireOperation(state)
      if (op.status !== 'running' && op.status !== 'cancelled') throw new InvalidState(`the operation has already ended (${op.status})`)
      const { succeeded, failed } = command.data
      if (succeeded === op.succeeded && failed === op.failed) return []
      return [{ type: 'operation_progressed', data: { cursor: op.cursor, processed: op.processed, succeeded, failed, progressed_at: now } }]
    }
    case 'finish_operation': {
      const op = requireRunning(state)
      return [{ type: 'operation_succeeded', data: { ...command.data, processed: op.processed, finished_at: now } }]
    }
    case 'cancel_operation': {
      const op = requireOperation(state)
      if (op.status === 'cancelled') return []
      if (op.status !== 'running') throw new InvalidState(`the operation has already ended (${op.status})`)
      return [{ type: 'operation_cancelled', data: { cancelled_at: now } }]
    }
    case 'fail_operation':
      requireRunning(state)
      return [{ type: 'operation_failed', data: { error: command.data.error, failed_at: now } }]
  }
}

function evolve(state: OperationAggregate, event: OperationEvent): OperationAggregate {
  if (event.type === 'operation_started') {
    const d = event.data
    return {
      id: d.operation_id,
      project_id: d.project_id,
      kind: d.kind,
      params: d.params,
      status: 'running',
      matched: d.matched,
      processed: 0,
      succeeded: 0,
      failed: 0,
      cursor: null,
      error: null,
      created_at: d.started_at,
      updated_at: d.started_at,
      finished_at: null,
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'operation_started')
  switch (event.type) {
    case 'operation_progressed': {
      const { progressed_at, ...counts } = event.data
      return { ...state, ...counts, updated_at: progressed_at }
    }
    case 'operation_succeeded': {
      const { finished_at, ...counts } = event.data
      return { ...state, ...counts, status: 'succeeded', updated_at: finished_at, finished_at }
    }
    case 'operation_cancelled':
      return { ...state, status: 'cancelled', updated_at: event.data.cancelled_at, finished_at: event.data.cancelled_at }
    case 'operation_failed':
      return { ...state, status: 'failed', error: event.data.error, updated_at: event.data.failed_at, finished_at: event.data.failed_at }
  }
}

export const operationDecider: Decider<OperationCommand, OperationEvent, OperationAggregate> = { initialState: null, decide, evolve }
