import type { Queryable } from '../../projections/database.ts'
import type { AggregateHandler, CommandResult, Ref } from '../../streams/aggregate-handler.ts'
import type { DomainEventShape, EventRecord } from '../../streams/event-store.ts'
import type { AggregateKind } from '../../streams/names.ts'
import type { Deps } from './runtime.ts'

/**
 * Decides and appends `command` on the aggregate `ref` through its handler, then, when it
 * appended, writes the message's read-model rows with `writeRows` on `db` (a transaction of the
 * caller's, or the pool). The projector writes the same rows later, guarded by `last_seq`;
 * writing them at once lets a read right after the change, and the scheduler, see it.
 */
export async function commandWithRows<K extends AggregateKind, C, E extends DomainEventShape, S>(
  deps: Pick<Deps, 'store' | 'sql' | 'newUlid'>,
  handler: AggregateHandler<K, C, E, S, any>,
  ref: Ref<K>,
  command: C,
  writeRows: (db: Queryable, records: readonly EventRecord[]) => Promise<void>,
  db: Queryable = deps.sql,
): Promise<CommandResult<E, S>> {
  const result = await handler.decide(deps, ref, command)
  if (result.appended) await writeRows(db, [result.record])
  return result
}
