import t from 'tap'
import { ulid } from 'ulid'
import type { OperationCommand } from '../../domain/operation.ts'
import { operationList } from '../../projections/operations.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { operationHandler } from '../../streams/aggregates.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, operationList)

const projectId = 'prj_operations'
const at = (minute: number) => `2024-06-01T12:${String(minute).padStart(2, '0')}:00.000Z`

const decide = (ref: Ref<'operation'>, command: OperationCommand) => bench.decide(operationHandler, ref, command)
const newOperation = (): Ref<'operation'> => operationHandler.ref(projectId, `op_${ulid().toLowerCase()}`)
const start = (ref: Ref<'operation'>, minute: number) =>
  decide(ref, {
    type: 'start_operation',
    data: { operation_id: ref.id, project_id: projectId, kind: 'webhook_replay', params: {}, matched: 4 },
    meta: { now: at(minute) },
  })
const row = async (id: string) => (await bench.sql`SELECT * FROM operations WHERE id = ${id}`)[0]

t.test('a row follows its operation: running with its counts, then ended', async (t) => {
  const ref = newOperation()
  await bench.project([await start(ref, 0)])
  t.match(await row(ref.id), { kind: 'webhook_replay', status: 'running', matched: 4, processed: 0, finished_at: null })
  const progressed = await decide(ref, {
    type: 'record_progress',
    data: { cursor: '9', processed: 2, succeeded: 1, failed: 0 },
    meta: { now: at(1) },
  })
  const cancelled = await decide(ref, { type: 'cancel_operation', data: {}, meta: { now: at(2) } })
  await bench.project([progressed, cancelled])
  const r = await row(ref.id)
  t.match(r, { status: 'cancelled', processed: 2, succeeded: 1, last_seq: cancelled.seq })
  t.equal(r!.finished_at.toISOString(), at(2))
  t.same(await operationList.running(bench.sql, 10), [], 'no longer picked up')
})

t.test('the running ones, oldest first; the list newest first, paged', async (t) => {
  const refs = [newOperation(), newOperation(), newOperation()]
  for (const [i, ref] of refs.entries()) await bench.project([await start(ref, 10 + i)])
  t.same(
    (await operationList.running(bench.sql, 10)).map((r) => r.id),
    refs.map((r) => r.id),
  )
  const first = await operationList.page(bench.sql, projectId, null, 2)
  t.same(
    first.rows.map((r) => r.id),
    [refs[2]!.id, refs[1]!.id],
  )
  t.ok(first.hasMore)
  const last = first.rows.at(-1)!
  const rest = await operationList.page(bench.sql, projectId, { created_at: last.created_at.toISOString(), id: last.id }, 2)
  const all = (await operationList.page(bench.sql, projectId, null, 10)).rows.map((r) => r.id)
  t.same(
    rest.rows.map((r) => r.id),
    all.slice(2, 4),
    'the page after the cursor continues where the first ended',
  )
  t.equal(rest.rows[0]!.id, refs[0]!.id)
})

t.test('re-delivering the same sequences changes nothing', async (t) => {
  const ref = newOperation()
  await bench.redeliveryChangesNothing(t, [
    await start(ref, 20),
    await decide(ref, { type: 'record_progress', data: { cursor: '1', processed: 1, succeeded: 0, failed: 0 }, meta: { now: at(21) } }),
  ])
})
