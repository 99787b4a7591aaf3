import type { CommandMeta, Decider } from './decider.ts'
import { EventBeforeCreation } from './decider.ts'
import { EventConsumerExists, EventConsumerLimitReached, EventConsumerNotFound, InvalidState } from './errors.ts'
import { isAfter, type FeedPosition } from './event-feed.ts'

/**
 * A named consumer of a project's event feed (docs/event-log.md, "Named consumers"): the feed's
 * position kept by the service, so that a pipeline need not store its own and several of its
 * workers can share one.
 *
 * Each poll is handed a range of the feed (after `from` through `to`), leased to it until
 * `lease_until`; the range is acknowledged by committing its `to` (the poll's `ack_cursor`). The
 * consumer's position, `committed`, is the end of the ranges acknowledged without a gap, so a
 * range acknowledged early by a fast poller never covers a slower poller's range. A hand-out is an
 * append at the consumer's expected sequence, so two polls never get the same range; a range not
 * acknowledged when its lease ends goes to the next poll, whole (at-least-once, never a skip).
 */

export interface ConsumerFilter {
  types: string[] | null
  queue: string | null
  job_type: string | null
}

/** A range of the feed handed to a poll and not yet acknowledged (or acknowledged behind an older one that is not). */
export interface ConsumerRange {
  from: FeedPosition
  to: FeedPosition
  lease_until: string
  acked: boolean
}

export interface EventConsumer {
  project_id: string
  name: string
  filter: ConsumerFilter
  /** Seconds a poll's range is held for its poller before it goes to the next poll (5–3,600). */
  ack_wait_seconds: number
  /** Every event through it was acknowledged: where a restarted pipeline goes on. */
  committed: FeedPosition
  /** Events through it were handed out. */
  delivered: FeedPosition
  /** The ranges after `committed`, oldest first. */
  ranges: ConsumerRange[]
  created_at: string
  updated_at: string
  deleted: boolean
}

export type EventConsumerAggregate = EventConsumer | null

export type EventConsumerEvent =
  | {
      type: 'consumer_created'
      data: { project_id: string; name: string; filter: ConsumerFilter; ack_wait_seconds: number; start: FeedPosition; created_at: string }
    }
  /**
   * A new range handed to a poll. `empty`: the poll found no event its filter keeps in it, so it
   * counts as acknowledged (nobody will commit it) and the position passes it with those before.
   */
  | { type: 'consumer_delivered'; data: { from: FeedPosition; to: FeedPosition; empty: boolean; lease_until: string; delivered_at: string } }
  /** A range whose lease ended, handed to another poll. */
  | { type: 'consumer_redelivered'; data: { from: FeedPosition; to: FeedPosition; lease_until: string; redelivered_at: string } }
  /** The range ending at `to` acknowledged; `position` is the consumer's position after it. */
  | { type: 'consumer_committed'; data: { to: FeedPosition; position: FeedPosition; committed_at: string } }
  | { type: 'consumer_seeked'; data: { position: FeedPosition; seeked_at: string } }
  | { type: 'consumer_deleted'; data: { deleted_at: string } }

type Command<T extends string, D> = { type: T; data: D; meta: CommandMeta }

export type EventConsumerCommand =
  | Command<
      'create_consumer',
      {
        project_id: string
        name: string
        filter: ConsumerFilter
        ack_wait_seconds: number
        start: FeedPosition
        live_consumers: number
        max_consumers: number
      }
    >
  /** Hand out the range after `from` (the consumer's `delivered`) through `to`; `empty`: the poll found no event in it. */
  | Command<'deliver_range', { from: FeedPosition; to: FeedPosition; empty: boolean }>
  /** Hand an expired range out again. */
  | Command<'redeliver_range', { from: FeedPosition; to: FeedPosition }>
  | Command<'commit_range', { to: FeedPosition }>
  | Command<'seek_position', { position: FeedPosition }>
  | Command<'delete_consumer', Record<string, never>>

/** A consumer's name: what its subject and URL carry. */
export const consumerNamePattern = /^[A-Za-z0-9_-]{1,64}$/

export const defaultAckWaitSeconds = 30

/** Ranges a consumer has out at once: past it, a poll waits for an acknowledgement or a lease's end. */
export const maxOutstandingRanges = 64

/** What the next poll is handed at `now`: the oldest range whose lease ended, or a new one after `delivered`. */
export type NextHandOut = { kind: 'again'; range: ConsumerRange } | { kind: 'new'; from: FeedPosition } | { kind: 'full' }

export function nextHandOut(consumer: EventConsumer, now: string): NextHandOut {
  const expired = consumer.ranges.find((r) => !r.acked && r.lease_until <= now)
  if (expired !== undefined) return { kind: 'again', range: expired }
  if (consumer.ranges.length >= maxOutstandingRanges) return { kind: 'full' }
  return { kind: 'new', from: consumer.delivered }
}

/** What a consumer's views and list show of it. */
export interface ConsumerSummary {
  name: string
  filter: ConsumerFilter
  ack_wait_seconds: number
  committed: FeedPosition
  delivered: FeedPosition
  /** The earliest lease of a range still out; null when none is. */
  lease_until: string | null
  /** Ranges handed out and not acknowledged. */
  outstanding: number
  created_at: string
  updated_at: string
}

