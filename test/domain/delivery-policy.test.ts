import t from 'tap'
import { deliveryAttemptTimeoutMs, deliveryRetryWaitsMs, maxDeliveryAttempts, outcomeOf, retryWaitMs } from '../../domain/delivery-policy.ts'

t.test('the spec: at most 5 attempts, waits of 5 s, 30 s, 5 min and 1 h between them, 10 s each', async (t) => {
  t.equal(maxDeliveryAttempts, 5)
  t.strictSame(
    [1, 2, 3, 4].map((attempt) => retryWaitMs(attempt)),
    [5_000, 30_000, 300_000, 3_600_000],
  )
  t.equal(deliveryRetryWaitsMs.length, maxDeliveryAttempts - 1, 'one wait between each two attempts')
  const worstCaseMinutes = (deliveryRetryWaitsMs.reduce((sum, wait) => sum + wait, 0) + maxDeliveryAttempts * deliveryAttemptTimeoutMs) / 60_000
  t.equal(Math.round(worstCaseMinutes), 66, 'the worst case is about 66 minutes')
})

t.test('configured waits replace the policy’s; past their end the last holds', async (t) => {
  const waits = [100, 200, 300, 400]
  t.strictSame(
    [1, 2, 3, 4].map((attempt) => retryWaitMs(attempt, waits)),
    waits,
  )
  t.equal(retryWaitMs(5, waits), 400)
})

t.test('2xx delivered, 3xx and 4xx failed at once, 5xx and no answer retried', async (t) => {
  t.equal(outcomeOf(200), 'delivered')
  t.equal(outcomeOf(204), 'delivered')
  t.equal(outcomeOf(301), 'permanent_failure')
  t.equal(outcomeOf(404), 'permanent_failure')
  t.equal(outcomeOf(500), 'retryable_failure')
  t.equal(outcomeOf(503), 'retryable_failure')
  t.equal(outcomeOf(null), 'retryable_failure')
})
