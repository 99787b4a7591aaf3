import t from 'tap'
import { isCronExpression, isIanaTimezone, latestOccurrence, nextOccurrence, shortestCronGapSeconds } from '../../domain/cron.ts'

const at = (iso: string) => new Date(iso)
const iso = (d: Date | null) => d?.toISOString() ?? null

t.test('an expression has 5 fields, or 6 with leading seconds, that cron-parser accepts', async (t) => {
  t.ok(isCronExpression('*/5 * * * *', 'UTC'))
  t.ok(isCronExpression('30 0 9 * * 1-5', 'Europe/Paris'), 'six fields')
  t.notOk(isCronExpression('* * * *', 'UTC'), 'four fields')
  t.notOk(isCronExpression('0 0 0 * * * *', 'UTC'), 'seven fields')
  t.notOk(isCronExpression('61 * * * *', 'UTC'), 'a minute out of range')
})

t.test('a timezone is an IANA name the runtime knows', async (t) => {
  t.ok(isIanaTimezone('America/New_York'))
  t.ok(isIanaTimezone('UTC'))
  t.notOk(isIanaTimezone('Mars/Olympus'))
  t.notOk(isIanaTimezone(''))
})

t.test('the shortest gap is read from the seconds field, and erring towards refusing across the minute', async (t) => {
  t.equal(shortestCronGapSeconds('* * * * *'), null, 'five fields fire at most once a minute')
  t.equal(shortestCronGapSeconds('*/10 * * * * *'), 10)
  t.equal(shortestCronGapSeconds('0,30 * * * * *'), 30)
  t.equal(shortestCronGapSeconds('0 * * * * *'), 60, 'once a minute')
  t.equal(shortestCronGapSeconds('0,59 0 * * * *'), 1, "the minute's last second to the next minute's first")
})

t.test('the next occurrence is strictly after the instant, in the schedule timezone', async (t) => {
  t.equal(iso(nextOccurrence('0 * * * *', 'UTC', at('2025-03-01T10:00:00.000Z'))), '2025-03-01T11:00:00.000Z', 'not the instant itself')
  t.equal(iso(nextOccurrence('0 9 * * *', 'Europe/Paris', at('2025-03-01T10:00:00.000Z'))), '2025-03-02T08:00:00.000Z', '09:00 in Paris')
  t.equal(nextOccurrence('not cron', 'UTC', at('2025-03-01T10:00:00.000Z')), null)
})

t.test('daylight-saving changes: a skipped local time shifts by the gap, a repeated one fires once', async (t) => {
  // New York springs forward on 2025-03-09 at 02:00 (to 03:00) and falls back on 2025-11-02 at 02:00 (to 01:00).
  t.equal(
    iso(nextOccurrence('30 2 * * *', 'America/New_York', at('2025-03-09T05:00:00.000Z'))),
    '2025-03-09T07:30:00.000Z',
    '02:30 does not exist that day: it fires at 03:30 EDT',
  )
  const first = nextOccurrence('30 1 * * *', 'America/New_York', at('2025-11-02T04:00:00.000Z'))
  t.equal(iso(first), '2025-11-02T05:30:00.000Z', '01:30 EDT, the first of the two')
  t.equal(iso(nextOccurrence('30 1 * * *', 'America/New_York', first!)), '2025-11-03T06:30:00.000Z', 'and not again at 01:30 EST')
})

t.test('the latest occurrence is at or before the instant, the next one walked forward across a gap', async (t) => {
  t.equal(iso(latestOccurrence('0 * * * *', 'UTC', at('2025-03-01T10:00:00.000Z'))), '2025-03-01T10:00:00.000Z', 'the instant itself')
  t.equal(iso(latestOccurrence('0 * * * *', 'UTC', at('2025-03-01T10:59:59.999Z'))), '2025-03-01T10:00:00.000Z')
  t.equal(
    iso(latestOccurrence('30 2 * * *', 'America/New_York', at('2025-03-09T08:00:00.000Z'))),
    iso(nextOccurrence('30 2 * * *', 'America/New_York', at('2025-03-09T05:00:00.000Z'))),
    'the shifted occurrence of a spring-forward day, as next() gives it',
  )
  t.equal(latestOccurrence('not cron', 'UTC', at('2025-03-01T10:00:00.000Z')), null)
})