export function summaryOf(c: EventConsumer): ConsumerSummary {
  const out = c.ranges.filter((r) => !r.acked)
  const lease = out.map((r) => r.lease_until).sort()[0] ?? null
  return {
    name: c.name,
    filter: c.filter,
    ack_wait_seconds: c.ack_wait_seconds,
    committed: c.committed,
    delivered: c.delivered,
    lease_until: lease,
    outstanding: out.length,
    created_at: c.created_at,
    updated_at: c.updated_at,
  }
}

function requireLive(state: EventConsumerAggregate): EventConsumer {
  if (state === null || state.deleted) throw new EventConsumerNotFound('no named event consumer of that name in this project')
  return state
}

const samePosition = (a: FeedPosition, b: FeedPosition) => a.seq === b.seq && a.index === b.index

/** The ranges without the acknowledged ones at their head, and the position they reach. */
function compact(committed: FeedPosition, ranges: readonly ConsumerRange[]): { committed: FeedPosition; ranges: ConsumerRange[] } {
  let i = 0
  while (i < ranges.length && ranges[i]!.acked) i++
  return { committed: i === 0 ? committed : ranges[i - 1]!.to, ranges: ranges.slice(i) }
}

function decide(command: EventConsumerCommand, state: EventConsumerAggregate): EventConsumerEvent[] {
  const { now } = command.meta
  if (command.type === 'create_consumer') {
    const d = command.data
    if (state !== null && !state.deleted) throw new EventConsumerExists(`the project has a named event consumer ${d.name} already`)
    if (d.live_consumers >= d.max_consumers) {
      throw new EventConsumerLimitReached(`the project's plan allows ${d.max_consumers} named event consumers; delete one first`)
    }
    return [
      {
        type: 'consumer_created',
        data: { project_id: d.project_id, name: d.name, filter: d.filter, ack_wait_seconds: d.ack_wait_seconds, start: d.start, created_at: now },
      },
    ]
  }
  const consumer = requireLive(state)
  const leaseUntil = () => new Date(Date.parse(now) + consumer.ack_wait_seconds * 1000).toISOString()
  switch (command.type) {
    case 'deliver_range': {
      const { from, to, empty } = command.data
      // The poll read from where the consumer stood when it began; another poll moved it since.
      const next = nextHandOut(consumer, now)
      if (next.kind !== 'new' || !samePosition(from, next.from)) throw new InvalidState('another poll of this consumer took this range first')
      if (!isAfter(to, from)) return []
      return [{ type: 'consumer_delivered', data: { from, to, empty, lease_until: leaseUntil(), delivered_at: now } }]
    }
    case 'redeliver_range': {
      const next = nextHandOut(consumer, now)
      if (next.kind !== 'again' || !samePosition(next.range.from, command.data.from) || !samePosition(next.range.to, command.data.to)) {
        throw new InvalidState('another poll of this consumer took this range first')
      }
      return [{ type: 'consumer_redelivered', data: { ...command.data, lease_until: leaseUntil(), redelivered_at: now } }]
    }
    case 'commit_range': {
      const { to } = command.data
      if (!isAfter(to, consumer.committed)) return []
      const range = consumer.ranges.find((r) => samePosition(r.to, to))
      if (range === undefined) throw new InvalidState('the cursor is not the ack_cursor of a poll of this consumer that is still out')
      if (range.acked) return []
      const after = compact(
        consumer.committed,
        consumer.ranges.map((r) => (r === range ? { ...r, acked: true } : r)),
      )
      return [{ type: 'consumer_committed', data: { to, position: after.committed, committed_at: now } }]
    }
    case 'seek_position':
      return [{ type: 'consumer_seeked', data: { position: command.data.position, seeked_at: now } }]
    case 'delete_consumer':
      return [{ type: 'consumer_deleted', data: { deleted_at: now } }]
  }
}

function evolve(state: EventConsumerAggregate, event: EventConsumerEvent): EventConsumerAggregate {
  if (event.type === 'consumer_created') {
    const d = event.data
    return {
      project_id: d.project_id,
      name: d.name,
      filter: d.filter,
      ack_wait_seconds: d.ack_wait_seconds,
      committed: d.start,
      delivered: d.start,
      ranges: [],
      created_at: d.created_at,
      updated_at: d.created_at,
      deleted: false,
    }
  }
  if (state === null) throw new EventBeforeCreation(event.type, 'consumer_created')
  switch (event.type) {
    case 'consumer_delivered': {
      const { from, to, empty, lease_until } = event.data
      const ranges = [...state.ranges, { from, to, lease_until, acked: empty }]
      return { ...state, delivered: to, ...compact(state.committed, ranges), updated_at: event.data.delivered_at }
    }
    case 'consumer_redelivered': {
      const { from, to, lease_until } = event.data
      const ranges = state.ranges.map((r) => (samePosition(r.from, from) && samePosition(r.to, to) ? { ...r, lease_until } : r))
      return { ...state, ranges, updated_at: event.data.redelivered_at }
    }
    case 'consumer_committed': {
      const acked = state.ranges.map((r) => (samePosition(r.to, event.data.to) ? { ...r, acked: true } : r))
      return { ...state, ...compact(state.committed, acked), updated_at: event.data.committed_at }
    }
    case 'consumer_seeked':
      return { ...state, committed: event.data.position, delivered: event.data.position, ranges: [], updated_at: event.data.seeked_at }
    case 'consumer_deleted':
      return { ...state, deleted: true, updated_at: event.data.deleted_at }
  }
}

export const eventConsumerDecider: Decider<EventConsumerCommand, EventConsumerEvent, EventConsumerAggregate> = {
  initialState: null,
  decide,
  evolve,
}
