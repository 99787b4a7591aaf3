import type { Sql } from '../../../projections/database.ts'
import { jobList } from '../../../projections/job-list.ts'

/**
 * The workers a project has (issue 26: `GET /jobsvc/v1/workers`), as the API sees them: each
 * registration, poll, heartbeat and ack says a worker is alive. None of these is an event on the
 * log (a poll every few seconds per worker would flood it), so this is the API's own state, like
 * the request counts: each process gathers what it saw in memory and writes it every second to
 * `worker_presence` (one row per worker) and `worker_outcomes` (acks per worker and minute), which
 * every process reads back. What the list shows is therefore at most a second behind.
 */

/** How often a process writes what it saw. */
const flushIntervalMs = 1_000

/**
 * A worker silent this long is shown `gone`: a live one polls at least every 30 s (the longest
 * wait) or heartbeats its running jobs every 10 s at least, so three missed polls is a lost worker.
 */
export const workerGoneAfterMs = 90_000

/** The list shows the workers seen within the last hour; older rows are removed once a day old. */
const shownForMs = 60 * 60_000
const keptForMs = 24 * 60 * 60_000

/** How many of a project's workers the list shows (the most recently seen first). */
export const maxWorkersListed = 500

interface Seen {
  projectId: string
  workerId: string
  hostname: string | null
  sdkVersion: string | null
  queues: string[] | null
  jobTypes: string[] | null
  registeredAt: string | null
  lastPollAt: string | null
  lastSeenAt: string
}

/** What a registration says of a worker. */
export interface Registration {
  hostname: string | null
  sdkVersion: string | null
  queues: string[]
  jobTypes: string[]
}

/** A worker as the list shows it, before its running jobs are added. */
export interface WorkerRow {
  worker_id: string
  hostname: string | null
  sdk_version: string | null
  queues: string[]
  job_types: string[]
  registered_at: string | null
  last_poll_at: string | null
  last_seen_at: string
  status: 'active' | 'gone'
  finished_last_hour: { succeeded: number; failed: number }
}

const later = (a: string | null, b: string | null) => (a === null ? b : b === null ? a : a > b ? a : b)

export class WorkerPresence {
  readonly #sql: Sql
  readonly #seen = new Map<string, Seen>()
  /** Acks per project, worker and minute not yet written. */
  readonly #outcomes = new Map<string, { projectId: string; workerId: string; minute: number; succeeded: number; failed: number }>()
  #timer: NodeJS.Timeout | undefined
  #flushing: Promise<void> = Promise.resolve()
  #lastPrunedAt = 0

  constructor(sql: Sql) {
    this.#sql = sql
    this.#timer = setInterval(() => void this.flush(), flushIntervalMs)
    this.#timer.unref()
  }

