import type { Decider } from '../../domain/decider.ts'
import type { Queryable } from '../../projections/database.ts'
import type { AggregateRef, DomainEventShape, EventRecord } from '../../streams/event-store.ts'
import { handleCommand, type CommandResult } from '../../streams/handle-command.ts'
import type { Deps } from './runtime.ts'

/**
 * Decides and appends `command` on the aggregate `ref` (`handleCommand`, with this install's
 * event ids), then, when it appended, writes the message's read-model rows with `writeRows` on
 * `db` (a transaction of the caller's, or the pool). The projector writes the same rows later,
 * guarded by `last_seq`; writing them at once lets a read right after the change, and the
 * scheduler, see it.
 */
export async function commandWithRows<C extends { meta: { now: string } }, E extends DomainEventShape, S>(
  deps: Pick<Deps, 'store' | 'sql' | 'newUlid'>,
  decider: Decider<C, E, S | null>,
  ref: AggregateRef,
  command: C,
  writeRows: (db: Queryable, records: readonly EventRecord[]) => Promise<void>,
  db: Queryable = deps.sql,
): Promise<CommandResult<E, S>> {
  const result = await handleCommand<C, E, S>(deps.store, decider, ref, command, () => `evt_${deps.newUlid()}`)
  if (result.appended) await writeRows(db, [result.record])
  return result
}
