import { CronExpressionParser } from 'cron-parser'
import type { z } from 'zod'
import { DomainError } from '../../domain/errors.ts'
import { recurringIdFor, recurringJobDecider, type RecurringJob, type RecurringJobEvent } from '../../domain/recurring-job.ts'
import { handleCommand } from '../../streams/handle-command.ts'
import type { Deps } from '../runtime.ts'

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

export function isIanaTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz })
    return tz.length > 0
  } catch {
    return false
  }
}

export type RegistrationResult = { ok: true; id: string } | { ok: false; input: unknown; reason: string }

/**
 * Upserts each schedule a worker registers as a recurring-job aggregate (`rjob_` + slug of the
 * job type). A bad schedule is reported back for logging and does not stop the others.
 */
export async function registerRecurringSchedules(
  deps: Deps,
  projectId: string,
  items: readonly unknown[],
  schema: z.ZodType<{
    job_type: string
    cron_expression: string
    queue?: string | null
    timezone?: string | null
    max_attempts?: number | null
    timeout_seconds?: number | null
  }>,
): Promise<RegistrationResult[]> {
  const results: RegistrationResult[] = []
  for (const input of items) {
    const parsed = schema.safeParse(input)
    if (!parsed.success) {
      results.push({ ok: false, input, reason: parsed.error.issues[0]?.message ?? 'invalid schedule' })
      continue
    }
    const s = parsed.data
    const timezone = s.timezone ?? 'UTC'
    if (!isIanaTimezone(timezone)) {
      results.push({ ok: false, input, reason: `invalid_timezone: ${timezone}` })
      continue
    }
    if (!isCronExpression(s.cron_expression, timezone)) {
      results.push({ ok: false, input, reason: `invalid_cron_expression: ${s.cron_expression}` })
      continue
    }
    const id = recurringIdFor(s.job_type)
    try {
      await handleCommand<Parameters<typeof recurringJobDecider.decide>[0], RecurringJobEvent, RecurringJob>(
        deps.store,
        recurringJobDecider,
        { aggregate: 'recurring', projectId, id },
        {
          type: 'upsert_recurring',
          data: {
            recurring_id: id,
            project_id: projectId,
            job_type: s.job_type,
            cron_expression: s.cron_expression.trim(),
            queue: s.queue ?? 'default',
            timezone,
            max_attempts: s.max_attempts ?? 3,
            timeout_seconds: s.timeout_seconds ?? 1800,
          },
          meta: { now: deps.now().toISOString() },
        },
        () => `evt_${deps.newUlid()}`,
      )
      results.push({ ok: true, id })
    } catch (err) {
      if (!(err instanceof DomainError)) throw err
      results.push({ ok: false, input, reason: `${err.code}: ${err.message}` })
    }
  }
  return results
}
