import { invalidCursor, invalidLimit } from './errors.ts'
import { isStorableInstant, isStorableText } from './storable.ts'

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
    // A tampered cursor reaches SQL as parameters: values Postgres refuses must be a 400, not a 500.
    if (Array.isArray(value) && value.length === 2 && typeof value[0] === 'string' && typeof value[1] === 'string') {
      const at = Date.parse(value[0])
      if (isStorableInstant(at) && isStorableText(value[1])) return { created_at: new Date(at).toISOString(), id: value[1] }
    }
  } catch {
    // falls through to the refusal below
  }
  throw invalidCursor()
}

/** A position in a job's history (HistoryPosition): `["h", stream sequence, event index]`. */
export function encodeHistoryCursor(p: { seq: number; index: number }): string {
  return Buffer.from(JSON.stringify(['h', p.seq, p.index])).toString('base64url')
}

export function decodeHistoryCursor(cursor: string): { seq: number; index: number } {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    if (Array.isArray(value) && value.length === 3 && value[0] === 'h' && Number.isSafeInteger(value[1]) && Number.isSafeInteger(value[2])) {
      const [, seq, index] = value as [string, number, number]
      if (seq >= 1 && index >= 0) return { seq, index }
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

/** A `limit` query value clamped into [min, max] (the activity and deliveries lists clamp). */
export function clampLimit(raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n)) return fallback
  return Math.min(max, Math.max(min, Math.trunc(n)))
}
