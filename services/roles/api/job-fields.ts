import { z } from 'zod'
import { priorityRange } from '../../../domain/job.ts'
import { maxJobTypeLength, maxQueueNameLength, timeoutSecondsRange, ttlSecondsRange } from '../../../domain/job-options.ts'
import { maxAttemptsRange } from '../../../domain/retry-policy.ts'
import { storableText } from './text-fields.ts'

/**
 * A job's options as requests carry them, with the domain's bounds: the job creates, the
 * recurring routes, and a worker's polls and registrations take the same fields.
 */

// `examples`: what the API description shows for them (openapi.ts generates the rest).
export const jobTypeText = storableText(1, maxJobTypeLength).meta({ examples: ['send-email'] })
export const queueNameText = storableText(1, maxQueueNameLength).meta({ examples: ['emails'] })
export const maxAttemptsNumber = z.number().int().min(maxAttemptsRange.min).max(maxAttemptsRange.max)
export const timeoutSecondsNumber = z.number().int().min(timeoutSecondsRange.min).max(timeoutSecondsRange.max)
/** Extension (issue 28): a job's claim order offset in seconds, higher sooner (domain/job.ts). */
export const priorityNumber = z
  .number()
  .int()
  .min(priorityRange.min)
  .max(priorityRange.max)
  .describe(
    'extension: claim order offset in seconds, -600 to 600 (default 0), higher sooner: due jobs of a queue are claimed by due time minus priority, so an old low-priority job still runs before newer high-priority ones; never before its own due time',
  )
/** Extension (issue 28): how long a job may wait to be claimed once due. */
export const ttlSecondsNumber = z.number().int().min(ttlSecondsRange.min).max(ttlSecondsRange.max)
