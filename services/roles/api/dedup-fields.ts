import { z } from 'zod'
import { dedupWindowSecondsRange, maxDedupKeyLength } from '../../../domain/dedup-key.ts'
import { storableText } from './text-fields.ts'

/**
 * The creates' `dedup` option (issue 29, item 5; README, "Deduplication"). `debounce` is not
 * offered yet: refused with 400 `invalid_request` rather than ignored, so a client relying on it
 * learns at once.
 */
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

/** Refused with 400 `invalid_request` unless absent or null: `debounce` is not offered yet. */
export const debounceField = z
  .unknown()
  .refine((value) => value === undefined || value === null, 'debounce is not offered yet')
  .optional()
  .describe('extension (issue 29): not offered yet; any value but null is refused with 400 `invalid_request`')
