import fc from 'fast-check'
import t from 'tap'
import { addHistograms, bucketStart, histogramBuckets, histogramIndex, histogramPercentile, histogramValue } from '../../domain/job-metrics.ts'

t.test('every duration falls in a bucket whose value is within 5% of it (or 1 ms)', async (t) => {
  const details = fc.check(
    fc.property(fc.integer({ min: 0, max: 86_400_000 }), (d) => {
      const value = histogramValue(histogramIndex(d))
      return Math.abs(value - d) <= Math.max(1, d * 0.05)
    }),
    { numRuns: 2000 },
  )
  t.equal(details.failed, false, fc.defaultReportMessage(details) ?? 'within 5%')
  t.equal(histogramIndex(0), 0)
  t.equal(histogramIndex(0.4), 0)
  t.equal(histogramIndex(Number.NaN), 0, 'nonsense durations count as instant, not as a crash')
  t.equal(histogramIndex(1e12), histogramBuckets - 1, 'beyond the last bucket is the last bucket')
  t.ok(histogramIndex(86_400_000) < histogramBuckets - 1, 'the longest timeout still has its own bucket')
})

t.test('percentiles are nearest-rank over the buckets', async (t) => {
  const of = (durations: number[]) =>
    durations.reduce<number[]>((h, d) => {
      const one = new Array<number>(histogramIndex(d) + 1).fill(0)
      one[one.length - 1] = 1
      return addHistograms(h, one)
    }, [])
  t.equal(histogramPercentile([], 0.5), null, 'nothing counted, no percentile')
  t.equal(histogramPercentile([0, 0], 0.5), null)
  const h = of([10, 20, 30, 40, 1000])
  t.equal(histogramPercentile(h, 0.5), histogramValue(histogramIndex(30)))
  t.equal(histogramPercentile(h, 0.99), histogramValue(histogramIndex(1000)))
  t.equal(histogramPercentile(h, 0.2), histogramValue(histogramIndex(10)))
  t.same(addHistograms([1, 2], [0, 0, 5]), [1, 2, 5], 'histograms of different lengths add up')
})

t.test('buckets start on UTC minute, hour and day boundaries', async (t) => {
  const at = Date.parse('2026-03-29T01:59:59.999Z')
  t.equal(new Date(bucketStart(at, 'minute')).toISOString(), '2026-03-29T01:59:00.000Z')
  t.equal(new Date(bucketStart(at, 'hour')).toISOString(), '2026-03-29T01:00:00.000Z')
  t.equal(new Date(bucketStart(at, 'day')).toISOString(), '2026-03-29T00:00:00.000Z')
})
