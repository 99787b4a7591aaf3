import type { AlertSettings } from '../../domain/alert.ts'
import type { RecurringSchedule } from '../../domain/recurring-job.ts'

/**
 * Settings of the aggregates whose commands carry many fields, one sample each, shared by their
 * domain tests and their read-model tests; a test overrides only the fields it is about.
 */

/** A queue-depth alert on `q1` over 2 jobs, mailed to one address. */
export const sampleAlertSettings: AlertSettings = {
  name: 'deep queue',
  kind: 'queue_depth',
  queue: 'q1',
  threshold: 2,
  window_minutes: 60,
  email: ['ops@example.com'],
  webhook: false,
  enabled: true,
}

/** A nightly report at 02:00 Paris time, with an empty payload. */
export const sampleRecurringSchedule: RecurringSchedule = {
  job_type: 'nightly.report',
  cron_expression: '0 2 * * *',
  queue: 'reports',
  timezone: 'Europe/Paris',
  max_attempts: 3,
  timeout_seconds: 600,
  payload: {},
}
