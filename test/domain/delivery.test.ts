import t from 'tap'
import { deliveryDecider, type DeliveryCommand, type DeliveryEvent, type DeliveryStatus } from '../../domain/delivery.ts'
import { maxDeliveryAttempts, outcomeOf } from '../../domain/delivery-policy.ts'
import { InvalidState } from '../../domain/errors.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
/** The instant `seconds` after t0. */
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()

const ids = { delivery_id: 'dlv_1', project_id: 'prj_1', webhook_id: 'whk_1', event_id: 'evt_1', event_type: 'job.succeeded' }

type Outcome = ReturnType<typeof outcomeOf>

const schedule = (seconds = 0): DeliveryCommand => ({ type: 'schedule_delivery', data: ids, meta: { now: at(seconds) } })
const attempt = (n: number, outcome: Outcome, responseStatus: number | null, seconds = n): DeliveryCommand => ({
  type: 'record_attempt',
  data: { attempt: n, outcome, response_status: responseStatus },
  meta: { now: at(seconds) },
})

const scheduled = (seconds = 0): DeliveryEvent => ({ type: 'delivery_scheduled', data: { ...ids, scheduled_at: at(seconds) } })
const attempted = (n: number, status: DeliveryStatus, responseStatus: number | null, seconds = n): DeliveryEvent => ({
  type: 'delivery_attempted',
  data: { attempt: n, status, response_status: responseStatus, attempted_at: at(seconds) },
})

/** A delivery whose first `n` attempts were answered 503. */
const failedTimes = (n: number) => [scheduled(), ...Array.from({ length: n }, (_, i) => attempted(i + 1, 'pending', 503))]

const spec = (t: Parameters<typeof deciderSpec>[0]) => deciderSpec(t, deliveryDecider)

t.test('schedule: delivery_scheduled, and the state is a pending delivery with no attempt yet', async (t) => {
  const delivery = spec(t).given([]).when(schedule()).then([scheduled()])
  const { delivery_id, ...about } = ids
  t.strictSame(delivery, {
    id: delivery_id,
    ...about,
    status: 'pending',
    response_status: null,
    attempt: 0,
    attempted_at: at(0),
    created_at: at(0),
    event_seq: null,
    operation_id: null,
    redelivery_of: null,
  })
})

t.test('schedule again (the same event and subscription, redelivered) records nothing', async (t) => {
  spec(t).given([scheduled()]).when(schedule(10)).then([])
  spec(t)
    .given([scheduled(), attempted(1, 'delivered', 200)])
    .when(schedule(10))
    .then([], 'after it was delivered')
})

t.test('an attempt the receiver answered 2xx: delivered', async (t) => {
  const delivery = spec(t)
    .given([scheduled()])
    .when(attempt(1, 'delivered', 204))
    .then([attempted(1, 'delivered', 204)])
  t.match(delivery, { status: 'delivered', attempt: 1, response_status: 204, attempted_at: at(1) })
})

t.test('a permanent failure fails the delivery at once, whatever the attempt', async (t) => {
  const delivery = spec(t)
    .given([scheduled()])
    .when(attempt(1, 'permanent_failure', 410))
    .then([attempted(1, 'failed', 410)])
  t.match(delivery, { status: 'failed', attempt: 1, response_status: 410 })
})

t.test('a retryable failure keeps the delivery pending until the last attempt, which fails it', async (t) => {
  spec(t)
    .given([scheduled()])
    .when(attempt(1, 'retryable_failure', 503))
    .then([attempted(1, 'pending', 503)])
  spec(t)
    .given(failedTimes(3))
    .when(attempt(4, 'retryable_failure', null))
    .then([attempted(4, 'pending', null)], 'a timeout has no status')
  const last = spec(t)
    .given(failedTimes(maxDeliveryAttempts - 1))
    .when(attempt(maxDeliveryAttempts, 'retryable_failure', 500))
    .then([attempted(maxDeliveryAttempts, 'failed', 500)], `attempt ${maxDeliveryAttempts} is the last`)
  t.equal(last?.status, 'failed')
  spec(t)
    .given(failedTimes(maxDeliveryAttempts - 1))
    .when(attempt(maxDeliveryAttempts, 'delivered', 200))
    .then([attempted(maxDeliveryAttempts, 'delivered', 200)], 'the last may still succeed')
})

t.test('an attempt already recorded (a redelivered work item) records nothing', async (t) => {
  spec(t)
    .given(failedTimes(2))
    .when(attempt(2, 'delivered', 200, 10))
    .then([], 'the same attempt number')
  spec(t)
    .given(failedTimes(2))
    .when(attempt(1, 'retryable_failure', 503, 10))
    .then([], 'an earlier one')
})

t.test('a settled delivery records no further attempt', async (t) => {
  spec(t)
    .given([scheduled(), attempted(1, 'delivered', 200)])
    .when(attempt(2, 'retryable_failure', 503))
    .then([], 'delivered')
  spec(t)
    .given([scheduled(), attempted(1, 'failed', 404)])
    .when(attempt(2, 'delivered', 200))
    .then([], 'failed')
})

t.test('an attempt on a delivery never scheduled is refused with InvalidState', async (t) => {
  spec(t)
    .given([])
    .when(attempt(1, 'delivered', 200))
    .thenThrows(InvalidState, 'invalid_state')
})

t.test('outcomeOf: 2xx delivered; 3xx and 4xx permanent; 5xx and no answer retryable', async (t) => {
  for (const status of [200, 201, 204, 299]) t.equal(outcomeOf(status), 'delivered', String(status))
  for (const status of [300, 301, 308, 400, 404, 410, 499]) t.equal(outcomeOf(status), 'permanent_failure', String(status))
  for (const status of [500, 502, 503, 599]) t.equal(outcomeOf(status), 'retryable_failure', String(status))
  t.equal(outcomeOf(null), 'retryable_failure', 'a timeout or network error')
  t.equal(outcomeOf(199), 'retryable_failure', 'an informational status is no answer')
})

t.test('evolve on a missing state: delivery_scheduled builds it, an attempt throws', async (t) => {
  evolveOnMissingState(t, deliveryDecider, scheduled(), [attempted(1, 'delivered', 200)])
})

t.test('a redelivery or a replay names what made it: the state keeps its event sequence, operation and the delivery it repeats', async (t) => {
  const origin = { event_seq: 42, operation_id: 'op_1', redelivery_of: 'del_0' }
  const command: DeliveryCommand = { type: 'schedule_delivery', data: { ...ids, ...origin }, meta: { now: at(0) } }
  const delivery = spec(t)
    .given([])
    .when(command)
    .then([{ type: 'delivery_scheduled', data: { ...ids, ...origin, scheduled_at: at(0) } }])
  t.match(delivery, { ...origin, status: 'pending', attempt: 0 })
  const attempted1 = deliveryDecider.evolve(delivery, attempted(1, 'delivered', 200))
  t.match(attempted1, origin, 'kept through its attempts')
})
