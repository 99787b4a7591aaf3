import http from 'node:http'
import https from 'node:https'
import type { LookupFunction } from 'node:net'

/** What one attempt got: the receiver's status, or why there is none. */
export type AttemptResult = { status: number } | { status: null; reason: 'timeout' | 'network' }

/** Only the status matters: a longer answer is not read to its end. */
export const maxResponseBytes = 64 * 1024

/**
 * Connections to receivers are kept open between deliveries (a new TLS handshake per event adds
 * up). No per-host socket limit: the deliverer's slots bound the connections, and a per-host
 * queue would make one project's slow attempts delay another project's to the same host.
 */
const agents = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) }

/**
 * Resolves `promise`, or 'timeout' once `deadline` aborts (the other stays unsettled and is
 * ignored): a DNS lookup that never answers cannot hold an attempt past its deadline.
 */
export function beforeDeadline<T>(promise: Promise<T>, deadline: AbortSignal): Promise<T | 'timeout'> {
  if (deadline.aborted) return Promise.resolve('timeout')
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve('timeout')
    deadline.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (value) => {
        deadline.removeEventListener('abort', onAbort)
        resolve(value)
      },
      (err: unknown) => {
        deadline.removeEventListener('abort', onAbort)
        reject(err instanceof Error ? err : new Error(String(err)))
      },
    )
  })
}

/**
 * A lookup that answers `address` whatever the name, so the connection goes to the address that
 * was checked rather than to the name resolved again (DNS rebinding); none without an address.
 */
function pinnedLookup(address: string | undefined): LookupFunction | undefined {
  if (address === undefined) return undefined
  const family = address.includes(':') ? 6 : 4
  return (_host, options, callback) => {
    if ((options as { all?: boolean }).all)
      (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [{ address, family }])
    else callback(null, address, family)
  }
}

/**
 * One POST under a total deadline, to `pinnedAddress` when given. http's own `timeout` is an idle timeout: a receiver that
 * sends a byte every few seconds never trips it and holds the attempt (and its slot) for as long
 * as it likes. Here the caller's `deadline` (one timer for the whole attempt) destroys the
 * request in whatever phase it is (connecting, waiting for the headers, reading the body), and
 * the attempt counts as a timeout unless the whole answer arrived first. At most
 * `maxResponseBytes` of the body are read; past that the answer is settled by its status and
 * the connection closed rather than returned to the pool.
 */
export function postWebhook(
  url: URL,
  request: { body: string; headers: Record<string, string | number>; pinnedAddress?: string | undefined },
  deadline: AbortSignal,
): Promise<AttemptResult> {
  return new Promise((resolve) => {
    if (deadline.aborted) return resolve({ status: null, reason: 'timeout' })
    let settled = false
    const settle = (result: AttemptResult) => {
      if (settled) return
      settled = true
      deadline.removeEventListener('abort', onDeadline)
      resolve(result)
    }
    const client = url.protocol === 'https:' ? https : http
    const outgoing = client.request(
      url,
      { method: 'POST', agent: agents[url.protocol as 'http:' | 'https:'], lookup: pinnedLookup(request.pinnedAddress), headers: request.headers },
      (response) => {
        const status = response.statusCode ?? 0
        let read = 0
        response.on('data', (chunk: Buffer) => {
          read += chunk.length
          if (read <= maxResponseBytes) return
          settle({ status })
          response.destroy()
        })
        response.on('end', () => settle({ status }))
        // Cut off after the status arrived: the receiver answered, as before this deadline existed.
        response.on('close', () => settle({ status }))
        response.on('error', () => settle({ status }))
      },
    )
    const onDeadline = () => {
      settle({ status: null, reason: 'timeout' })
      outgoing.destroy()
    }
    deadline.addEventListener('abort', onDeadline, { once: true })
    outgoing.on('error', () => settle({ status: null, reason: 'network' }))
    outgoing.end(request.body)
  })
}
