import { isAfter, type FeedPosition } from './event-feed.ts'
import { errorOf, jobDecider, payloadInEvents, resultOf, upgradeJob, type Job, type JobAggregate, type JobError, type JobEvent } from './job.ts'

/**
 * A job as it was at a moment of its history (`GET /jobsvc/v1/jobs/{id}?as_of=`): folded from its
 * events up to that moment by the aggregate's own `evolve`, read the way a message stores its state
 * (`upgradeJob`), so that a moment after the job's last event gives what a read of its last
 * message gives. Pure; the reading is services/use-cases/jobs/job-as-of.ts.
 */

/**
 * A moment of a job's history: through the event a cursor of the event feed names (a position in
 * the log, docs/event-log.md "Cursors"), or through an instant (the events whose time is at or
 * before it).
 */
export type JobMoment = { position: FeedPosition } | { time: string }

/**
 * Whether event `index` of a message of `count` events stored at `seq`, decided at `time`, is at or
 * before `moment`. A feed cursor names an event inside a message by its index and the message's
 * last event as the whole message (`'all'`), so positions compare as the feed's do.
 */
export function isThrough(moment: JobMoment, seq: number, index: number, count: number, time: string): boolean {
  if ('time' in moment) return Date.parse(time) <= Date.parse(moment.time)
  return !isAfter({ seq, index: index === count - 1 ? 'all' : index }, moment.position)
}

/** A message of the job's own subject as the fold reads it: its sequence and its events. */
export interface JobMessage {
  seq: number
  events: ReadonlyArray<JobEvent & { time: string }>
}

/** The job as of a moment, with what its detail resolves from the messages that hold it. */
export interface JobAsOf {
  job: Job
  /** The sequence of the last message an event was folded from. */
  seq: number
  /** From its `job_created`, or the last `job_payload_replaced` folded. */
  payload: Record<string, unknown>
  /** From the message `error_seq` names, as of the moment. */
  error: JobError | null
  /** What the successful attempt's handler returned, when the job had succeeded by then. */
  result: unknown
}

/**
 * Folds the job's messages, oldest first (the first holding its `job_created`), through `moment`:
 * every event up to the first one after it. Null when the first event is after it already (the job
 * did not exist yet). Errors are read from the events folded, so a message whose later events are
 * after the moment does not lend the state an error it had not recorded by then.
 */
export function foldJobAsOf(messages: readonly JobMessage[], moment: JobMoment): JobAsOf | null {
  let job: JobAggregate = null
  let seq = 0
  const folded = new Map<number, JobMessage['events']>()
  for (const message of messages) {
    const count = message.events.length
    let taken = 0
    while (taken < count && isThrough(moment, message.seq, taken, count, message.events[taken]!.time)) {
      job = jobDecider.evolve(job, message.events[taken]!)
      taken++
    }
    if (taken === 0) break
    const events = message.events.slice(0, taken)
    // As a load of this message reads its state: an error recorded here is referred to by its sequence.
    job = upgradeJob(job!, message.seq, events)
    folded.set(message.seq, events)
    seq = message.seq
    if (taken < count) break
  }
  if (job === null) return null
  // The payload as of the moment: where the folded state's `payload_seq` points, or else the job_created.
  const payload = payloadInEvents(job.payload_seq === undefined ? messages[0]!.events.slice(0, 1) : (folded.get(job.payload_seq) ?? [])) ?? {}
  const error = job.error_seq === null ? null : errorOf(folded.get(job.error_seq) ?? [])
  return { job, seq, payload, error, result: job.state === 'succeeded' ? resultOfLastSuccess(folded) : null }
}

/** The result the last folded `job_succeeded` recorded. */
function resultOfLastSuccess(folded: ReadonlyMap<number, JobMessage['events']>): unknown {
  const messages = [...folded.values()]
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.some((e) => e.type === 'job_succeeded')) return resultOf(messages[i]!)
  }
  return null
}
