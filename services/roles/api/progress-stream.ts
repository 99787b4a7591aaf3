import type { FastifyReply, FastifyRequest } from 'fastify'
import { isTerminal, type Job, type JobState } from '../../../domain/job.ts'
import { progressOf, type JobProgress } from '../../../domain/job-progress.ts'
import { decodeEventMessage } from '../../../streams/event-store.ts'
import { jobSubjectsFilter } from '../../../streams/names.ts'
import type { JobService } from '../../use-cases/jobs/job-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/** Spec, Job progress stream: at most 120 s, a check about once a second. */
export const streamLifetimeMs = 120_000
const tickMs = 1_000

interface Snapshot {
  state: JobState
  progress: number | null
  attempt: number
  max_attempts: number
}

const snapshotOf = (job: Job, report: JobProgress | null): Snapshot => ({
  state: job.state,
  progress: progressOf(job, report),
  attempt: job.attempt,
  max_attempts: job.max_attempts,
})

/**
 * `GET /jobsvc/v1/jobs/{id}/events`. The current snapshot goes out at once (404 before that if
 * the job does not exist); then a subscription to the job's subjects on the log (its own and its
 * progress reports') delivers every change as it is appended, and a frame is written when state or
 * progress differs from the last one sent. A once-a-second tick re-reads the log as a safety net (a missed core-NATS message)
 * and enforces the 120-second limit on the injected clock.
 *
 * `release` frees the stream's slot of its project (ProjectSlots); it is called exactly once,
 * whichever way the stream ends: not found, closed on a terminal state, after 120 s, on a
 * disconnect, a failed re-read or shutdown.
 */
export async function streamJobProgress(
  deps: Deps,
  jobs: JobService,
  stopping: AbortSignal,
  request: FastifyRequest,
  reply: FastifyReply,
  projectId: string,
  jobId: string,
  release: () => void,
): Promise<void> {
  let { job, report } = await jobs.progressSnapshot(projectId, jobId).catch((err: unknown) => {
    release()
    throw err
  })
  const startedAt = deps.now().getTime()
  reply.hijack()
  const res = reply.raw
  res.writeHead(200, {
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
    'X-Request-Id': request.id,
  })
  let last: Snapshot | null = null
  let closed = false
  const send = (snapshot: Snapshot) => {
    if (closed) return
    if (last !== null && last.state === snapshot.state && last.progress === snapshot.progress) return
    last = snapshot
    res.write(`event: snapshot\ndata: ${JSON.stringify(snapshot)}\n\n`)
    if (isTerminal(snapshot.state)) close()
  }
  const subscription = deps.nats.nc.subscribe(jobSubjectsFilter(deps.config.namespace, projectId, jobId), {
    callback: (err, msg) => {
      if (err) return
      try {
        const message = decodeEventMessage<{ type: string; data: unknown }, unknown>(msg.data, null)
        if (message.state === null) return
        if (message.aggregate === 'progress') report = message.state as JobProgress
        else job = message.state as Job
        send(snapshotOf(job, report))
      } catch (e) {
        deps.log.warn({ err: e, job_id: jobId }, 'progress stream: undecodable event')
      }
    },
  })
  const timer = setInterval(() => {
    if (deps.now().getTime() - startedAt >= streamLifetimeMs) return close()
    jobs.progressSnapshot(projectId, jobId).then(
      (current) => {
        ;({ job, report } = current)
        send(snapshotOf(job, report))
      },
      () => close(),
    )
  }, tickMs)
  function close() {
    if (closed) return
    closed = true
    clearInterval(timer)
    stopping.removeEventListener('abort', close)
    subscription.unsubscribe()
    res.end()
    release()
  }
  res.on('close', close)
  // A stopping process ends its streams; clients reconnect elsewhere and get the snapshot first.
  stopping.addEventListener('abort', close, { once: true })
  // A client gone (or a process stopping) before the listeners above were attached sends no
  // further event: without this its stream would hold its slot until the 120-s limit.
  if (res.destroyed || stopping.aborted) return close()
  send(snapshotOf(job, report))
}
