import type { Actor } from '../../../domain/decider.ts'
import { OperationNotFound } from '../../../domain/errors.ts'
import type { Operation, OperationCommand, OperationEvent } from '../../../domain/operation.ts'
import { applyOperationRows } from '../../../projections/operations.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { operationHandler } from '../../../streams/aggregates.ts'
import { commandWithRows } from '../../infrastructure/command-with-rows.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

const operationIdPattern = /^op_[0-9a-z]{26}$/

/**
 * A project's operations (domain/operation.ts) as callers see them: started by the use case of
 * their kind (a webhook replay, services/use-cases/webhooks/replay.ts), read and stopped here, run
 * by the dispatcher role. Starting and stopping write the list's row at once, so the list and the
 * role that runs operations see the change without waiting for the projector.
 */
export class OperationService {
  readonly #deps: Deps

  constructor(deps: Deps) {
    this.#deps = deps
  }

  #meta(actor: Actor | undefined) {
    return { now: this.#deps.now().toISOString(), actor }
  }

  #on(projectId: string, operationId: string, command: OperationCommand): Promise<CommandResult<OperationEvent, Operation>> {
    return commandWithRows(this.#deps, operationHandler, operationHandler.ref(projectId, operationId), command, applyOperationRows)
  }

  /** A new operation of `kind`, running from now on, with what it found to do. */
  start(projectId: string, kind: string, params: Record<string, unknown>, matched: number, actor?: Actor) {
    const operationId = `op_${this.#deps.newUlid().toLowerCase()}`
    return this.#on(projectId, operationId, {
      type: 'start_operation',
      data: { operation_id: operationId, project_id: projectId, kind, params, matched },
      meta: this.#meta(actor),
    })
  }

  /** The operation as the log holds it now; OperationNotFound when the project has none of that id. */
  async load(projectId: string, operationId: string): Promise<Operation> {
    const op = operationIdPattern.test(operationId)
      ? (await operationHandler.load(this.#deps.store, operationHandler.ref(projectId, operationId))).state
      : null
    if (op === null) throw new OperationNotFound(`operation ${operationId} was not found`)
    return op
  }

  /** Stops a running operation: what it did stays done, it does nothing more. Stopping it again changes nothing. */
  async cancel(projectId: string, operationId: string, actor?: Actor): Promise<CommandResult<OperationEvent, Operation>> {
    await this.load(projectId, operationId)
    return this.#on(projectId, operationId, { type: 'cancel_operation', data: {}, meta: this.#meta(actor) })
  }
}
