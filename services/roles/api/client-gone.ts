import type { FastifyReply } from 'fastify'

/**
 * A signal that aborts when the client leaves before its answer is written, or the process begins
 * to stop: what a long poll waits on. The answer closing before it ended means the client left;
 * Node's request 'close' fires once the body is read, so it cannot tell. `dispose` removes the
 * listeners (one left per request would pile up on the process-wide signal).
 */
export function untilClientGone(reply: FastifyReply, stopping: AbortSignal): { signal: AbortSignal; dispose: () => void } {
  const aborted = new AbortController()
  const stop = () => aborted.abort()
  const onClose = () => {
    if (!reply.raw.writableEnded) stop()
  }
  reply.raw.once('close', onClose)
  stopping.addEventListener('abort', stop, { once: true })
  if (stopping.aborted) stop()
  return {
    signal: aborted.signal,
    dispose: () => {
      reply.raw.off('close', onClose)
      stopping.removeEventListener('abort', stop)
    },
  }
}
