import { z } from 'zod'
import { isEmailAddress, maxEmailLength } from '../../../domain/email-address.ts'
import { isStorableText, unstorableTextMessage } from './storable.ts'

/**
 * String fields of request schemas (bodies, queries, path parameters). zod runs every check of a
 * string in turn, even after one failed, so a pattern or refine placed after `.max()` still runs
 * on a 1 MiB value. Here the length bounds come first and abort: an over-long value is refused
 * before any pattern, refine or transform sees it. Every string a route accepts is built from
 * these (a test walks every route's schemas to prove it).
 */

/** A string of `min` to `max` characters; outside that, nothing else is checked. */
export function boundedString(max: number, min = 0): z.ZodString {
  const bounded = z.string().max(max, { abort: true })
  return min > 0 ? bounded.min(min, { abort: true }) : bounded
}

/** Bounded, and storable in a Postgres `text` column (storable.ts): names, ids, queues. */
export function storableText(min: number, max: number) {
  return boundedString(max, min).refine(isStorableText, unstorableTextMessage)
}

/** Bounded, then matched against a pattern that must itself be linear (no nested or overlapping repeats). */
export function patternText(max: number, pattern: RegExp, message: string, min = 0): z.ZodString {
  return boundedString(max, min).regex(pattern, message)
}

/** An e-mail address (domain/email-address.ts), at most 320 characters. */
export const emailAddress = boundedString(maxEmailLength, 1).refine(isEmailAddress, 'must be an e-mail address')

/**
 * A string with no bound of its own (payload keys, error texts that are truncated rather than
 * refused): at most the request body's limit, so that the rule above holds for every string.
 */
export const maxRequestTextLength = 1024 * 1024
export const anyText = () => boundedString(maxRequestTextLength)
