import { createHash } from 'node:crypto'
import type { FeedPosition } from '../../../domain/event-feed.ts'

export { isAfter, logStart, type FeedPosition } from '../../../domain/event-feed.ts'

/**
 * A cursor: `c1.<seq>.<index>.<check>`, base 36, `x` for the whole message, and a check digit of
 * the project and position, so that a cursor edited, truncated or taken from another project is
 * refused (400 `invalid_cursor`) rather than read from a place nobody was given.
 */
export function encodeFeedCursor(projectId: string, position: FeedPosition): string {
  const seq = position.seq.toString(36)
  const index = position.index === 'all' ? 'x' : position.index.toString(36)
  return `c1.${seq}.${index}.${check(projectId, seq, index)}`
}

/** The position of a cursor this project was given; null for any other text. */
export function decodeFeedCursor(projectId: string, cursor: string): FeedPosition | null {
  const parts = cursor.split('.')
  if (parts.length !== 4 || parts[0] !== 'c1') return null
  const [, seqText, indexText, given] = parts as [string, string, string, string]
  if (!/^[0-9a-z]{1,11}$/.test(seqText) || !/^(x|[0-9a-z]{1,4})$/.test(indexText)) return null
  if (given !== check(projectId, seqText, indexText)) return null
  const seq = Number.parseInt(seqText, 36)
  if (!Number.isSafeInteger(seq)) return null
  return { seq, index: indexText === 'x' ? 'all' : Number.parseInt(indexText, 36) }
}

function check(projectId: string, seq: string, index: string): string {
  return createHash('sha256').update(`${projectId}/${seq}/${index}`).digest('base64url').slice(0, 10)
}
