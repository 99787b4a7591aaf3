import type { JobSnapshot } from './types.js'

/** The lines of a byte stream, decoded as UTF-8, without their line ends. */
export async function* linesOf(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder()
  let buffered = ''
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true })
    let end: number
    while ((end = buffered.indexOf('\n')) >= 0) {
      yield buffered.slice(0, end).replace(/\r$/, '')
      buffered = buffered.slice(end + 1)
    }
  }
  buffered += decoder.decode()
  if (buffered !== '') yield buffered
}

/** The `snapshot` frames of one server-sent-events response (spec, Job progress stream). */
export async function* snapshotsOf(body: ReadableStream<Uint8Array>): AsyncGenerator<JobSnapshot> {
  let event = 'message'
  let data: string[] = []
  for await (const line of linesOf(body)) {
    if (line === '') {
      if (event === 'snapshot' && data.length > 0) yield JSON.parse(data.join('\n')) as JobSnapshot
      event = 'message'
      data = []
    } else if (line.startsWith('event:')) {
      event = line.slice(6).trim()
    } else if (line.startsWith('data:')) {
      data.push(line.slice(5).replace(/^ /, ''))
    }
  }
}

/** A streamed export: the response body as it arrives, never held whole. */
export class ExportDownload {
  readonly contentType: string
  /** From `Content-Disposition`: `svc-jobs-<project>-<date>.<jsonl|csv>`. */
  readonly filename: string | null
  readonly body: ReadableStream<Uint8Array>

  constructor(res: Response) {
    this.contentType = res.headers.get('content-type') ?? ''
    this.filename = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') ?? '')?.[1] ?? null
    if (res.body === null) throw new Error('the export answered without a body')
    this.body = res.body
  }

  /** The JSONL export's rows, one object per line, parsed as they arrive. */
  async *records<T = Record<string, unknown>>(): AsyncGenerator<T> {
    if (!this.contentType.includes('ndjson')) throw new TypeError(`records() reads JSONL; this export is ${this.contentType}`)
    for await (const line of linesOf(this.body)) if (line !== '') yield JSON.parse(line) as T
  }

  /** The whole export as text (CSV, or to store it). */
  async text(): Promise<string> {
    return new Response(this.body).text()
  }
}
