import { InvalidState } from '../../../domain/errors.ts'
import {
  defaultAckWaitSeconds,
  nextHandOut,
  summaryOf,
  type ConsumerFilter,
  type ConsumerSummary,
  type EventConsumer,
  type EventConsumerAggregate,
  type EventConsumerCommand,
} from '../../../domain/event-consumer.ts'
import { EventConsumerNotFound } from '../../../domain/errors.ts'
import { feedAggregates, type FeedEvent, type FeedFilter, type FeedPosition } from '../../../domain/event-feed.ts'
import type { PlanLimits } from '../../../domain/plans.ts'
import { eventConsumers } from '../../../projections/event-consumers.ts'
import { eventConsumerHandler } from '../../../streams/aggregates.ts'
import type { Loaded } from '../../../streams/event-store.ts'
import { setTimeout as sleepFor } from 'node:timers/promises'
import type { Deps } from '../../infrastructure/runtime.ts'
import { UnknownCursor, type EventFeed } from './event-feed.ts'
import { decodeFeedCursor, encodeFeedCursor } from './feed-cursor.ts'

/**
 * Named consumers of a project's event feed (docs/event-log.md, "Named consumers"): the
 * aggregate (domain/event-consumer.ts) keeps the positions; polls read through the feed
 * (event-feed.ts) and hand out their range with an append at the consumer's expected sequence.
 */

/** Where a consumer starts, or is moved to. */
export type ConsumerStart = 'earliest' | 'latest' | { after: string } | { from_time: string }

export interface ConsumerInput {
  name: string
  types: string[] | null
  queue: string | null
  job_type: string | null
  ack_wait_seconds?: number
  start: ConsumerStart
}

/** A consumer as the API shows it: positions as cursors. */
export interface ConsumerView {
  name: string
  types: string[] | null
  queue: string | null
  job_type: string | null
  ack_wait_seconds: number
  /** Every event through it was committed: where a restarted pipeline goes on. */
  position: string
  /** Events through it were handed to polls. */
  delivered: string
  /** When the oldest range still out goes to the next poll if not acknowledged; null when none is out. */
  lease_until: string | null
  /** Polls' ranges handed out and not acknowledged. */
  outstanding: number
  created_at: string
  updated_at: string
}

export interface ConsumerLag {
  /** Messages on the consumer's subjects after its position (an upper bound of its events when types or queue narrow it). */
  lag_events: number
  /** Seconds since the log stored the oldest of them; 0 when none. */
  lag_seconds: number
}

export interface ConsumerPoll {
  events: FeedEvent[]
  /** Commit it once the events are handled. */
  ackCursor: string
  hasMore: boolean
}

export class EventConsumers {
  readonly #deps: Deps
  readonly #feed: EventFeed

  constructor(deps: Deps, feed: EventFeed) {
    this.#deps = deps
    this.#feed = feed
  }

  async create(projectId: string, input: ConsumerInput, plan: PlanLimits): Promise<ConsumerView> {
    const start = await this.#positionOf(projectId, input.start)
    const result = await this.#decide(projectId, input.name, {
      type: 'create_consumer',
      data: {
        project_id: projectId,
        name: input.name,
        filter: { types: input.types, queue: input.queue, job_type: input.job_type },
        ack_wait_seconds: input.ack_wait_seconds ?? defaultAckWaitSeconds,
        start,
        live_consumers: await eventConsumers.liveCount(this.#deps.sql, projectId),
        max_consumers: plan.max_event_consumers,
      },
      meta: { now: this.#now() },
    })
    return viewOf(projectId, summaryOf(live(result)))
  }

