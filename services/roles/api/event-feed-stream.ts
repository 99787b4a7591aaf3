import { once } from 'node:events'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { FeedEvent } from '../../../domain/event-feed.ts'
import type { FeedReader } from '../../use-cases/events/event-feed.ts'

/** How the feed answers: a JSON page, a live server-sent event stream, or NDJSON to the current end. */
export type FeedFormat = 'json' | 'sse' | 'ndjson'

/** The format an `Accept` header asks for (the first of the two stream types it names wins). */
export function feedFormatOf(accept: string | undefined): FeedFormat {
  if (accept === undefined) return 'json'
  const sse = accept.indexOf('text/event-stream')
  const ndjson = accept.indexOf('application/x-ndjson')
  if (sse >= 0 && (ndjson < 0 || sse < ndjson)) return 'sse'
  if (ndjson >= 0) return 'ndjson'
  return 'json'
}

/** A live stream says where it stands this often while no event goes out. */
export const feedKeepAliveMs = 15_000

/**
 * A reader that has not taken what was written for this long is closed, with a last line that
 * says where to resume: the stream never holds more than one batch for it beyond the socket's
 * buffer.
 */
const slowReaderMs = 10_000

/** Why a stream ended before its reader was done with it: its last line says so, and where to resume. */
type EndReason = 'slow_reader' | 'shutdown' | 'log_unavailable'

/**
 * Writes the feed to the answer as a stream until it ends (NDJSON: the log's current end; SSE:
 * the client leaving), the reader is too slow, or the process stops. `release` frees the
 * project's stream slot once, whichever way it ends.
 */
export async function streamFeed(options: {
  request: FastifyRequest
  reply: FastifyReply
  reader: FeedReader
  format: 'sse' | 'ndjson'
  release: () => void
  stopping: AbortSignal
  keepAliveMs: number
}): Promise<void> {
  const { request, reply, reader, format, release, stopping, keepAliveMs } = options
  reply.hijack()
  const res = reply.raw
  res.writeHead(200, {
    'Content-Type': format === 'sse' ? 'text/event-stream; charset=utf-8' : 'application/x-ndjson; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
    'X-Request-Id': request.id,
  })
  const ended = new AbortController()
  const onStopping = () => ended.abort('shutdown')
  const onClose = () => ended.abort('gone')
  stopping.addEventListener('abort', onStopping, { once: true })
  res.once('close', onClose)
  if (stopping.aborted) ended.abort('shutdown')
  let reason: EndReason | null = null
  let lastWriteAt = Date.now()
  /** Writes, then waits for the socket to take it; false when the reader is too slow (or gone). */
  const write = async (text: string): Promise<boolean> => {
    lastWriteAt = Date.now()
    if (res.write(text)) return true
    const drained = await Promise.race([
      once(res, 'drain', { signal: ended.signal }).then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((resolve) => setTimeout(resolve, slowReaderMs, false).unref()),
    ])
    if (!drained && !ended.signal.aborted) reason = 'slow_reader'
    return drained
  }
  try {
    if (format === 'sse') await write(`retry: 1000\n: cursor ${reader.cursor}\n\n`)
    for await (const events of reader.batches({ live: format === 'sse', keepAliveMs, signal: ended.signal })) {
      if (events.length > 0) {
        if (!(await write(format === 'sse' ? sseFrames(events) : ndjsonLines(events)))) break
      } else if (format === 'sse' && Date.now() - lastWriteAt >= keepAliveMs) {
        // The cursor moves past events the filters skip: the `id:` line makes a browser resume there too.
        const cursor = reader.cursor
        if (!(await write(`: cursor ${cursor}\nid: ${cursor}\n\n`))) break
      }
    }
    if (ended.signal.reason === 'shutdown') reason = 'shutdown'
  } catch (err) {
    request.log.warn({ err, request_id: request.id }, 'event feed stream: the log could not be read; closed with where to resume')
    reason = 'log_unavailable'
  } finally {
    stopping.removeEventListener('abort', onStopping)
    res.off('close', onClose)
    reader.close()
    release()
  }
  if (!res.destroyed) {
    const last = { next_cursor: reader.cursor, has_more: reason !== null || !reader.reachedEnd, ...(reason === null ? {} : { reason }) }
    res.end(format === 'sse' ? `event: end\ndata: ${JSON.stringify(last)}\n\n` : `${JSON.stringify(last)}\n`)
  }
}

function sseFrames(events: readonly FeedEvent[]): string {
  let out = ''
  for (const e of events) out += `id: ${e.cursor}\ndata: ${JSON.stringify(e)}\n\n`
  return out
}

function ndjsonLines(events: readonly FeedEvent[]): string {
  let out = ''
  for (const e of events) out += `${JSON.stringify(e)}\n`
  return out
}
