import { sleep } from './backoff.js'
import { JobsvcError, StaleCommitError } from './errors.js'
import type { RequestOptions, Transport } from './transport.js'
import type {
  CreateEventConsumerRequest,
  EventConsumer,
  EventConsumerPoll,
  EventConsumerPollRequest,
  EventConsumerSeekRequest,
  EventConsumerWithLag,
  FeedEvent,
} from './types.js'
import type { Logger } from './worker.js'

const consumersPath = '/jobsvc/v1/event-consumers'

/** A runner's long poll, in seconds: under the service's 30 s, and well under any proxy's idle timeout. */
const runWaitSeconds = 20

/** The longest wait between a runner's polls while the service is unreachable, overloaded or restarting. */
const runMaxBackoffMs = 30_000

/** With no long poll, the pause after an empty answer, so that an idle runner does not spend the project's hourly requests. */
const idlePauseMs = 1_000

export interface ConsumerContext {
  /** The runner's signal: aborted when the caller stops it. The batch is still committed if the handler then returns. */
  signal: AbortSignal
}

/** Handles one poll's events; returning commits them, throwing leaves them to come back after the consumer's `ack_wait_seconds`. */
export type ConsumerHandler = (events: FeedEvent[], ctx: ConsumerContext) => unknown

export interface ConsumerRunOptions {
  /** Events per poll, 1–1,000 (default 100): the most one handler call gets. */
  limit?: number
  /** 0–30 s each poll waits for a first event (default 20). */
  waitSeconds?: number
  /** Stops the runner: a poll in flight is cut short; a handler running is awaited and, if it returns, committed. */
  signal?: AbortSignal
  /** Where refused commits, failed handlers and retried polls are reported. Default `console`. */
  logger?: Logger
}

const path = (name: string) => `${consumersPath}/${encodeURIComponent(name)}`

/**
 * Named consumers of the project's event feed (docs/event-log.md, "Named consumers"): the service
 * keeps the position, so several workers can share one consumer and a restarted pipeline goes on
 * where the last commit left it. `run` is the loop to use; the other methods are its parts, for
 * loops of your own.
 */
export class EventConsumersApi {
  readonly #http: Transport

  constructor(http: Transport) {
    this.#http = http
  }

  /** `start` is `'latest'` unless given: what is appended from now on. */
  create(body: CreateEventConsumerRequest, options?: RequestOptions): Promise<EventConsumer> {
    return this.#http.json({ method: 'POST', path: consumersPath, body, options, repeat: 'key' })
  }

  list(options?: RequestOptions): Promise<{ data: EventConsumer[] }> {
    return this.#http.json({ method: 'GET', path: consumersPath, options, repeat: 'safe' })
  }

  /** The consumer with its lag (`lag_events`, `lag_seconds`). */
  get(name: string, options?: RequestOptions): Promise<EventConsumerWithLag> {
    return this.#http.json({ method: 'GET', path: path(name), options, repeat: 'safe' })
  }

  delete(name: string, options?: RequestOptions): Promise<void> {
    return this.#http.json({ method: 'DELETE', path: path(name), options, repeat: 'key' })
  }

  /** Moves the consumer (`{ after: cursor }` or `{ from_time }`); the ranges polls hold are dropped. */
  seek(name: string, to: EventConsumerSeekRequest, options?: RequestOptions): Promise<EventConsumer> {
    return this.#http.json({ method: 'POST', path: `${path(name)}/seek`, body: to, options, repeat: 'key' })
  }

  /**
   * The next events, leased to this poll for the consumer's `ack_wait_seconds`: commit the answer's
   * `ack_cursor` once they are handled. Never retried here: a poll whose answer was lost holds its
   * range until the lease ends, and a retry would only wait behind it.
   */
  poll(name: string, body: EventConsumerPollRequest = {}, options?: RequestOptions): Promise<EventConsumerPoll> {
    return this.#http.json({ method: 'POST', path: `${path(name)}/poll`, body, options, repeat: 'once' })
  }