  /** One consumer with its lag, read from the log (the list reads the read model). */
  async get(projectId: string, name: string): Promise<ConsumerView & ConsumerLag> {
    const consumer = live((await this.#load(projectId, name)).state)
    const backlog = await this.#feed.backlog(projectId, feedFilterOf(consumer.filter), consumer.committed)
    const now = this.#deps.now().getTime()
    return {
      ...viewOf(projectId, summaryOf(consumer)),
      lag_events: backlog.messages,
      lag_seconds: backlog.oldestStoredAtMs === null ? 0 : Math.max(0, Math.round((now - backlog.oldestStoredAtMs) / 1000)),
    }
  }

  async list(projectId: string): Promise<ConsumerView[]> {
    return (await eventConsumers.ofProject(this.#deps.sql, projectId)).map((c) => viewOf(projectId, c))
  }

  /**
   * The next range of the consumer, leased to this poll: the oldest range whose lease ended, read
   * again whole, or up to `limit` events after what was handed out (waiting up to `waitMs` for a
   * first one). A poll that lost the hand-out to another poll of the same consumer reads again
   * from where that one left it, so no two polls hold the same events.
   */
  async poll(projectId: string, name: string, limit: number, waitMs: number, signal?: AbortSignal): Promise<ConsumerPoll> {
    const deadline = Date.now() + waitMs
    const ref = eventConsumerHandler.ref(projectId, name)
    for (;;) {
      const loaded = await this.#load(projectId, name)
      const consumer = live(loaded.state)
      const next = nextHandOut(consumer, this.#now())
      const filter = feedFilterOf(consumer.filter)
      const hint = { hint: loaded as Loaded<EventConsumer> }
      try {
        if (next.kind === 'full') {
          // Every range the consumer may have out is out: wait for an acknowledgement or a lease to end.
          const left = deadline - Date.now()
          if (left <= 0) return { events: [], ackCursor: encodeFeedCursor(projectId, consumer.committed), hasMore: true }
          await sleep(Math.min(left, 250), signal)
          continue
        }
        if (next.kind === 'again') {
          const { from, to } = next.range
          const page = await this.#feed.page(projectId, { after: encodeFeedCursor(projectId, from) }, filter, maxRangeEvents, 0, signal, to)
          await eventConsumerHandler.decide(this.#deps, ref, { type: 'redeliver_range', data: { from, to }, meta: { now: this.#now() } }, hint)
          return { events: page.events, ackCursor: encodeFeedCursor(projectId, to), hasMore: true }
        }
        const page = await this.#feed.page(
          projectId,
          { after: encodeFeedCursor(projectId, next.from) },
          filter,
          limit,
          Math.max(0, deadline - Date.now()),
          signal,
        )
        const to = decodeFeedCursor(projectId, page.nextCursor)!
        await eventConsumerHandler.decide(
          this.#deps,
          ref,
          { type: 'deliver_range', data: { from: next.from, to, empty: page.events.length === 0 }, meta: { now: this.#now() } },
          hint,
        )
        return { events: page.events, ackCursor: page.nextCursor, hasMore: page.hasMore }
      } catch (err) {
        // Another poll took the range (or a lease ended meanwhile): read again from where it stands.
        if (!(err instanceof InvalidState) || signal?.aborted === true) throw err
      }
    }
  }

  /** Acknowledges the range a poll answered with this `ack_cursor`; the position moves over every range acknowledged without a gap. */
  async commit(projectId: string, name: string, cursor: string): Promise<ConsumerView> {
    const to = decodeFeedCursor(projectId, cursor)
    if (to === null) throw new UnknownCursor()
    const result = await this.#decide(projectId, name, { type: 'commit_range', data: { to }, meta: { now: this.#now() } })
    return viewOf(projectId, summaryOf(live(result)))
  }

  async seek(projectId: string, name: string, to: { after: string } | { from_time: string }): Promise<ConsumerView> {
    live((await this.#load(projectId, name)).state)
    const position = await this.#positionOf(projectId, to)
    const result = await this.#decide(projectId, name, { type: 'seek_position', data: { position }, meta: { now: this.#now() } })
    return viewOf(projectId, summaryOf(live(result)))
  }

  async delete(projectId: string, name: string): Promise<void> {
    await this.#decide(projectId, name, { type: 'delete_consumer', data: {}, meta: { now: this.#now() } })
  }

  #now(): string {
    return this.#deps.now().toISOString()
  }

  #load(projectId: string, name: string): Promise<Loaded<EventConsumerAggregate>> {
    return eventConsumerHandler.load(this.#deps.store, eventConsumerHandler.ref(projectId, name))
  }

  async #decide(projectId: string, name: string, command: EventConsumerCommand): Promise<EventConsumerAggregate> {
    return (await eventConsumerHandler.decide(this.#deps, eventConsumerHandler.ref(projectId, name), command)).state
  }

  async #positionOf(projectId: string, start: ConsumerStart): Promise<FeedPosition> {
    if (start === 'earliest') return { seq: 0, index: 'all' }
    if (start === 'latest') return this.#feed.endPosition()
    if ('after' in start) return this.#feed.resumablePosition(projectId, start.after)
    return this.#feed.positionBefore(projectId, start.from_time)
  }
}

function live(state: EventConsumerAggregate): EventConsumer {
  if (state === null || state.deleted) throw new EventConsumerNotFound('no named event consumer of that name in this project')
  return state
}

/** The feed filter of a consumer: every aggregate of the project (its routes need `admin`). */
function feedFilterOf(filter: ConsumerFilter): FeedFilter {
  return {
    types: filter.types === null ? null : new Set(filter.types),
    queue: filter.queue,
    jobType: filter.job_type,
    jobId: null,
    aggregates: new Set(feedAggregates),
  }
}

function viewOf(projectId: string, c: ConsumerSummary): ConsumerView {
  return {
    name: c.name,
    types: c.filter.types,
    queue: c.filter.queue,
    job_type: c.filter.job_type,
    ack_wait_seconds: c.ack_wait_seconds,
    position: encodeFeedCursor(projectId, c.committed),
    delivered: encodeFeedCursor(projectId, c.delivered),
    lease_until: c.lease_until,
    outstanding: c.outstanding,
    created_at: c.created_at,
    updated_at: c.updated_at,
  }
}

/** A range read again holds at most what one poll may take. */
const maxRangeEvents = 1000

async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  await sleepFor(ms, undefined, signal === undefined ? {} : { signal }).catch(() => undefined)
}
