import t from 'tap'
import { ulid } from 'ulid'
import type { DeliveryCommand } from '../../domain/delivery.ts'
import { outcomeOf } from '../../domain/delivery-policy.ts'
import { webhookDeliveries } from '../../projections/deliveries.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { deliveryHandler } from '../../streams/aggregates.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, webhookDeliveries)

const projectId = 'prj_deliveries'
const at = (minute: number) => `2024-06-01T12:${String(minute).padStart(2, '0')}:00.000Z`

/** What a delivery is of: one event to one subscription. */
const about = { project_id: projectId, webhook_id: 'whk_1', event_id: 'evt_1', event_type: 'job.failed' }

const decide = (ref: Ref<'delivery'>, command: DeliveryCommand) => bench.decide(deliveryHandler, ref, command)
const schedule = (ref: Ref<'delivery'>) => decide(ref, { type: 'schedule_delivery', data: { delivery_id: ref.id, ...about }, meta: { now: at(0) } })
const attempt = (ref: Ref<'delivery'>, n: number, responseStatus: number | null) =>
  decide(ref, {
    type: 'record_attempt',
    data: { attempt: n, outcome: outcomeOf(responseStatus), response_status: responseStatus },
    meta: { now: at(n) },
  })

const newDelivery = (): Ref<'delivery'> => deliveryHandler.ref(projectId, `dlv_${ulid().toLowerCase()}`)
const row = async (id: string) => (await bench.sql`SELECT * FROM deliveries WHERE id = ${id}`)[0]

t.test('a delivery row follows its attempts: scheduled, retried, delivered', async (t) => {
  const ref = newDelivery()
  const scheduled = await schedule(ref)
  await bench.project([scheduled])
  const r = await row(ref.id)
  t.match(r, about)
  t.match(r, { status: 'pending', response_status: null, attempt: 0, last_seq: scheduled.seq })
  t.equal(r!.created_at.toISOString(), at(0))
  t.equal(r!.attempted_at.toISOString(), at(0))

  const timedOut = await attempt(ref, 1, null)
  const unavailable = await attempt(ref, 2, 503)
  await bench.project([timedOut, unavailable])
  t.match(await row(ref.id), { status: 'pending', response_status: 503, attempt: 2, last_seq: unavailable.seq }, 'one batch: the newest message wins')

  const delivered = await attempt(ref, 3, 204)
  await bench.project([delivered])
  const after = await row(ref.id)
  t.match(after, { status: 'delivered', response_status: 204, attempt: 3, last_seq: delivered.seq })
  t.equal(after!.attempted_at.toISOString(), at(3))
  t.equal(after!.created_at.toISOString(), at(0), 'the creation time stays')
})

t.test('a refused delivery fails at once', async (t) => {
  const ref = newDelivery()
  const records = [await schedule(ref), await attempt(ref, 1, 410)]
  await bench.project(records)
  t.match(await row(ref.id), { status: 'failed', response_status: 410, attempt: 1 })
})

t.test('re-delivering the same sequences changes nothing', async (t) => {
  const ref = newDelivery()
  await bench.redeliveryChangesNothing(t, [await schedule(ref), await attempt(ref, 1, 500)])
})

t.test("page: a subscription's deliveries, newest first, and a cursor that continues after the last one", async (t) => {
  const own = { ...about, webhook_id: 'whk_pages' }
  const refs = [newDelivery(), newDelivery(), newDelivery()]
  for (const [i, ref] of refs.entries()) {
    await bench.project([await decide(ref, { type: 'schedule_delivery', data: { delivery_id: ref.id, ...own }, meta: { now: at(10 + i) } })])
  }
  const first = await webhookDeliveries.page(bench.sql, projectId, 'whk_pages', null, 2)
  t.same(
    first.rows.map((r) => r.id),
    [refs[2]!.id, refs[1]!.id],
  )
  t.equal(first.hasMore, true)
  const last = first.rows.at(-1)!
  const rest = await webhookDeliveries.page(bench.sql, projectId, 'whk_pages', { created_at: last.created_at.toISOString(), id: last.id }, 2)
  t.same(
    rest.rows.map((r) => r.id),
    [refs[0]!.id],
  )
  t.equal(rest.hasMore, false)
  t.match(rest.rows[0], { event_type: 'job.failed', status: 'pending', attempt: 0 })
})

t.test('scheduled_seq: the sequence of the scheduling message, whether or not its batch also holds later attempts', async (t) => {
  const alone = newDelivery()
  const scheduled = await schedule(alone)
  await bench.project([scheduled])
  await bench.project([await attempt(alone, 1, 500)])
  t.match(await row(alone.id), { scheduled_seq: scheduled.seq, attempt: 1 }, 'kept through later batches')

  const together = newDelivery()
  const records = [await schedule(together), await attempt(together, 1, 200)]
  await bench.project(records)
  t.match(await row(together.id), { scheduled_seq: records[0]!.seq, last_seq: records[1]!.seq, status: 'delivered' })
})

t.test('what a delivery is of: its event, the operation that made it, the delivery it repeats; found by event and by operation', async (t) => {
  const own = { ...about, webhook_id: 'whk_of', event_id: 'evt_of' }
  const first = newDelivery()
  const again = newDelivery()
  const records = [
    await decide(first, { type: 'schedule_delivery', data: { delivery_id: first.id, ...own, event_seq: 5 }, meta: { now: at(20) } }),
    await decide(first, { type: 'record_attempt', data: { attempt: 1, outcome: 'permanent_failure', response_status: 400 }, meta: { now: at(21) } }),
    await decide(again, {
      type: 'schedule_delivery',
      data: { delivery_id: again.id, ...own, event_seq: 5, operation_id: 'op_of', redelivery_of: first.id },
      meta: { now: at(22) },
    }),
  ]
  await bench.project(records)
  t.match(await row(again.id), { event_seq: 5, operation_id: 'op_of', redelivery_of: first.id })
  const byEvent = await webhookDeliveries.ofEvents(bench.sql, projectId, 'whk_of', ['evt_of', 'evt_none'])
  t.same(
    byEvent
      .get('evt_of')!
      .map((d) => d.id)
      .sort(),
    [first.id, again.id].sort(),
  )
  t.match(
    byEvent.get('evt_of')!.find((d) => d.id === first.id),
    { status: 'failed', scheduled_seq: records[0]!.seq, last_seq: records[1]!.seq },
  )
  t.notOk(byEvent.has('evt_none'))
  t.same(await webhookDeliveries.tallyOfOperation(bench.sql, 'op_of'), { delivered: 0, failed: 0, pending: 1 })

  const page = await webhookDeliveries.page(bench.sql, projectId, 'whk_of', null, 10)
  t.match(page.rows[0], { id: again.id, event_id: 'evt_of', operation_id: 'op_of', redelivery_of: first.id })
  const failed = await webhookDeliveries.page(bench.sql, projectId, 'whk_of', null, 10, { status: 'failed' })
  t.same(
    failed.rows.map((r) => r.id),
    [first.id],
    'a status filter',
  )
  const window = await webhookDeliveries.page(bench.sql, projectId, 'whk_of', null, 10, { since: at(22), until: at(23) })
  t.same(
    window.rows.map((r) => r.id),
    [again.id],
    'since (included) and until (excluded) on the creation time',
  )
  const otherType = await webhookDeliveries.page(bench.sql, projectId, 'whk_of', null, 10, { eventType: 'job.created' })
  t.same(otherType.rows, [], 'an event type filter')
})
