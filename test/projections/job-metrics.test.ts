import t from 'tap'
import { ulid } from 'ulid'
import type { JobCommand } from '../../domain/job.ts'
import { histogramIndex, type ThroughputCounts } from '../../domain/job-metrics.ts'
import { jobMetrics } from '../../projections/job-metrics.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { jobHandler } from '../../streams/aggregates.ts'
import { createJobData } from '../support/job-commands.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, jobMetrics)

const at = (second: number) => `2024-06-01T14:00:${String(second).padStart(2, '0')}.000Z`

/** Two jobs of one project in queue `mail`: one claimed and succeeded after 1.5 s, one left pending. */
async function twoJobs() {
  const projectId = `prj_${ulid().toLowerCase()}`
  const ref = (): Ref<'job'> => jobHandler.ref(projectId, `job_${ulid().toLowerCase()}`)
  const [done, waiting] = [ref(), ref()]
  const decide = (job: Ref<'job'>, command: JobCommand) => bench.decide(jobHandler, job, command)
  const create = (job: Ref<'job'>, second: number) =>
    decide(job, { type: 'create_job', data: createJobData({ job_id: job.id, project_id: projectId, queue: 'mail' }), meta: { now: at(second) } })
  const records = [
    await create(done, 0),
    await create(waiting, 1),
    await decide(done, { type: 'claim_job', data: { worker_id: 'w1' }, meta: { now: at(2) } }),
    await decide(done, { type: 'ack_job', data: { worker_id: 'w1', status: 'succeeded', duration_ms: 1500, error: null }, meta: { now: at(3) } }),
  ]
  const cancelWaiting = () => decide(waiting, { type: 'cancel_job', data: {}, meta: { now: at(4) } })
  return { projectId, records, cancelWaiting }
}

async function stateCounts(projectId: string) {
  const rows = await bench.sql`SELECT queue, state, count FROM job_state_counts WHERE project_id = ${projectId} ORDER BY queue, state`
  return rows.map((r) => `${r.queue} ${r.state} ${r.count}`)
}

interface ThroughputRow extends ThroughputCounts {
  resolution: string
  bucket_start: Date
  queue: string
  durations: number[]
}

function throughput(projectId: string) {
  return bench.sql<ThroughputRow[]>`
    SELECT resolution, bucket_start, queue, created::int, succeeded::int, failed::int, dead_lettered::int, cancelled::int, retried::int, durations
    FROM job_throughput WHERE project_id = ${projectId} ORDER BY resolution, queue`
}

t.test('job events in: state counts, throughput and job-type stats out', async (t) => {
  const { projectId, records } = await twoJobs()
  await bench.project(records)
  t.same(await stateCounts(projectId), ['mail pending 1', 'mail succeeded 1'], 'processing entered and left: no row')

  const histogram = Array.from({ length: histogramIndex(1500) + 1 }, (_, i) => (i === histogramIndex(1500) ? 1 : 0))
  const buckets = { day: '2024-06-01T00:00:00.000Z', hour: '2024-06-01T14:00:00.000Z', minute: '2024-06-01T14:00:00.000Z' }
  const rows = await throughput(projectId)
  t.same(
    rows.map((r) => [r.resolution, r.queue, r.bucket_start.toISOString()]),
    (['day', 'hour', 'minute'] as const).flatMap((resolution) => [
      [resolution, '', buckets[resolution]],
      [resolution, 'mail', buckets[resolution]],
    ]),
    'one bucket per resolution, for the queue and for all queues ("")',
  )
  for (const r of rows)
    t.match(
      r,
      { created: 2, succeeded: 1, failed: 0, dead_lettered: 0, cancelled: 0, retried: 0, durations: histogram },
      `${r.resolution} ${r.queue || 'all'}`,
    )

  const types =
    await bench.sql`SELECT resolution, job_type, created, succeeded, duration_sum_ms, duration_count FROM job_type_stats WHERE project_id = ${projectId} ORDER BY resolution`
  t.same(
    types.map((r) => `${r.resolution} ${r.job_type} ${r.created} ${r.succeeded} ${r.duration_sum_ms} ${r.duration_count}`),
    ['day email 2 1 1500 1', 'hour email 2 1 1500 1'],
  )
})

t.test('re-delivering the same sequences changes nothing: the sums rely on the checkpoint', async (t) => {
  const { records } = await twoJobs()
  await bench.redeliveryChangesNothing(t, records, { pastCheckpoint: false })
})

t.test('a batch that repeats applied messages counts only the new one', async (t) => {
  const { projectId, records, cancelWaiting } = await twoJobs()
  await bench.project(records)
  await bench.project([...records, await cancelWaiting()])
  t.same(await stateCounts(projectId), ['mail cancelled 1', 'mail succeeded 1'])
  t.match(await throughput(projectId), Array(6).fill({ created: 2, succeeded: 1, cancelled: 1 }))
})
