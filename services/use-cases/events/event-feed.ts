import type { Decider } from '../../../domain/decider.ts'
import {
  feedAggregates,
  filtersWork,
  keepsWork,
  readableByTenant,
  singleAggregateOf,
  workOf,
  type FeedAggregate,
  type FeedEvent,
  type FeedFilter,
  type WorkAttributes,
} from '../../../domain/event-feed.ts'
import type { Job } from '../../../domain/job.ts'
import type { Project } from '../../../domain/project/index.ts'
import { auditLog } from '../../../projections/audit-log.ts'
import {
  alertHandler,
  deliveryHandler,
  auditTrailHandler,
  jobHandler,
  progressHandler,
  projectHandler,
  recurringHandler,
  webhookHandler,
} from '../../../streams/aggregates.ts'
import { decodeEventMessage, type EventMessage, type EventRecord, type EventStore, type StoredEvent } from '../../../streams/event-store.ts'
import { firstStoredOn, LogScan, type ScannedMessage } from '../../../streams/log-scan.ts'
import { NarrowingScan } from '../../../streams/narrowing-scan.ts'
import { eventsStreamName, eventSubject, jobSubjectsFilter, projectKindFilter, projectSubjectsFilter } from '../../../streams/names.ts'
import { fromStoredState, toStoredState } from '../../../streams/stored-forms.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { decodeFeedCursor, encodeFeedCursor, isAfter, logStart, type FeedPosition } from './feed-cursor.ts'

/**
 * A project's event feed (docs/event-log.md, "The event feed"): its events in the log's order,
 * from a cursor, filtered, with each aggregate's state after the event, without secrets.
 *
 * Reading is one scan of the log (streams/narrowing-scan.ts) for the subjects of the project (or
 * of one job, or of one kind of aggregate when the types asked for are all of it): it skims the
 * log from the cursor at once, and has the server skip the other projects' messages once its
 * filtered consumer is there; types are then matched on the message's header before anything is
 * decoded, and queue and job type on the state.
 */

/**
 * How much earlier than `from_time` the log is read: an event's time is its process's clock at the
 * decision, the log's own is the server's at the append, and the two may differ a little.
 */
const clockMarginMs = 10_000

/** The page's bound on messages looked at when filters keep few of them: the page ends there with `has_more`. */
const maxExaminedPerPage = 20_000

/** Messages asked of the log at once. */
const readBatch = 256

/** A cursor from before what retention removed: 410 `cursor_expired`, and where the log is whole again. */
export class CursorExpired extends Error {
  readonly oldestCursor: string
  constructor(oldestCursor: string) {
    super(
      `events after this cursor were removed by retention; the oldest cursor the feed can resume from is ${oldestCursor} (events before it are gone)`,
    )
    this.name = 'CursorExpired'
    this.oldestCursor = oldestCursor
  }
}

/** A cursor this project was not given (edited, or another project's): 400 `invalid_cursor`. */
export class UnknownCursor extends Error {
  constructor() {
    super('the cursor is not one this service issued for this project')
    this.name = 'UnknownCursor'
  }
}

/** Where a read starts: after a cursor, at the first event at or after a time, or at the oldest event. */
export type FeedStart = { after: string } | { fromTime: string } | null

/** Resolves true once the projector has applied the log through `seq`, false after `maxWaitMs`. */
export type UntilProjected = (seq: number, maxWaitMs: number) => Promise<boolean>

/** Where each event handed out stands in the log, for its leaf index (kept aside: not part of the event). */
const placeOf = new WeakMap<FeedEvent, { seq: number; index: number }>()

/**
 * How long a page or a stream's batch waits for the projector to take its events into the Merkle
 * log: about ten times its usual lag under load, and short enough that a projector that is down
 * slows the feed's tail by no more than this (its events then go out with `leaf_index: null`).
 */
const leafIndexWaitMs = 500

/**
 * Gives each event its leaf index in the project's Merkle log (audit_positions: a message's first
 * leaf, its events after it). Events at the log's end may not be taken in yet: the projector is
 * waited for, boundedly, and what it has not reached by then keeps null. The feed reads the log,
 * not Postgres: an outage of Postgres leaves the indexes null rather than failing the page.
 */
