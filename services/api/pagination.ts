import { invalidCursor, invalidLimit } from './errors.ts'

/**
 * Keyset cursors: the position of the last row served, so rows written between pages cause no
 * skips and no repeats. Opaque to clients (base64url JSON), and checked on the way back in.
 */
export interface Position {
  created_at: string
  id: string
}

export function encodeCursor(p: Position): string {
  return Buffer.from(JSON.stringify([p.created_at, p.id])).toString('base64url')
}

export function decodeCursor(cursor: string): Position {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    if (Array.isArray(value) && value.length === 2 && typeof value[0] === 'string' && typeof value[1] === 'string' && !Number.isNaN(Date.parse(value[0]))) {
      return { created_at: value[0], id: value[1] }
    }
  } catch {
    // falls through to the refusal below
  }
  throw invalidCursor()
}

/** A `limit` query value within [min, max]; outside it is refused (routes that clamp use `clampLimit`). */
export function parseLimit(raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === '') return fallback
  const n = /^-?\d+$/.test(raw) ? Number(raw) : Number.NaN
  if (!Number.isSafeInteger(n) || n < min || n > max) throw invalidLimit(`limit must be an integer from ${min} to ${max}`)
  return n
}
