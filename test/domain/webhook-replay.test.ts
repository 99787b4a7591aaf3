import t from 'tap'
import { deliveryAsOf, isReplayed, replayedTypes, type RecordedDelivery } from '../../domain/webhook-replay.ts'

const delivery = (id: string, status: RecordedDelivery['status'], scheduled_seq: number, last_seq: number): RecordedDelivery => ({
  id,
  status,
  scheduled_seq,
  last_seq,
})

t.test('a delivery is judged as it stood at the replay’s position', async (t) => {
  t.same(deliveryAsOf([], 100), null, 'none')
  t.same(deliveryAsOf([delivery('d1', 'failed', 10, 20)], 100), { id: 'd1', status: 'failed' }, 'settled before')
  t.same(deliveryAsOf([delivery('d1', 'failed', 10, 120)], 100), { id: 'd1', status: 'pending' }, 'settled after: pending then')
  t.same(deliveryAsOf([delivery('d1', 'delivered', 110, 120)], 100), null, 'scheduled after: not there then')
  t.same(
    deliveryAsOf([delivery('d1', 'failed', 10, 20), delivery('d2', 'delivered', 30, 40)], 100),
    { id: 'd2', status: 'delivered' },
    'the latest delivery of the event counts (a redelivery that went through)',
  )
  t.same(
    deliveryAsOf([delivery('d0', 'failed', 0, 5)], 100),
    { id: 'd0', status: 'failed' },
    'rows older than scheduled_seq count as scheduled before',
  )
})

t.test('the modes', async (t) => {
  t.ok(isReplayed('all', null))
  t.ok(isReplayed('all', { status: 'delivered' }))
  t.ok(isReplayed('missing', null))
  t.notOk(isReplayed('missing', { status: 'failed' }))
  t.notOk(isReplayed('missing', { status: 'pending' }), 'a pending delivery is not missing')
  t.ok(isReplayed('failed', { status: 'failed' }))
  t.notOk(isReplayed('failed', { status: 'pending' }))
  t.notOk(isReplayed('failed', null))
})

t.test('the types replayed: those asked, within the subscription’s filter', async (t) => {
  t.same(replayedTypes('*', null), { types: ['job.created', 'job.succeeded', 'job.failed', 'alert.triggered', 'alert.resolved'] })
  t.same(replayedTypes(['job.failed', 'job.created'], null), { types: ['job.created', 'job.failed'] })
  t.same(replayedTypes(['job.failed', 'job.created'], ['job.failed']), { types: ['job.failed'] })
  t.same(replayedTypes(['job.created'], ['job.created', 'alert.triggered']), { refused: 'alert.triggered' })
})
