import http from 'node:http'
import https from 'node:https'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'

/** Longer than any poll holds (wait_seconds) or a list waits for the projector. */
const requestTimeoutMs = 30_000
export const maxRetries = 5

export interface Reply {
  status: number
  headers: http.IncomingHttpHeaders
  body: any
  /** performance.now() when the whole response had arrived. */
  at: number
}

export class HttpError extends Error {
  constructor(
    readonly what: string,
    readonly reply: Reply,
  ) {
    super(`${what}: HTTP ${reply.status} ${JSON.stringify(reply.body)}`)
    this.name = 'HttpError'
  }
}

/**
 * A keep-alive client on node:http: one socket per request in flight, so the pool is sized to
 * the bench's concurrency and no request waits for a connection (no pipelining). Requests take no
 * AbortSignal (a listener per request costs client CPU on a 2-core box); `close()` ends whatever
 * is in flight instead, and a stuck request times out.
 */
export class Client {
  readonly #options: http.RequestOptions
  readonly #basePath: string
  readonly #auth: string
  readonly #agent: http.Agent
  readonly #transport: typeof http | typeof https

  constructor(base: string, apiKey: string, connections: number) {
    const url = new URL(base)
    const secure = url.protocol === 'https:'
    this.#transport = secure ? https : http
    const agentOptions = { keepAlive: true, maxSockets: connections, maxFreeSockets: connections }
    this.#agent = secure ? new https.Agent(agentOptions) : new http.Agent(agentOptions)
    this.#options = { hostname: url.hostname, port: url.port, agent: this.#agent, timeout: requestTimeoutMs }
    this.#basePath = url.pathname.replace(/\/$/, '')
    this.#auth = `Bearer ${apiKey}`
  }

  request(method: string, path: string, body?: unknown): Promise<Reply> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const headers: http.OutgoingHttpHeaders = { authorization: this.#auth, accept: 'application/json' }
    if (payload) {
      headers['content-type'] = 'application/json'
      headers['content-length'] = payload.length
    }
    return new Promise((resolvePromise, reject) => {
      const req = this.#transport.request({ ...this.#options, method, path: this.#basePath + path, headers }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const at = performance.now()
          const text = Buffer.concat(chunks).toString('utf8')
          let parsed: unknown = text
          if (String(res.headers['content-type'] ?? '').includes('json')) {
            try {
              parsed = JSON.parse(text)
            } catch {
              parsed = text
            }
          }
          resolvePromise({ status: res.statusCode ?? 0, headers: res.headers, body: parsed, at })
        })
      })
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${requestTimeoutMs} ms`)))
      req.on('error', reject)
      req.end(payload)
    })
  }

  /** Ends every request in flight; the pool stays usable. */
  close(): void {
    this.#agent.destroy()
  }
}

/** The log sequence a write's answer carries (X-Event-Seq); null when it carries none. */
export function eventSeq(reply: Reply): number | null {
  const raw = reply.headers['x-event-seq']
  const n = Number(Array.isArray(raw) ? raw[0] : raw)
  return Number.isFinite(n) && n > 0 ? n : null
}

/** 429 and 503 mean "not done, come back"; anything else is an answer. */
export function isRetryable(status: number): boolean {
  return status === 429 || status === 503
}

/** Sends again, backing off from 50 ms, while the answer is retryable, up to maxRetries times. */
export async function withRetries(what: string, signal: AbortSignal, attempt: () => Promise<Reply>, ok: number): Promise<Reply> {
  for (let i = 0; ; i++) {
    const reply = await attempt()
    if (reply.status === ok) return reply
    if (!isRetryable(reply.status) || i >= maxRetries) throw new HttpError(what, reply)
    await sleep(50 * 2 ** i, undefined, { signal })
  }
}

/** The key may need a moment to become usable (the key table is a read model); also checks the URL. */
export async function awaitAccess(client: Client, signal: AbortSignal): Promise<void> {
  const deadline = performance.now() + 15_000
  for (;;) {
    signal.throwIfAborted()
    const reply = await client.request('GET', '/jobsvc/v1/jobs?limit=1')
    if (reply.status === 200) return
    if (performance.now() > deadline) throw new HttpError('GET /jobsvc/v1/jobs', reply)
    await sleep(100, undefined, { signal })
  }
}