  /**
   * Acknowledges the poll that answered `ackCursor`. Committing twice is harmless, so it is retried
   * after no answer or a 5xx. A range no longer out to the poll throws {@link StaleCommitError}.
   */
  async commit(name: string, ackCursor: string, options?: RequestOptions): Promise<EventConsumer> {
    try {
      return await this.#http.json({ method: 'POST', path: `${path(name)}/commit`, body: { cursor: ackCursor }, options, repeat: 'safe' })
    } catch (err) {
      if (err instanceof JobsvcError && err.status === 409 && err.code === 'invalid_state') {
        throw new StaleCommitError({ code: err.code, status: err.status, message: err.message, requestId: err.requestId, cause: err, ackCursor })
      }
      throw err
    }
  }

  /**
   * Polls the consumer, hands each non-empty batch to `handler`, and commits the batch's
   * `ack_cursor` only once the handler has returned (or its promise resolved). A handler that
   * throws is logged and its batch left uncommitted: after `ack_wait_seconds` the same events go,
   * whole, to the next poll of this consumer (this runner's or another's). One batch at a time;
   * for more throughput run several runners on the same consumer, in one process or several.
   *
   * Resolves once `signal` aborts (after a running handler and its commit). No answer, 5xx and 429
   * are waited out with back-off; a commit refused as stale ({@link StaleCommitError}) is logged
   * and skipped. Any other error rejects: {@link CursorExpiredError} when retention overtook the
   * consumer's position (move it with `seek`), `event_consumer_not_found` once it is deleted.
   *
   * A callback rather than an iterator because the commit must follow the handling: an iterator
   * cannot tell a loop body that threw from one that broke out, and commits a batch only when the
   * next one is asked for.
   */
  async run(name: string, handler: ConsumerHandler, options: ConsumerRunOptions = {}): Promise<void> {
    const { signal } = options
    const log = options.logger ?? console
    const ctx: ConsumerContext = { signal: signal ?? new AbortController().signal }
    const wait = options.waitSeconds ?? runWaitSeconds
    let failures = 0
    while (!signal?.aborted) {
      let batch: EventConsumerPoll
      try {
        batch = await this.poll(name, { limit: options.limit, wait }, { signal })
        failures = 0
      } catch (err) {
        if (signal?.aborted) return
        if (!(err instanceof JobsvcError) || !err.isTransient) throw err
        log.warn('jobsvc event consumer: poll failed; retrying', { consumer: name, code: err.code, status: err.status })
        await sleep(this.#http.retryDelayMs(err, failures++, runMaxBackoffMs), signal)
        continue
      }
      // An empty answer holds no range to commit: a range with no event the filter keeps counts as committed.
      if (batch.data.length === 0) {
        if (wait === 0) await sleep(idlePauseMs, signal)
        continue
      }
      try {
        await handler(batch.data, ctx)
      } catch (err) {
        log.error("jobsvc event consumer: handler failed; its events are not committed and come back after the consumer's ack_wait_seconds", {
          consumer: name,
          events: batch.data.length,
          first_event_id: batch.data[0]!.id,
          error: String(err),
        })
        continue
      }
      await this.#commitHandled(name, batch, log)
    }
  }

  /** The commit after a handler returned: sent without the runner's signal, since the work it records is done. */
  async #commitHandled(name: string, batch: EventConsumerPoll, log: Logger): Promise<void> {
    try {
      await this.commit(name, batch.ack_cursor)
    } catch (err) {
      if (err instanceof StaleCommitError) {
        log.warn('jobsvc event consumer: commit refused as stale; the events went to another poll or a seek dropped them', {
          consumer: name,
          events: batch.data.length,
          ack_cursor: batch.ack_cursor,
        })
      } else if (err instanceof JobsvcError && err.isTransient) {
        log.warn("jobsvc event consumer: commit failed; the events come back after the consumer's ack_wait_seconds", {
          consumer: name,
          events: batch.data.length,
          code: err.code,
          status: err.status,
        })
      } else {
        throw err
      }
    }
  }
}
