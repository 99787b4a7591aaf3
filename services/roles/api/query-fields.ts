import { z } from 'zod'
import { maxJobTypeLength, maxQueueNameLength } from '../../../domain/job-options.ts'
import { boundedString, storableText } from './text-fields.ts'

/**
 * Query parameters shared by the list, metrics and export routes. Each is bounded (text-fields.ts);
 * a value that reaches Postgres as a filter is also storable there: U+0000 in a `text`
 * parameter makes Postgres fail the whole query, which was a 500 (issue 13, item 10).
 */

/** `limit`: parsed by the route (pagination.ts), which refuses or clamps by its own rule. */
export const limitText = boundedString(32).optional()

/** `cursor`: opaque, checked by pagination.ts when decoded. */
export const cursorText = boundedString(1000).optional()

/** `min_seq`: an `X-Event-Seq` value (docs/architecture.md, "Read-your-writes"). */
export const minSeq = z.coerce.number().int().min(0).optional()

/** `from` / `until` of exports and metrics: parsed by the route with the spec's codes (`invalid_from`, `invalid_until`). */
export const windowBoundText = boundedString(100).optional()

/** `format` of exports: checked by the route (`invalid_format`). */
export const formatText = boundedString(100).optional()

/** A queue name used as a filter; empty means every queue where the route says so. */
export const queueFilter = storableText(0, maxQueueNameLength).optional()

/** A job type used as a filter. */
export const jobTypeFilter = storableText(0, maxJobTypeLength).optional()

/** A comma-separated list of event types (`types` of the feed and of a job's history), trimmed, empty items dropped; null when absent or empty. */
export function typeList(text: string | undefined): Set<string> | null {
  if (text === undefined || text === '') return null
  return new Set(
    text
      .split(',')
      .map((t) => t.trim())
      .filter((t) => t !== ''),
  )
}
