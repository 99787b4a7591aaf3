import { sleep } from './backoff.js'
import { JobsvcError } from './errors.js'
import type { Transport } from './transport.js'
import type { EventFeedAnswer, EventFeedQuery, FeedEvent } from './types.js'

const feedPath = '/jobsvc/v1/events'

/** What a follower asks for per page: few requests against the project's hourly limit, pages that stay small in memory. */
const followLimit = 500

/** A follower's long poll, in seconds: under the service's 30 s, and well under any proxy's idle timeout. */
const followWaitSeconds = 20

/** The longest wait between a follower's attempts while the service is unreachable, overloaded or restarting. */
const followMaxBackoffMs = 30_000

/** Which of the project's events the feed answers, and from where (docs/event-log.md, "The event feed"). */
export interface EventFeedOptions {
  /** A `cursor` (of an event) or `nextCursor` (of a page) this feed gave: the events after it. */
  after?: string
  /** From the first event that occurred at or after this instant, instead of `after`. */
  fromTime?: string | Date
  /** Event types of the catalogue, e.g. `['job_created', 'job_succeeded']`; every type when absent. */
  types?: readonly string[]
  /** Events about work of this queue: its jobs, their progress reports, its recurring schedules and alerts. */
  queue?: string
  /** Events about work of this job type: its jobs, their progress reports, its recurring schedules. */
  jobType?: string
  /** The events of one job and its progress reports. */
  jobId?: string
  /** Events per page, 1–1,000 (the service's default is 100; a follower asks for 500). */
  limit?: number
  /** 0–30 s to wait for a first event when none is stored yet (a long poll; a follower waits 20 s). */
  waitSeconds?: number
  signal?: AbortSignal
}

/** One page of the feed, oldest event first. */
export interface EventsPage {
  data: FeedEvent[]
  /** Where to resume, never null: with filters it moves past the events they skipped. */
  nextCursor: string
  /** More events can be read at once; false when the page reached the log's end. */
  hasMore: boolean
}

function toFeedQuery(options: EventFeedOptions): EventFeedQuery {
  // The service reads an empty `types` as no filter at all: an empty list must not widen to every type.
  if (options.types !== undefined && options.types.length === 0) throw new TypeError('types names no event type; leave it out to read every type')
  return {
    after: options.after,
    from_time: options.fromTime instanceof Date ? options.fromTime.toISOString() : options.fromTime,
    types: options.types?.join(','),
    queue: options.queue,
    job_type: options.jobType,
    job_id: options.jobId,
    limit: options.limit,
    wait: options.waitSeconds,
  }
}

/**
 * `GET /events`, one page. `repeat` is the transport's: `safe` for a page the caller asked for,
 * `once` for a follower, whose own loop retries.
 */
export async function fetchEventsPage(http: Transport, options: EventFeedOptions, repeat: 'safe' | 'once'): Promise<EventsPage> {
  const { signal } = options
  const res = await http.send({ method: 'GET', path: feedPath, query: toFeedQuery(options), options: { signal }, repeat })
  let body: EventFeedAnswer
  try {
    body = (await res.json()) as EventFeedAnswer
  } catch (cause) {
    // A connection cut while the page was arriving is no answer, which a follower retries.
    if (signal?.aborted) throw cause
    throw new JobsvcError({ code: 'network_error', status: 0, message: `GET ${feedPath}: the answer broke off: ${String(cause)}`, cause })
  }
  return { data: body.data, nextCursor: body.next_cursor, hasMore: body.has_more }
}

/**
 * Every event from the start the options give, then each one as it is appended, page after page
 * of long polls. It resumes each page from the last page's `nextCursor`, not from its last
 * event's cursor, so that filtered-out events are not read again. A failure that may pass (no
 * answer, 5xx, 429) is waited out with back-off for as long as it lasts; any other error,
 * {@link CursorExpiredError} among them, ends the iteration by throwing. Aborting the signal ends
 * it without an error.
 */
export async function* followEvents(http: Transport, options: EventFeedOptions): AsyncGenerator<FeedEvent> {
  const { signal } = options
  let start: Pick<EventFeedOptions, 'after' | 'fromTime'> = { after: options.after, fromTime: options.fromTime }
  let failures = 0
  while (!signal?.aborted) {
    const pageOptions = { ...options, ...start, limit: options.limit ?? followLimit, waitSeconds: options.waitSeconds ?? followWaitSeconds }
    let page: EventsPage
    try {
      page = await fetchEventsPage(http, pageOptions, 'once')
      failures = 0
    } catch (err) {
      if (signal?.aborted) return
      if (!(err instanceof JobsvcError) || !err.isTransient) throw err
      await sleep(http.retryDelayMs(err, failures++, followMaxBackoffMs), signal)
      continue
    }
    for (const event of page.data) {
      if (signal?.aborted) return
      yield event
    }
    start = { after: page.nextCursor }
  }
}
