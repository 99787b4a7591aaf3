import { backoffDelay, sleep } from './backoff.js'
import { errorFromResponse, JobsvcError } from './errors.js'

export interface ClientOptions {
  /** The service's address, e.g. `http://127.0.0.1:8080` (no `/jobsvc/v1`). */
  baseUrl: string
  /** A project's API key (`sv_test_sk_…` or `sv_live_sk_…`). */
  apiKey: string
  /** How many times a request safe to repeat is sent again after no answer or a 5xx. Default 3. */
  maxRetries?: number
  /** First wait before such a retry; it doubles, with jitter, up to 5 s. Default 200 ms. */
  retryBaseMs?: number
  /** A fetch to use instead of Node's own (a proxy agent, a test double). */
  fetch?: typeof fetch
}

/** Options every method takes. */
export interface RequestOptions {
  signal?: AbortSignal
  /**
   * The `Idempotency-Key` to send. Creates and other changes outside the worker protocol get a
   * generated one when this is absent; the SDK's own retries reuse it, so a retried create never
   * makes two jobs.
   */
  idempotencyKey?: string
}

export type QueryValues = Record<string, string | number | boolean | null | undefined>

export interface Call {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  path: string
  query?: QueryValues | undefined
  body?: unknown
  options?: RequestOptions | undefined
  /**
   * `key`: send an Idempotency-Key (the caller's or a generated one) and retry; `safe`: retry
   * without one (reads, and a PUT that states the whole resource); `once`: never retry here (the
   * worker protocol, whose loops decide what a failure means).
   */
  repeat: 'key' | 'safe' | 'once'
  /** Replaces the API key, for the route that takes a dashboard session. */
  authorization?: string
}

export class Transport {
  readonly #baseUrl: string
  readonly #apiKey: string
  readonly #maxRetries: number
  readonly #retryBaseMs: number
  readonly #fetch: typeof fetch

  constructor(options: ClientOptions) {
    if (!options.baseUrl) throw new TypeError('baseUrl is required')
    if (!options.apiKey) throw new TypeError('apiKey is required')
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '')
    this.#apiKey = options.apiKey
    this.#maxRetries = options.maxRetries ?? 3
    this.#retryBaseMs = options.retryBaseMs ?? 200
    this.#fetch = options.fetch ?? fetch
  }

  /** Sends the call and answers its 2xx response, or throws a JobsvcError. */
  async send(call: Call): Promise<Response> {
    const headers: Record<string, string> = {
      authorization: call.authorization ?? `Bearer ${this.#apiKey}`,
      accept: 'application/json',
    }
    if (call.body !== undefined) headers['content-type'] = 'application/json'
    if (call.repeat === 'key') headers['idempotency-key'] = call.options?.idempotencyKey ?? globalThis.crypto.randomUUID()
    const body = call.body === undefined ? undefined : JSON.stringify(call.body)
    const url = this.#url(call.path, call.query)
    const signal = call.options?.signal
    for (let attempt = 0; ; attempt++) {
      let error: JobsvcError
      try {
        const res = await this.#fetch(url, { method: call.method, headers, body, signal })
        if (res.ok) return res
        error = await errorFromResponse(res)
      } catch (cause) {
        if (signal?.aborted) throw cause
        error = new JobsvcError({ code: 'network_error', status: 0, message: `${call.method} ${call.path}: ${String(cause)}`, cause })
      }
      const retryable = error.status === 0 || error.status >= 500
      if (call.repeat === 'once' || !retryable || attempt >= this.#maxRetries) throw error
      await sleep(this.retryDelayMs(error, attempt, 5_000), signal)
      if (signal?.aborted) throw signal.reason
    }
  }

  /** How long to wait before sending again after `error`: its Retry-After, else back-off from `retryBaseMs` up to `maxMs`. */
  retryDelayMs(error: JobsvcError, attempt: number, maxMs: number): number {
    return error.retryAfter !== null ? error.retryAfter * 1000 : backoffDelay(attempt, this.#retryBaseMs, maxMs)
  }

  /** Sends the call and parses its JSON answer (undefined for 204). */
  async json<T>(call: Call): Promise<T> {
    const res = await this.send(call)
    if (res.status === 204) return undefined as T
    return (await res.json()) as T
  }

  #url(path: string, query: QueryValues | undefined): string {
    const params = new URLSearchParams()
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) params.set(key, String(value))
    }
    const search = params.toString()
    return `${this.#baseUrl}${path}${search ? `?${search}` : ''}`
  }
}
