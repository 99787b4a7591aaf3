import type { CommandMeta, Decider } from './decider.ts'
import type { Job, JobEvent } from './job.ts'

/**
 * A job's progress reports, an aggregate of their own (kind `progress`, keyed by the job's id):
 * progress is liveness more than history, and a report appends a small message on the job's
 * progress subject instead of the job's whole state on its own subject, so claims and acks load
 * the job as before and never read past reports. The message carries the `job_progressed` event
 * and no state (streams/stored-forms.ts); its state is the last report.
 */

/** The last report: which attempt it belongs to, and the value. */
export interface JobProgress {
  attempt: number
  progress: number
}

export type JobProgressEvent = Extract<JobEvent, { type: 'job_progressed' }>

export type JobProgressCommand = {
  type: 'report_progress'
  /** `attempt` and `job_progress` are the job's, as the caller loaded it (and checked it is the worker's). */
  data: { worker_id: string; attempt: number; job_progress: number | null; progress: number }
  meta: CommandMeta
}

/**
 * The progress a job shows: the last report of its current attempt, or else the job's own
 * `progress` (a claim or a retry resets it; only logs written before reports had their own
 * subject set it). A retry keeps the attempt number until the next claim, hence `started_at`.
 */
export function progressOf(job: Pick<Job, 'attempt' | 'started_at' | 'progress'>, last: JobProgress | null): number | null {
  return last !== null && last.attempt === job.attempt && job.started_at !== null ? last.progress : job.progress
}

function decide(command: JobProgressCommand, state: JobProgress | null): JobProgressEvent[] {
  const d = command.data
  // The job is processing (the caller checked), so its attempt's last report is what it shows.
  const current = state !== null && state.attempt === d.attempt ? state.progress : d.job_progress
  if (current === d.progress) return []
  return [{ type: 'job_progressed', data: { worker_id: d.worker_id, attempt: d.attempt, progress: d.progress, reported_at: command.meta.now } }]
}

function evolve(_state: JobProgress | null, event: JobProgressEvent): JobProgress {
  return { attempt: event.data.attempt ?? 0, progress: event.data.progress }
}

export const jobProgressDecider: Decider<JobProgressCommand, JobProgressEvent, JobProgress | null> = {
  initialState: null,
  decide,
  evolve,
}

/** The last report among a message's events, or null: what a progress message's state is. */
export function lastReportOf(events: readonly { type: string; data: unknown }[]): JobProgress | null {
  for (let i = events.length - 1; i >= 0; i--) {
    if (events[i]!.type === 'job_progressed') return evolve(null, events[i] as JobProgressEvent)
  }
  return null
}