async function withLeafIndexes(deps: Deps, untilProjected: UntilProjected, projectId: string, events: readonly FeedEvent[]): Promise<void> {
  if (events.length === 0 || !deps.config.tunables.audit_log_enabled) return
  const places = events.map((e) => placeOf.get(e)!)
  const messages = new Map(events.map((e, i) => [places[i]!.seq, { aggregateId: e.aggregate_id, seq: places[i]!.seq }]))
  let first: Map<number, number>
  try {
    await untilProjected(Math.max(...places.map((p) => p.seq)), Math.min(leafIndexWaitMs, deps.config.tunables.read_your_writes_wait_ms))
    first = await auditLog.leafIndexes(deps.sql, projectId, [...messages.values()])
  } catch (err) {
    deps.log.warn({ err, project_id: projectId }, 'event feed: leaf indexes unavailable; events go out with leaf_index null')
    return
  }
  events.forEach((event, i) => {
    const start = first.get(places[i]!.seq)
    event.leaf_index = start === undefined ? null : start + places[i]!.index
  })
}

export interface FeedPage {
  events: FeedEvent[]
  /** Where to resume: after the last event returned, or past everything looked at when the page ended at the log's end. */
  nextCursor: string
  /** The page stopped at its limit or its bound on messages looked at: more may follow at once. */
  hasMore: boolean
}

/** What the feed needs of each aggregate's handler: its evolve, and its message at a sequence. */
interface FeedHandler {
  decider: Decider<never, unknown, unknown>
  ref(projectId: string, id: string): never
  at(store: EventStore, ref: never, seq: number): Promise<EventRecord | null>
}

const handlers = {
  job: jobHandler,
  progress: progressHandler,
  // A project is its own scope: its ref takes the project id alone.
  project: { ...projectHandler, ref: (projectId: string) => projectHandler.ref(projectId) },
  recurring: recurringHandler,
  alert: alertHandler,
  webhook: webhookHandler,
  delivery: deliveryHandler,
  audit: { ...auditTrailHandler, ref: (projectId: string) => auditTrailHandler.ref(projectId) },
} as unknown as Record<FeedAggregate, FeedHandler>

const isFeedAggregate = (kind: string): kind is FeedAggregate => (feedAggregates as readonly string[]).includes(kind)

/** How long a page's reader is kept for the page after it (a reader walking the feed asks at once). */
const keptReaderMs = 30_000

/** Readers kept at once by one process, and by one project: the oldest is closed past either. */
const maxKeptReaders = 500
const maxKeptReadersPerProject = 16

export class EventFeed {
  readonly #deps: Deps
  /**
   * Readers left where their last page ended, by project, filter and the `next_cursor` they
   * answered: the page after reuses its scan (and its filtered consumer, once there), so the next
   * page of a reader walking the feed costs one pull.
   */
  readonly #kept = new Map<string, { reader: FeedReader; projectId: string; timer: NodeJS.Timeout }>()

  readonly #untilProjected: UntilProjected

  /** `untilProjected`: waits (bounded) until the read models hold a sequence, for the events' leaf indexes. */
  constructor(deps: Deps, untilProjected: UntilProjected) {
    this.#deps = deps
    this.#untilProjected = untilProjected
  }

