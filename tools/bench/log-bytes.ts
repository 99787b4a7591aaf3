/**
 * What the log stores per job and per heartbeat, from the events stream's own byte count
 * (`state.bytes`, what JetStream holds: subjects, headers and bodies) before and after, measured
 * before any other phase so that nothing else appends meanwhile: jobs with a 100-byte payload run
 * create → claim → ack one request each, and heartbeats report a new progress value each on a
 * claimed job.
 */
import type { NatsHandles } from '../../streams/connection.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { withRetries, type Client } from './http-client.ts'
import type { ReportSection } from './report.ts'

const jobs = 20
const heartbeats = 50
const queue = 'bench-log-bytes'
/** `{"data":"xx…"}`, 100 bytes of JSON. */
const payload = { data: 'x'.repeat(100 - '{"data":""}'.length) }

export async function measureLogBytes(client: Client, nats: NatsHandles, namespace: string, signal: AbortSignal): Promise<ReportSection> {
  const stream = eventsStreamName(namespace)
  const bytes = async () => (await nats.jsm.streams.info(stream)).state.bytes
  const send = (what: string, path: string, body: unknown, ok = 200) => withRetries(what, signal, () => client.request('POST', path, body), ok)
  /** Polls until `count` jobs of the queue are claimed (a poll answers as soon as one is claimable). */
  const claimAll = async (count: number, worker: string): Promise<string[]> => {
    const claimed: string[] = []
    for (let round = 1; claimed.length < count; round++) {
      if (round > count + 10) throw new Error(`log bytes: only ${claimed.length} of ${count} jobs were claimed`)
      const body = { worker_id: worker, queues: [queue], capacity: Math.min(50, count - claimed.length), wait_seconds: 5 }
      for (const job of (await send('poll', '/jobsvc/v1/workers/poll', body)).body.jobs as Array<{ id: string }>) claimed.push(job.id)
    }
    return claimed
  }

  const beforeJobs = await bytes()
  for (let i = 0; i < jobs; i++) await send('create', '/jobsvc/v1/jobs', { job_type: 'bench.log', queue, payload }, 201)
  for (const id of await claimAll(jobs, 'bench-log-w1')) {
    await send('ack', '/jobsvc/v1/workers/ack', { job_id: id, worker_id: 'bench-log-w1', status: 'succeeded' })
  }
  const perJob = Math.round(((await bytes()) - beforeJobs) / jobs)

  await send('create', '/jobsvc/v1/jobs', { job_type: 'bench.log', queue, payload }, 201)
  const [beating] = await claimAll(1, 'bench-log-w2')
  const beforeBeats = await bytes()
  for (let i = 1; i <= heartbeats; i++) {
    await send('heartbeat', '/jobsvc/v1/workers/heartbeat', { job_id: beating, worker_id: 'bench-log-w2', progress: i / heartbeats })
  }
  const perHeartbeat = Math.round(((await bytes()) - beforeBeats) / heartbeats)
  await send('ack', '/jobsvc/v1/workers/ack', { job_id: beating, worker_id: 'bench-log-w2', status: 'succeeded' })

  return {
    lines: [
      '',
      `jobsvc bench, log bytes (the events stream's state.bytes, nothing else appending):`,
      `  ${perJob} bytes stored per job (create -> claim -> ack, 100-byte payload; ${jobs} jobs)`,
      `  ${perHeartbeat} bytes stored per heartbeat with a new progress value (${heartbeats} heartbeats)`,
    ],
    summary: { log_bytes_per_job: perJob, log_bytes_per_heartbeat: perHeartbeat },
  }
}
