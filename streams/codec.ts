import { Packr } from 'msgpackr'

/**
 * The one msgpack encoder. Records (msgpackr's structure sharing) are off so that a message's
 * bytes depend only on its value, never on what this process encoded before: outside consumers
 * decode each message on its own with any msgpack library.
 */
const packr = new Packr({ useRecords: false, moreTypes: false, int64AsType: 'number', mapsAsObjects: true })

export function encode(value: unknown): Uint8Array {
  return packr.pack(value)
}

export function decode<T = unknown>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T
}