  registered(projectId: string, workerId: string, registration: Registration, now: Date): void {
    const at = now.toISOString()
    this.#note(projectId, workerId, at, {
      hostname: registration.hostname,
      sdkVersion: registration.sdkVersion,
      queues: registration.queues,
      jobTypes: registration.jobTypes,
      registeredAt: at,
    })
  }

  /** A poll: the worker is alive and asks for these queues (and job types: null, any). */
  polled(projectId: string, workerId: string, queues: string[], jobTypes: string[] | null, now: Date): void {
    const at = now.toISOString()
    this.#note(projectId, workerId, at, { queues, ...(jobTypes === null ? {} : { jobTypes }), lastPollAt: at })
  }

  /** A heartbeat: alive, running a job. */
  beat(projectId: string, workerId: string, now: Date): void {
    this.#note(projectId, workerId, now.toISOString(), {})
  }

  /** An ack the service applied: counted in the worker's last hour. */
  acked(projectId: string, workerId: string, status: 'succeeded' | 'failed', now: Date): void {
    this.#note(projectId, workerId, now.toISOString(), {})
    const minute = Math.floor(now.getTime() / 60_000)
    const key = `${projectId}\n${workerId}\n${minute}`
    const counts = this.#outcomes.get(key) ?? { projectId, workerId, minute, succeeded: 0, failed: 0 }
    counts[status]++
    this.#outcomes.set(key, counts)
  }

  /** Writes what this process saw since the last flush. */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#flushOnce()).catch(() => undefined)
    return this.#flushing
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    await this.flush()
  }

  /** The project's workers seen in the last hour, most recently seen first, at most `limit` (one: `workerId`). */
  async list(projectId: string, now: Date, workerId?: string): Promise<WorkerRow[]> {
    const since = new Date(now.getTime() - shownForMs)
    const minuteFrom = Math.floor(since.getTime() / 60_000)
    const rows = await this.#sql<
      {
        worker_id: string
        hostname: string | null
        sdk_version: string | null
        queues: string[]
        job_types: string[]
        registered_at: Date | null
        last_poll_at: Date | null
        last_seen_at: Date
        succeeded: number
        failed: number
      }[]
    >`
      SELECT p.worker_id, p.hostname, p.sdk_version, p.queues, p.job_types, p.registered_at, p.last_poll_at, p.last_seen_at,
        coalesce(o.succeeded, 0)::int AS succeeded, coalesce(o.failed, 0)::int AS failed
      FROM worker_presence p
      LEFT JOIN LATERAL (
        SELECT sum(succeeded) AS succeeded, sum(failed) AS failed FROM worker_outcomes
        WHERE project_id = p.project_id AND worker_id = p.worker_id AND minute > ${minuteFrom}
      ) o ON true
      WHERE p.project_id = ${projectId} AND p.last_seen_at > ${since}
        ${workerId === undefined ? this.#sql`` : this.#sql`AND p.worker_id = ${workerId}`}
      ORDER BY p.last_seen_at DESC, p.worker_id LIMIT ${maxWorkersListed}`
    return rows.map((r) => ({
      worker_id: r.worker_id,
      hostname: r.hostname,
      sdk_version: r.sdk_version,
      queues: r.queues,
      job_types: r.job_types,
      registered_at: r.registered_at?.toISOString() ?? null,
      last_poll_at: r.last_poll_at?.toISOString() ?? null,
      last_seen_at: r.last_seen_at.toISOString(),
      status: now.getTime() - r.last_seen_at.getTime() > workerGoneAfterMs ? 'gone' : 'active',
      finished_last_hour: { succeeded: r.succeeded, failed: r.failed },
    }))
  }

  #note(projectId: string, workerId: string, at: string, fields: Partial<Omit<Seen, 'projectId' | 'workerId' | 'lastSeenAt'>>): void {
    const key = `${projectId}\n${workerId}`
    const seen = this.#seen.get(key) ?? {
      projectId,
      workerId,
      hostname: null,
      sdkVersion: null,
      queues: null,
      jobTypes: null,
      registeredAt: null,
      lastPollAt: null,
      lastSeenAt: at,
    }
    this.#seen.set(key, {
      ...seen,
      hostname: fields.hostname ?? seen.hostname,
      sdkVersion: fields.sdkVersion ?? seen.sdkVersion,
      queues: fields.queues ?? seen.queues,
      jobTypes: fields.jobTypes ?? seen.jobTypes,
      registeredAt: later(seen.registeredAt, fields.registeredAt ?? null),
      lastPollAt: later(seen.lastPollAt, fields.lastPollAt ?? null),
      lastSeenAt: later(seen.lastSeenAt, at)!,
    })
  }

  async #flushOnce(): Promise<void> {
    const seen = [...this.#seen.values()]
    const outcomes = [...this.#outcomes.values()]
    this.#seen.clear()
    this.#outcomes.clear()
    try {
      if (seen.length > 0) {
        const rows = seen.map((s) => ({
          project_id: s.projectId,
          worker_id: s.workerId,
          hostname: s.hostname,
          sdk_version: s.sdkVersion,
          queues: s.queues,
          job_types: s.jobTypes,
          registered_at: s.registeredAt,
          last_poll_at: s.lastPollAt,
          last_seen_at: s.lastSeenAt,
        }))
        await this.#sql`
          INSERT INTO worker_presence AS p (project_id, worker_id, hostname, sdk_version, queues, job_types, registered_at, last_poll_at, last_seen_at)
          SELECT project_id, worker_id, hostname, sdk_version, coalesce(queues, '{}'), coalesce(job_types, '{}'), registered_at, last_poll_at, last_seen_at
          FROM json_to_recordset(${JSON.stringify(rows)}::text::json) AS r(project_id text, worker_id text, hostname text, sdk_version text,
            queues text[], job_types text[], registered_at timestamptz, last_poll_at timestamptz, last_seen_at timestamptz)
          ON CONFLICT (project_id, worker_id) DO UPDATE SET
            hostname = coalesce(excluded.hostname, p.hostname),
            sdk_version = coalesce(excluded.sdk_version, p.sdk_version),
            queues = CASE WHEN excluded.last_poll_at IS NOT NULL OR excluded.registered_at IS NOT NULL THEN excluded.queues ELSE p.queues END,
            job_types = CASE WHEN cardinality(excluded.job_types) > 0 THEN excluded.job_types ELSE p.job_types END,
            registered_at = greatest(excluded.registered_at, p.registered_at),
            last_poll_at = greatest(excluded.last_poll_at, p.last_poll_at),
            last_seen_at = greatest(excluded.last_seen_at, p.last_seen_at)`
      }
      if (outcomes.length > 0) {
        await this.#sql`
          INSERT INTO worker_outcomes AS o (project_id, worker_id, minute, succeeded, failed)
          SELECT * FROM json_to_recordset(${JSON.stringify(outcomes.map((c) => ({ project_id: c.projectId, worker_id: c.workerId, minute: c.minute, succeeded: c.succeeded, failed: c.failed })))}::text::json)
            AS r(project_id text, worker_id text, minute bigint, succeeded integer, failed integer)
          ON CONFLICT (project_id, worker_id, minute) DO UPDATE SET succeeded = o.succeeded + excluded.succeeded, failed = o.failed + excluded.failed`
      }
      await this.#prune()
    } catch (err) {
      // Not written: kept for the next flush (newer sightings of the same worker win).
      for (const s of seen) {
        const key = `${s.projectId}\n${s.workerId}`
        if (!this.#seen.has(key)) this.#seen.set(key, s)
      }
      for (const c of outcomes) {
        const key = `${c.projectId}\n${c.workerId}\n${c.minute}`
        const now = this.#outcomes.get(key)
        this.#outcomes.set(key, now === undefined ? c : { ...now, succeeded: now.succeeded + c.succeeded, failed: now.failed + c.failed })
      }
      throw err
    }
  }

  /** Once an hour per process: workers silent for a day, and minutes out of every window. */
  async #prune(): Promise<void> {
    const now = Date.now()
    if (now - this.#lastPrunedAt < shownForMs) return
    this.#lastPrunedAt = now
    await this.#sql`DELETE FROM worker_presence WHERE last_seen_at < ${new Date(now - keptForMs)}`
    await this.#sql`DELETE FROM worker_outcomes WHERE minute < ${Math.floor((now - 2 * shownForMs) / 60_000)}`
  }
}

/** A job a worker is running now, with its last heartbeat (null: none since it was claimed). */
export interface RunningJob {
  job_id: string
  job_type: string
  queue: string
  attempt: number
  started_at: string
  timeout_seconds: number
  last_heartbeat_at: string | null
}

/** Running jobs shown per worker, at most (a worker polls at most 50 at once, so this is rarely met). */
const maxRunningShown = 100

/**
 * The project's workers (one: `workerId`) with the jobs each runs now: the read model's
 * processing jobs under their ids, and each job's last heartbeat of its current attempt.
 */
export async function describeWorkers(
  deps: { sql: Sql; now(): Date },
  presence: WorkerPresence,
  jobs: { lastHeartbeat(jobId: string, attempt: number): Promise<{ at: string } | null> },
  projectId: string,
  workerId?: string,
): Promise<Array<WorkerRow & { running: RunningJob[] }>> {
  const workers = await presence.list(projectId, deps.now(), workerId)
  if (workers.length === 0) return []
  const rows = await jobList.runningOf(
    deps.sql,
    projectId,
    workers.map((w) => w.worker_id),
    maxRunningShown * workers.length,
  )
  const running = await Promise.all(
    rows.map(async (r) => ({
      worker_id: r.worker_id,
      job: {
        job_id: r.id,
        job_type: r.job_type,
        queue: r.queue,
        attempt: r.attempt,
        started_at: r.started_at.toISOString(),
        timeout_seconds: r.timeout_seconds,
        last_heartbeat_at: (await jobs.lastHeartbeat(r.id, r.attempt))?.at ?? null,
      },
    })),
  )
  return workers.map((w) => ({
    ...w,
    running: running
      .filter((r) => r.worker_id === w.worker_id)
      .slice(0, maxRunningShown)
      .map((r) => r.job),
  }))
}
