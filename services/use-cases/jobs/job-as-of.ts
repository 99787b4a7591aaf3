import { decodeTime } from 'ulid'
import { JobNotFound } from '../../../domain/errors.ts'
import { foldJobAsOf, isThrough, type JobMessage, type JobMoment } from '../../../domain/job-as-of.ts'
import { toJobView, type JobEvent, type JobView } from '../../../domain/job.ts'
import { progressOf } from '../../../domain/job-progress.ts'
import { jobHandler, progressHandler, projectHandler } from '../../../streams/aggregates.ts'
import type { EventRecord, EventStore } from '../../../streams/event-store.ts'
import { projectSubjectsFilter } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { isJobId } from './job-service.ts'

/**
 * The history a moment needs was removed by retention (410 `history_expired`): the job's messages
 * are gone, or its first ones are (a job retried as its retention pass ran keeps only the later).
 */
export class HistoryExpired extends Error {
  constructor(jobId: string) {
    super(`the history of job ${jobId} up to that moment was removed by retention`)
    this.name = 'HistoryExpired'
  }
}

/** A job as it was at a moment, as the API shows it, and how far the log goes past it. */
export interface JobAsOfRead {
  job: JobView
  /** The stream sequence the read stopped at: the last message of the job (or its progress reports) through the moment. */
  seq: number
  /** The job's latest sequence now, over both of its subjects (what `X-Event-Seq` of a plain read says). */
  latestSeq: number
}

/**
 * The job as of `moment` (docs/event-log.md, "A job as of a moment"): its own messages read in
 * order (one direct get each, up to the first one past the moment) and folded by the aggregate
 * (domain/job-as-of.ts); its payload, last error and result resolved as a plain read resolves them,
 * from the messages folded; its progress from its last report through the moment, found by
 * bisection of its progress subject, so a job with thousands of reports costs some twenty reads.
 *
 * Before its `job_created`: JobNotFound, as a job of no one. A job the log holds nothing of was
 * either never created or removed by retention: HistoryExpired when retention has removed
 * messages of the project and the job's id (a ULID, which carries the time it was made) dates from
 * the moment or before, JobNotFound otherwise.
 */
export async function readJobAsOf(deps: Pick<Deps, 'store' | 'config'>, projectId: string, jobId: string, moment: JobMoment): Promise<JobAsOfRead> {
  if (!isJobId(jobId)) throw new JobNotFound(jobId)
  const store = deps.store
  const ref = jobHandler.ref(projectId, jobId)
  const progressRef = progressHandler.ref(projectId, jobId)
  const [first, last, lastReport] = await Promise.all([
    jobHandler.next(store, ref, 1),
    jobHandler.last(store, ref),
    progressHandler.last(store, progressRef),
  ])
  if (first === null || last === null) {
    // Nothing of it: never created, or removed by retention (which removes a job's messages together).
    if (await mayHaveBeenRemoved(deps, projectId, jobId, moment)) throw new HistoryExpired(jobId)
    throw new JobNotFound(jobId)
  }
  if (first.message.events[0]?.type !== 'job_created') throw new HistoryExpired(jobId)
  const messages: JobMessage[] = []
  /** The first message of the job past the moment, if the log holds one. */
  let past: number | null = null
  for (let record: EventRecord<JobEvent, unknown> | null = first; record !== null;) {
    const events = record.message.events
    if (!isThrough(moment, record.seq, 0, events.length, events[0]!.time)) {
      past = record.seq
      break
    }
    messages.push({ seq: record.seq, events })
    if (record.seq === last.seq) break
    record = await jobHandler.next(store, ref, record.seq + 1)
  }
  const folded = foldJobAsOf(messages, moment)
  if (folded === null) throw new JobNotFound(jobId)
  // Reports are kept on the progress subject, interleaved with the job's own messages: the last one
  // through the moment, and before the first job message past it.
  const bound = Math.min(lastReport?.seq ?? 0, past === null ? Number.MAX_SAFE_INTEGER : past - 1)
  const report = await lastReportThrough(store, progressRef, lastReport, messages[0]!.seq, bound, moment)
  const facts = {
    payload: folded.payload,
    error: folded.error,
    progress: progressOf(folded.job, report?.message.state ?? null),
    result: folded.result,
  }
  return {
    job: toJobView(folded.job, facts),
    seq: Math.max(folded.seq, report?.seq ?? 0),
    latestSeq: Math.max(last.seq, lastReport?.seq ?? 0),
  }
}

type ProgressRecord = NonNullable<Awaited<ReturnType<typeof progressHandler.last>>>

/**
 * The last report with a sequence in [from, to] that is through the moment, by bisection: the
 * reports through it come first on the subject (positions and, as decided, times grow with the
 * sequence), so each probe (the first report at or after a sequence) halves what is left.
 */
async function lastReportThrough(
  store: EventStore,
  ref: ReturnType<typeof progressHandler.ref>,
  latest: ProgressRecord | null,
  from: number,
  to: number,
  moment: JobMoment,
): Promise<ProgressRecord | null> {
  const keeps = (r: ProgressRecord) => r.seq >= from && r.seq <= to && isThrough(moment, r.seq, 0, 1, r.message.events[0]!.time)
  if (latest === null) return null
  if (keeps(latest)) return latest
  let best: ProgressRecord | null = null
  let [lo, hi] = [from, to]
  while (lo <= hi) {
    const mid = lo + Math.floor((hi - lo) / 2)
    const probe = await progressHandler.next(store, ref, mid)
    if (probe !== null && keeps(probe)) {
      best = probe
      lo = probe.seq + 1
    } else hi = mid - 1
  }
  return best
}

/**
 * Whether a job the log holds nothing of may have existed at `moment` and been removed since:
 * retention has removed messages of the project, and the id was made at or before the moment (the
 * time of a position is that of the project's first message stored at it or after).
 */
async function mayHaveBeenRemoved(deps: Pick<Deps, 'store' | 'config'>, projectId: string, jobId: string, moment: JobMoment): Promise<boolean> {
  const project = (await projectHandler.load(deps.store, projectHandler.ref(projectId))).state
  if (project === null || project.history_expired_through === 0) return false
  let momentTime: number
  if ('time' in moment) momentTime = Date.parse(moment.time)
  else {
    const at = await deps.store.nextOn(projectSubjectsFilter(deps.config.namespace, projectId), Math.max(1, moment.position.seq))
    momentTime = at === null ? Number.POSITIVE_INFINITY : Date.parse(at.message.events[0]!.time)
  }
  return decodeTime(jobId.slice('job_'.length)) <= momentTime
}