  /**
   * Opens a reader of the project's feed from `start`. A cursor that is not this project's is
   * UnknownCursor; one from before what retention removed of the project's history is
   * CursorExpired (never a silent jump over the removed events).
   */
  async open(projectId: string, start: FeedStart, filter: FeedFilter): Promise<FeedReader> {
    const deps = this.#deps
    const position = start !== null && 'after' in start ? await this.#resumable(projectId, start.after) : logStart
    // The log's end before the scan starts: a page that reads to the end has seen every message
    // of the project stored up to it, so its cursor may move past it (other projects' messages).
    const end = await deps.store.lastSequence()
    if (position.seq > end) throw new UnknownCursor()
    const stream = eventsStreamName(deps.config.namespace)
    const subjects = subjectFilter(deps.config.namespace, projectId, filter)
    const scanStart =
      start !== null && 'fromTime' in start
        ? { time: new Date(Date.parse(start.fromTime) - clockMarginMs).toISOString() }
        : { seq: position.index === 'all' ? position.seq + 1 : position.seq }
    // One job's messages are too few to find by skimming: its filtered consumer is asked for at
    // once, and its last message is its own subject's or its progress reports'.
    const ns = deps.config.namespace
    const scan = await NarrowingScan.open(
      deps.nats.nc,
      stream,
      subjects,
      scanStart,
      filter.jobId === null
        ? {}
        : { narrowAfter: 0, lastOf: [eventSubject(ns, projectId, 'job', filter.jobId), eventSubject(ns, projectId, 'progress', filter.jobId)] },
    )
    const fromTime = start !== null && 'fromTime' in start ? start.fromTime : null
    return new FeedReader(deps, projectId, filter, scan, position, end, fromTime, this.#untilProjected)
  }

  /**
   * One page from `start`: through the reader the previous page left at this cursor when this
   * process still keeps it, else a new one; the reader is then kept for the page after.
   */
  async page(
    projectId: string,
    start: FeedStart,
    filter: FeedFilter,
    limit: number,
    waitMs: number,
    signal?: AbortSignal,
    until?: FeedPosition,
  ): Promise<FeedPage> {
    let reader: FeedReader | null = null
    if (start !== null && 'after' in start) {
      // The cursor is checked on every page: retention may have overtaken it since.
      await this.#resumable(projectId, start.after)
      reader = this.#take(keyOf(projectId, filter, start.after))
      if (reader !== null) reader.moveEnd(await this.#deps.store.lastSequence())
    }
    reader ??= await this.open(projectId, start, filter)
    let page: FeedPage
    try {
      page = await reader.page(limit, waitMs, signal, until)
    } catch (err) {
      reader.close()
      throw err
    }
    // A page bounded by `until` may stop inside a message it holds no more of: not kept.
    if (reader.isReusable && until === undefined) this.#keep(projectId, keyOf(projectId, filter, page.nextCursor), reader)
    else reader.close()
    return page
  }

  /**
   * How far the feed runs after `after` for a filter: the messages on its subjects (an upper bound
   * of the events when types, queue or job type narrow it further; NATS 2.9's count, which is
   * some percent off when the position is inside one of the stream's blocks) and when the log stored
   * the first of them (null: none).
   */
  async backlog(projectId: string, filter: FeedFilter, after: FeedPosition): Promise<{ messages: number; oldestStoredAtMs: number | null }> {
    const deps = this.#deps
    const stream = eventsStreamName(deps.config.namespace)
    const subjects = subjectFilter(deps.config.namespace, projectId, filter)
    const from = after.index === 'all' ? after.seq + 1 : after.seq
    const first = await firstStoredOn(deps.nats.nc, stream, subjects, from)
    if (first === null) return { messages: 0, oldestStoredAtMs: null }
    const scan = await LogScan.open(deps.nats.nc, stream, subjects, { seq: from })
    scan.close()
    return { messages: Math.max(1, scan.pendingAtOpen), oldestStoredAtMs: first.storedAtMs }
  }

  /** The position a reader resumes from to read from the first event at or after `fromTime` (the log's end when none is). */
  async positionBefore(projectId: string, fromTime: string): Promise<FeedPosition> {
    const filter: FeedFilter = { types: null, queue: null, jobType: null, jobId: null, aggregates: new Set(feedAggregates) }
    const reader = await this.open(projectId, { fromTime }, filter)
    try {
      const page = await reader.page(1)
      const first = page.events[0]
      // Every event of a message has its decision's time, so the first one found starts its message.
      if (first !== undefined) return { seq: decodeFeedCursor(projectId, first.cursor)!.seq - 1, index: 'all' }
      return decodeFeedCursor(projectId, page.nextCursor)!
    } finally {
      reader.close()
    }
  }

  /** The position after everything the log holds now. */
  async endPosition(): Promise<FeedPosition> {
    return { seq: await this.#deps.store.lastSequence(), index: 'all' }
  }

  /** The position of a cursor this project may resume from: UnknownCursor or CursorExpired otherwise. */
  resumablePosition(projectId: string, cursor: string): Promise<FeedPosition> {
    return this.#resumable(projectId, cursor)
  }

  /** Closes every kept reader (the process is stopping). */
  close(): void {
    for (const key of [...this.#kept.keys()]) this.#take(key)?.close()
  }

  /** The position of a cursor the project may resume from, or the refusal. */
  async #resumable(projectId: string, cursor: string): Promise<FeedPosition> {
    const decoded = decodeFeedCursor(projectId, cursor)
    if (decoded === null) throw new UnknownCursor()
    const project = (await projectHandler.load(this.#deps.store, projectHandler.ref(projectId))).state as Project | null
    const expiredThrough = project?.history_expired_through ?? 0
    if (decoded.seq < expiredThrough) throw new CursorExpired(encodeFeedCursor(projectId, { seq: expiredThrough, index: 'all' }))
    return decoded
  }

  #take(key: string): FeedReader | null {
    const kept = this.#kept.get(key)
    if (kept === undefined) return null
    this.#kept.delete(key)
    clearTimeout(kept.timer)
    return kept.reader
  }

  #keep(projectId: string, key: string, reader: FeedReader): void {
    this.#take(key)?.close()
    const timer = setTimeout(() => this.#take(key)?.close(), keptReaderMs)
    timer.unref()
    this.#kept.set(key, { reader, projectId, timer })
    const ofProject = [...this.#kept].filter(([, k]) => k.projectId === projectId)
    if (ofProject.length > maxKeptReadersPerProject) this.#take(ofProject[0]![0])?.close()
    if (this.#kept.size > maxKeptReaders) this.#take(this.#kept.keys().next().value!)?.close()
  }
}

/** A kept reader's key: the project, what its filter keeps, and where it stands. */
function keyOf(projectId: string, filter: FeedFilter, cursor: string): string {
  const types = filter.types === null ? '*' : [...filter.types].sort().join(',')
  return [projectId, types, filter.queue ?? '', filter.jobType ?? '', filter.jobId ?? '', [...filter.aggregates].sort().join(','), cursor].join('\n')
}

/** The narrowest subject filter the log can apply for a filter: one job, one kind of aggregate, or the project. */
function subjectFilter(ns: string, projectId: string, filter: FeedFilter): string {
  if (filter.jobId !== null) return jobSubjectsFilter(ns, projectId, filter.jobId)
  const only = singleAggregateOf(filter.types)
  if (only !== null) return projectKindFilter(ns, projectId, only)
  if (filter.aggregates.size === 1) return projectKindFilter(ns, projectId, [...filter.aggregates][0]!)
  return projectSubjectsFilter(ns, projectId)
}

/** One reader of a project's feed: pages from where it stands, or everything as it is appended. */
export class FeedReader {
  readonly #deps: Deps
  readonly #projectId: string
  readonly #filter: FeedFilter
  readonly #scan: NarrowingScan
  /** After the last event handed out, or past the last message looked at. */
  #position: FeedPosition
  /** The log's last sequence when the current page began. */
  #endAtOpen: number
  /** Messages read from the log and not yet looked at (a page stopped at its limit inside them). */
  #held: ScannedMessage[] = []
  /** Queue and job type of the jobs whose progress reports were looked at (a report's state is not its job's). */
  readonly #jobWork = new Map<string, WorkAttributes | null>()
  /** The page's last position, when it reads a range again (a consumer's redelivery): nothing after it is taken. */
  #until: FeedPosition | null = null
  /** Until the first event at or after it is found (`from_time`, an ISO instant), earlier events are passed over. */
  #fromTime: string | null
  readonly #untilProjected: UntilProjected

  constructor(
    deps: Deps,
    projectId: string,
    filter: FeedFilter,
    scan: NarrowingScan,
    position: FeedPosition,
    endAtOpen: number,
    fromTime: string | null,
    untilProjected: UntilProjected,
  ) {
    this.#untilProjected = untilProjected
    this.#deps = deps
    this.#projectId = projectId
    this.#filter = filter
    this.#scan = scan
    this.#position = position
    this.#endAtOpen = endAtOpen
    this.#fromTime = fromTime
  }

  /** Whether a later page may go on with this reader: no pull of its scan can still deliver. */
  get isReusable(): boolean {
    return this.#scan.isSettled
  }

  /** A kept reader's next page: the log's last sequence now, read before the page reads on. */
  moveEnd(end: number): void {
    this.#endAtOpen = end
    this.#scan.askAgain()
  }

  /** Whether the last read reached the log's end as the server knew it (false: more may follow at once). */
  get reachedEnd(): boolean {
    return this.#held.length === 0 && this.#scan.atEnd
  }

  /** The cursor of where the reader stands. */
  get cursor(): string {
    return encodeFeedCursor(this.#projectId, this.#position)
  }

  /**
   * Up to `limit` events from where the reader stands. When none is stored yet and `waitMs` > 0,
   * waits for the first up to that long (a long poll), then answers what arrived with it.
   */
  async page(limit: number, waitMs = 0, signal?: AbortSignal, until?: FeedPosition): Promise<FeedPage> {
    this.#until = until ?? null
    const events: FeedEvent[] = []
    let examined = 0
    for (;;) {
      const messages = await this.#next(readBatch)
      if (messages.length === 0) break
      examined += messages.length
      if (await this.#take(messages, events, limit)) return this.#answer(events, true)
      if (examined >= maxExaminedPerPage) return this.#answer(events, true)
    }
    // Everything stored when the scan began has been looked at, unless the log did not say so in time.
    this.#passEnd()
    if (!this.#scan.atEnd) return this.#answer(events, true)
    if (events.length > 0 || waitMs <= 0) return this.#answer(events, false)
    const deadline = Date.now() + waitMs
    for (let left = waitMs; left > 0 && signal?.aborted !== true; left = deadline - Date.now()) {
      const arrived = await this.#scan.wait(readBatch, left, signal)
      if (arrived.length === 0) continue
      const full = await this.#take(arrived, events, limit)
      if (events.length > 0) return this.#answer(events, full || !this.#scan.atEnd)
    }
    return this.#answer(events, false)
  }

  /**
   * The events stored from where the reader stands to the log's end now, a batch at a time
   * (`live`: then every event as it is appended, until `signal` aborts; an empty batch after
   * `keepAliveMs` without one, so the caller can say where it stands).
   */
  async *batches(options: { live: boolean; keepAliveMs: number; signal: AbortSignal }): AsyncGenerator<FeedEvent[]> {
    const { live, keepAliveMs, signal } = options
    for (;;) {
      if (signal.aborted) return
      const messages = await this.#next(readBatch)
      if (messages.length === 0) break
      const events: FeedEvent[] = []
      await this.#take(messages, events, Number.POSITIVE_INFINITY)
      await this.#withLeafIndexes(events)
      if (events.length > 0) yield events
    }
    this.#passEnd()
    if (!live) return
    while (!signal.aborted) {
      const arrived = await this.#scan.wait(readBatch, keepAliveMs, signal)
      if (signal.aborted) return
      const events: FeedEvent[] = []
      await this.#take(arrived, events, Number.POSITIVE_INFINITY)
      await this.#withLeafIndexes(events)
      yield events
    }
  }

  close(): void {
    this.#scan.close()
  }

  async #next(max: number): Promise<ScannedMessage[]> {
    if (this.#held.length > 0) return this.#held.splice(0, max)
    return this.#scan.read(max)
  }

  /** After reading to the end: the position moves past every message stored when the reader opened. */
  #passEnd(): void {
    if (this.#held.length === 0 && this.#scan.atEnd && this.#endAtOpen > this.#position.seq) {
      this.#position = { seq: this.#endAtOpen, index: 'all' }
    }
  }

  async #answer(events: FeedEvent[], hasMore: boolean): Promise<FeedPage> {
    const nextCursor = this.cursor
    await this.#withLeafIndexes(events)
    return { events, nextCursor, hasMore }
  }

  #withLeafIndexes(events: readonly FeedEvent[]): Promise<void> {
    return withLeafIndexes(this.#deps, this.#untilProjected, this.#projectId, events)
  }

  /**
   * Looks at `messages` in order, adding the events the filter keeps to `events` until it holds
   * `limit`; true when it stopped there (the rest of the messages are held for the next read).
   */
  async #take(messages: ScannedMessage[], events: FeedEvent[], limit: number): Promise<boolean> {
    for (let m = 0; m < messages.length; m++) {
      const message = messages[m]!
      // Past the page's bound: what follows is not this page's (the reader is not kept).
      if (this.#until !== null && message.seq > this.#until.seq) return true
      const full = await this.#takeMessage(message, events, limit)
      if (full) {
        // Stopped inside or at the end of this message: the next read resumes after the position.
        const rest = messages.slice(m + (this.#position.index === 'all' ? 1 : 0))
        this.#held = rest.concat(this.#held)
        return true
      }
    }
    return false
  }

  /** Adds the message's kept events after the reader's position; true when `events` reached `limit`. */
  async #takeMessage(scanned: ScannedMessage, events: FeedEvent[], limit: number): Promise<boolean> {
    const filter = this.#filter
    const typesOfMessage = scanned.eventTypes === '' ? null : scanned.eventTypes.split(',')
    // Decoded only if a type of it is asked for (a message without the header is decoded to see).
    const mayKeep = filter.types === null || typesOfMessage === null || typesOfMessage.some((t) => filter.types!.has(t))
    if (!mayKeep) {
      this.#position = { seq: scanned.seq, index: 'all' }
      return false
    }
    const message = decodeEventMessage<StoredEvent<{ type: string; data: unknown }>, unknown>(scanned.data, scanned.seq)
    const aggregate = message.aggregate
    const count = message.events.length
    if (!isFeedAggregate(aggregate) || !filter.aggregates.has(aggregate) || message.project_id !== this.#projectId) {
      this.#position = { seq: scanned.seq, index: 'all' }
      return false
    }
    if (aggregate === 'job' && message.state !== null) this.#jobWork.set(message.aggregate_id, workOf('job', message.state))
    let states: unknown[] | null = null
    for (let i = 0; i < count; i++) {
      const position: FeedPosition = { seq: scanned.seq, index: i === count - 1 ? 'all' : i }
      // Events up to the position were handed out before (a cursor inside this message).
      if (!isAfter(position, this.#position)) continue
      if (this.#until !== null && isAfter(position, this.#until)) return true
      this.#position = position
      const event = message.events[i]!
      if (this.#fromTime !== null) {
        if (event.time < this.#fromTime) continue
        this.#fromTime = null
      }
      if (filter.types !== null && !filter.types.has(event.type)) continue
      if (count > 1 && states === null) states = await this.#statesOf(scanned, message)
      const state = states === null ? message.state : states[i]
      if (filtersWork(filter) && !keepsWork(filter, await this.#workOf(aggregate, message.aggregate_id, state))) continue
      const handedOut: FeedEvent = {
        id: event.id,
        cursor: encodeFeedCursor(this.#projectId, position),
        type: event.type,
        occurred_at: event.time,
        project_id: message.project_id,
        aggregate,
        aggregate_id: message.aggregate_id,
        data: readableByTenant(aggregate, event.data),
        state: readableByTenant(aggregate, state),
        leaf_index: null,
      }
      placeOf.set(handedOut, { seq: scanned.seq, index: i })
      events.push(handedOut)
      if (events.length >= limit) return true
    }
    this.#position = { seq: scanned.seq, index: 'all' }
    return false
  }

  /** A progress report's work is its job's; the others' is their own state's. */
  async #workOf(aggregate: FeedAggregate, aggregateId: string, state: unknown): Promise<WorkAttributes | null> {
    if (aggregate !== 'progress') return workOf(aggregate, state)
    const known = this.#jobWork.get(aggregateId)
    if (known !== undefined) return known
    const job = (await jobHandler.load(this.#deps.store, jobHandler.ref(this.#projectId, aggregateId))).state as Job | null
    const work = workOf('job', job)
    this.#jobWork.set(aggregateId, work)
    return work
  }

  /**
   * The aggregate's state after each event of a message of several (a project's creation with its
   * first key, an accepted invitation): the state before it (its subject's previous message),
   * folded one event at a time, in the form a message stores.
   */
  async #statesOf(scanned: ScannedMessage, message: EventMessage<StoredEvent<{ type: string; data: unknown }>, unknown>): Promise<unknown[]> {
    const kind = message.aggregate as FeedAggregate
    const handler = handlers[kind]
    const decider = handler.decider
    let state: unknown = null
    if (scanned.previousSeq !== null && scanned.previousSeq > 0) {
      const previous = await handler.at(this.#deps.store, handler.ref(message.project_id, message.aggregate_id), scanned.previousSeq)
      state = previous?.message.state ?? null
    }
    const states: unknown[] = []
    for (let i = 0; i < message.events.length; i++) {
      if (i === message.events.length - 1) {
        states.push(message.state)
        break
      }
      state = decider.evolve(state as never, message.events[i] as never)
      states.push(fromStoredState(kind, toStoredState(kind, state), scanned.seq, message.events.slice(0, i + 1)))
    }
    return states
  }
}
