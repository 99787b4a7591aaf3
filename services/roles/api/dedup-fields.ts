import { z } from 'zod'
import { debounceMaxWaitSecondsRange, debounceSecondsRange, dedupWindowSecondsRange, maxDedupKeyLength } from '../../../domain/dedup-key.ts'
import { storableText } from './text-fields.ts'

/** The creates' `dedup` option (issue 29, item 5; README, "Deduplication"). */
export const dedupField = z
  .strictObject({
    key: storableText(1, maxDedupKeyLength).describe('the deduplication key, 1 to 500 characters'),
    scope: z
      .enum(['queue', 'project'])
      .default('queue')
      .describe("where the key holds: among the jobs of the job's queue (default) or of the whole project"),
    while: z
      .union([
        z.enum(['pending', 'active']),
        z.strictObject({ window_seconds: z.number().int().min(dedupWindowSecondsRange.min).max(dedupWindowSecondsRange.max) }),
      ])
      .default('active')
      .describe(
        'when an earlier job with the key makes this create a duplicate: `pending` while it is pending or scheduled; `active` (default) while pending, scheduled or processing; `{window_seconds}` (1–2,592,000) while it was created less than that long ago, whatever its state',
      ),
    on_duplicate: z
      .enum(['skip', 'replace_payload', 'keep_latest_queued'])
      .default('skip')
      .describe(
        "`skip` (default): a duplicate creates nothing and answers the existing job as it is. `replace_payload`: a waiting (pending or scheduled) existing job takes this create's payload; a running or ended one is answered as it is. `keep_latest_queued`: a waiting job with the key takes the payload (200); while none waits (one runs, or none is left) a new job is created (201), so at most one waits behind the running one; it decides by the waiting job, so `while` must be `active` (or left out)",
      ),
  })
  .refine((d) => d.on_duplicate !== 'keep_latest_queued' || d.while === 'active', {
    message: 'keep_latest_queued decides by the waiting job: `while` must be "active" or left out',
    path: ['while'],
  })
  .describe(
    'extension (issue 29): at most one job per key under the `while` rule; a duplicate answers 200 with the existing job and `deduplicated: true`, never a second job',
  )

/**
 * The creates' `debounce` option (issue 29, item 5): the job runs once, with the last payload,
 * after `seconds` without another create with the key, or `max_wait_seconds` after the first.
 */
export const debounceField = z
  .strictObject({
    key: storableText(1, maxDedupKeyLength).describe("the debounce key, 1 to 500 characters; it holds in the job's queue"),
    seconds: z
      .number()
      .int()
      .min(debounceSecondsRange.min)
      .max(debounceSecondsRange.max)
      .describe('the quiet period (1–86,400): the job is due this long after the last create with the key'),
    max_wait_seconds: z
      .number()
      .int()
      .min(debounceMaxWaitSecondsRange.min)
      .max(debounceMaxWaitSecondsRange.max)
      .describe('the longest the job waits after its first create (1–2,592,000, at least `seconds`), however often creates come'),
  })
  .refine((d) => d.max_wait_seconds >= d.seconds, { message: 'max_wait_seconds must be at least seconds', path: ['max_wait_seconds'] })
  .describe(
    'extension (issue 29): the first create makes a job scheduled `seconds` ahead (201); a create with the key while it is still scheduled gives it its payload and moves it to min(now + seconds, first create + max_wait_seconds) (200, `deduplicated: true`). Not with `dedup`, `run_at` or `parent_job_id`',
  )
