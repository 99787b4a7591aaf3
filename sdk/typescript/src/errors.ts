/**
 * Every failure the SDK reports: an error answer of the service (its envelope's `code`, the HTTP
 * `status` and the `request_id`) or a request that got no answer (`status` 0, `code`
 * `network_error`, the fetch error as `cause`). Branch on `code`, never on `message` (spec, Errors).
 */
export class JobsvcError extends Error {
  override name = 'JobsvcError'
  readonly code: string
  readonly status: number
  readonly requestId: string | null
  /** Seconds from the `Retry-After` header, when the answer had one. */
  readonly retryAfter: number | null

  constructor(init: { code: string; status: number; message: string; requestId?: string | null; retryAfter?: number | null; cause?: unknown }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause })
    this.code = init.code
    this.status = init.status
    this.requestId = init.requestId ?? null
    this.retryAfter = init.retryAfter ?? null
  }

  /** Whether the same request may succeed later: no answer, 5xx, or a rate limit. */
  get isTransient(): boolean {
    return this.status === 0 || this.status >= 500 || this.status === 429
  }
}

/**
 * 410 `cursor_expired` from the event feed: retention removed events after the cursor, so reading
 * on from it would skip them silently. `oldestCursor` is the oldest cursor from which nothing the
 * log still holds is missing; resuming there is the caller's decision, since the gap is its loss.
 */
export class CursorExpiredError extends JobsvcError {
  override name = 'CursorExpiredError'
  readonly oldestCursor: string

  constructor(init: ConstructorParameters<typeof JobsvcError>[0] & { oldestCursor: string }) {
    super(init)
    this.oldestCursor = init.oldestCursor
  }
}

/**
 * 409 `invalid_state` from a named consumer's commit: the range this `ackCursor` acknowledges is no
 * longer out, because its lease ran out and it went to another poll, or a `seek` moved the consumer
 * and dropped it (docs/event-log.md, "Named consumers"). Its events are handled again elsewhere (or
 * from where the seek put the consumer): there is nothing left to commit, and nothing to retry.
 */
export class StaleCommitError extends JobsvcError {
  override name = 'StaleCommitError'
  readonly ackCursor: string

  constructor(init: ConstructorParameters<typeof JobsvcError>[0] & { ackCursor: string }) {
    super(init)
    this.ackCursor = init.ackCursor
  }
}

/** Builds the error of a non-2xx answer from its envelope (or from the bare status if it has none). */
export async function errorFromResponse(res: Response): Promise<JobsvcError> {
  const text = await res.text().catch(() => '')
  let envelope: { error?: { code?: unknown; message?: unknown; request_id?: unknown; oldest_cursor?: unknown } } = {}
  try {
    envelope = JSON.parse(text)
  } catch {
    // a proxy's HTML page or an empty body: the status is all there is
  }
  const e = envelope.error ?? {}
  const retryAfter = Number(res.headers.get('retry-after'))
  const init = {
    code: typeof e.code === 'string' ? e.code : `http_${res.status}`,
    status: res.status,
    message: typeof e.message === 'string' ? e.message : `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`,
    requestId: typeof e.request_id === 'string' ? e.request_id : res.headers.get('x-request-id'),
    retryAfter: res.headers.has('retry-after') && Number.isFinite(retryAfter) ? retryAfter : null,
  }
  if (init.code === 'cursor_expired' && typeof e.oldest_cursor === 'string') return new CursorExpiredError({ ...init, oldestCursor: e.oldest_cursor })
  return new JobsvcError(init)
}
