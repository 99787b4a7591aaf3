import assert from 'node:assert/strict'
import type { Test } from 'tap'
import { ulid } from 'ulid'
import { applyBatch } from '../../projections/checkpoints.ts'
import type { Sql } from '../../projections/database.ts'
import type { Projection } from '../../projections/projection.ts'
import type { AggregateHandler, Ref } from '../../streams/aggregate-handler.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import type { AggregateKind } from '../../streams/names.ts'
import type { TestLike } from './harness.ts'
import { openIsolatedStore } from './isolated-store.ts'

/**
 * One read model on this test file's own log and database (test/projections/<read-model>.test.ts):
 *
 * - `decide` runs a command against the real log and reads its message back, as the projector
 *   receives it (msgpack and all);
 * - `project` applies messages the projector's way: in one transaction with the checkpoint;
 * - `redeliveryChangesNothing` projects messages, then has them arrive again.
 */
export async function openProjectionBench(t: TestLike, file: string, projection: Projection) {
  const { sql, store } = await openIsolatedStore(t, file)
  const project = (records: readonly EventRecord[]) => applyBatch(sql, [projection], records)
  return {
    sql,
    async decide<K extends AggregateKind, C>(handler: AggregateHandler<K, C, any, any, any>, ref: Ref<K>, command: NoInfer<C>): Promise<EventRecord> {
      const result = await handler.decide({ store, newUlid: ulid }, ref, command)
      assert.ok(result.appended, `the ${ref.aggregate} decided no event`)
      return (await store.nextOf(ref, result.seq))!
    },
    project,
    /**
     * Projects `records`, then delivers the first of them again, and then all of them, as a
     * redelivery could reach the model: through the checkpoint (which skips them) and, unless
     * `pastCheckpoint` is false (a model of sums that relies on the checkpoint alone), straight
     * into `apply`, whose own guards must skip them. Asserts that the model's tables are
     * unchanged, row versions included, so that no row was even written again.
     */
    async redeliveryChangesNothing(
      t: Pick<Test, 'same'>,
      records: readonly EventRecord[],
      options: { pastCheckpoint?: boolean } = {},
    ): Promise<void> {
      await project(records)
      const before = await tableRows(sql, projection.tables)
      for (const again of [records.slice(0, 1), records]) {
        await project(again)
        if (options.pastCheckpoint !== false) await sql.begin((tx) => projection.apply(tx, again))
      }
      t.same(await tableRows(sql, projection.tables), before, 'no row written again')
    },
  }
}

/** Each row as its version (`xmin`) and Postgres's text of it: a rewrite with equal values shows. */
async function tableRows(sql: Sql, tables: readonly string[]): Promise<Record<string, string[]>> {
  const read = async (table: string) => {
    const rows = await sql.unsafe<{ row: string }[]>(`SELECT r.xmin::text || ' ' || r::text AS row FROM "${table}" r ORDER BY r::text`)
    return [table, rows.map((r) => r.row)] as const
  }
  return Object.fromEntries(await Promise.all(tables.map(read)))
}
