import t from 'tap'
import { retryDelayMs, retryMaxDelayMs } from '../../domain/retry-policy.ts'

t.test('retryDelayMs: 15 s doubling plus up to 3 s of jitter, capped at a day', async (t) => {
  t.equal(retryDelayMs(1, 0), 15_000)
  t.equal(retryDelayMs(2, 0), 30_000)
  t.equal(retryDelayMs(5, 0), 240_000)
  t.equal(retryDelayMs(1, 0.5), 16_500)
  t.equal(retryDelayMs(1, 0.999), 17_997)
  t.equal(retryDelayMs(13, 0), 15_000 * 2 ** 12, 'attempt 13 is still below a day')
  t.equal(retryDelayMs(14, 0), retryMaxDelayMs, 'attempt 14 reaches the cap')
  t.equal(retryDelayMs(14, 0.999), retryMaxDelayMs + 2_997, 'the jitter comes on top of the cap')
  t.equal(retryDelayMs(5000, 0), retryMaxDelayMs, 'huge attempts stay at the cap')
  t.equal(retryDelayMs(0, 0), 15_000, 'attempt 0 is treated as the first')
})
