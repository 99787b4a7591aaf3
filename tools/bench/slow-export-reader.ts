import http from 'node:http'
import { performance } from 'node:perf_hooks'

/** The next quote, or (outside quotes) the next newline, from `from` on; -1 when there is none. */
function nextCsvMark(chunk: Buffer, from: number, quoted: boolean): number {
  const quote = chunk.indexOf(0x22, from)
  if (quoted) return quote
  const newline = chunk.indexOf(0x0a, from)
  return newline === -1 ? quote : quote === -1 ? newline : Math.min(newline, quote)
}
export interface ExportRead {
  status: number
  rows: number
  bytes: number
  elapsedMs: number
}

/**
 * Downloads an export at no more than `bytesPerSecond` (pausing the response, so the service
 * sees a slow reader's back-pressure) and counts its rows: JSONL lines, or CSV records found by
 * an RFC 4180 scan (a line break inside quotes is not a record's end), the header left out.
 */
export function readExport(base: string, apiKey: string, path: string, format: 'jsonl' | 'csv', bytesPerSecond: number): Promise<ExportRead> {
  const url = new URL(path, base)
  return new Promise((resolvePromise, reject) => {
    const started = performance.now()
    const req = http.get(url, { headers: { authorization: `Bearer ${apiKey}` } }, (res) => {
      let bytes = 0
      let records = 0
      let quoted = false
      let errorBody = ''
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length
        if (res.statusCode !== 200) errorBody += chunk.toString('utf8')
        if (format === 'jsonl') {
          for (let i = chunk.indexOf(0x0a); i !== -1; i = chunk.indexOf(0x0a, i + 1)) records++
        } else {
          // A quote toggles quoting ("" toggles twice); a newline outside quotes ends a record.
          for (let i = nextCsvMark(chunk, 0, quoted); i !== -1; i = nextCsvMark(chunk, i + 1, quoted)) {
            if (chunk[i] === 0x22) quoted = !quoted
            else records++
          }
        }
        const wait = started + (bytes / bytesPerSecond) * 1000 - performance.now()
        if (wait > 1) {
          res.pause()
          setTimeout(() => res.resume(), wait)
        }
      })
      res.on('error', reject)
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`GET ${path}: HTTP ${res.statusCode} ${errorBody}`))
        resolvePromise({ status: res.statusCode, rows: format === 'csv' ? records - 1 : records, bytes, elapsedMs: performance.now() - started })
      })
    })
    req.on('error', reject)
  })
}
