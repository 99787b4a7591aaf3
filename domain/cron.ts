import { CronExpressionParser } from 'cron-parser'

/**
 * Cron arithmetic, pure: whether an expression and a timezone are valid, how close together an
 * expression fires, and its occurrences around an instant. Parsing is cron-parser's; the times
 * in and out are given, never read from a clock.
 */

/** True for standard 5-field or 6-field (leading seconds) cron expressions cron-parser accepts. */
export function isCronExpression(expression: string, timezone: string): boolean {
  const fields = expression.trim().split(/\s+/)
  if (fields.length !== 5 && fields.length !== 6) return false
  try {
    CronExpressionParser.parse(expression, { tz: timezone })
    return true
  } catch {
    return false
  }
}

/**
 * The shortest gap between two occurrences of a 6-field expression (leading seconds), in seconds;
 * null for 5 fields, which fire at most once a minute. Read from the seconds field alone, the
 * step from the minute's last second to the next minute's first counted whether or not the next
 * minute fires (`0,59 0 * * * *` counts as 1 s): the bound errs towards refusing.
 */
export function shortestCronGapSeconds(expression: string): number | null {
  if (expression.trim().split(/\s+/).length !== 6) return null
  const seconds = CronExpressionParser.parse(expression)
    .fields.second.values.map(Number)
    .sort((a, b) => a - b)
  let gap = 60 - seconds.at(-1)! + seconds[0]!
  for (let i = 1; i < seconds.length; i++) gap = Math.min(gap, seconds[i]! - seconds[i - 1]!)
  return gap
}

/** True for a timezone name the runtime's tz database knows (IANA names; kept as given). */
export function isIanaTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz })
    return tz.length > 0
  } catch {
    return false
  }
}

/**
 * The first occurrence strictly after `after`, in the schedule's timezone. cron-parser resolves
 * daylight-saving changes the way people expect: a daily local time skipped by a spring-forward
 * fires shifted by the gap (02:30 → 03:30), a daily local time repeated by a fall-back fires once
 * (the first); an hourly schedule fires every real hour, both repeated ones included.
 */
export function nextOccurrence(expression: string, timezone: string, after: Date): Date | null {
  try {
    return CronExpressionParser.parse(expression, { tz: timezone, currentDate: after }).next().toDate()
  } catch {
    return null
  }
}

/**
 * The latest occurrence at or before `at`. cron-parser's `prev()` does not mirror `next()`
 * across a spring-forward gap (it skips the shifted occurrence), so its answer is walked
 * forward with `next()` for as long as that stays at or before `at`.
 */
export function latestOccurrence(expression: string, timezone: string, at: Date): Date | null {
  try {
    let latest = CronExpressionParser.parse(expression, { tz: timezone, currentDate: new Date(at.getTime() + 1) })
      .prev()
      .toDate()
    for (let step = 0; step < 10; step++) {
      const following = nextOccurrence(expression, timezone, latest)
      if (following === null || following.getTime() > at.getTime()) break
      latest = following
    }
    return latest
  } catch {
    return null
  }
}
