import t from 'tap'
import { eventually, httpRequest, type SpawnedService } from '../support/harness.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

// Issue 28, item 6, as a deployment meets it: the service runs as `npm start` runs it (every role
// in one process), a bulk retry is under way, and the process is killed (SIGKILL: no shutdown, no
// last record). Started again, the operation goes on from the cursor it recorded and ends with
// every job retried exactly once. The pace is slowed so that the kill lands half-way.

const perSecond = 10
const jobs = 40

t.test('a bulk retry resumes after the whole service is killed and started again, no job retried twice', async (t) => {
  const install = await spawnedInstall(t, import.meta.filename, { config: { tunables: { bulk_jobs_per_second: perSecond } } })
  let svc: SpawnedService = await install.start()
  const { apiKey } = await createProjectWithCli(install.env, 'bulk-restart')
  const call = (method: string, path: string, body?: unknown) => httpRequest(svc.url, apiKey, method, path, body)

  const created = await call('POST', '/jobsvc/v1/jobs/batch', {
    jobs: Array.from({ length: jobs }, (_, i) => ({ job_type: 'bulk', queue: 'restart', max_attempts: 1, payload: { i } })),
  })
  t.equal(created.body.created, jobs)
  const ids: string[] = created.body.results.map((r: { body: { id: string } }) => r.body.id)
  for (let acked = 0; acked < jobs;) {
    const polled = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-restart', queues: ['restart'], capacity: 10, wait_seconds: 5 })
    for (const job of polled.body.jobs as Array<{ id: string }>) {
      const ack = await call('POST', '/jobsvc/v1/workers/ack', {
        job_id: job.id,
        worker_id: 'w-restart',
        status: 'failed',
        error: { type: 'Boom', message: 'failed on purpose' },
      })
      t.equal(ack.status, 200)
      acked++
    }
  }
  await eventually(async () => (await call('GET', '/jobsvc/v1/jobs?queue=restart&state=dead_letter&limit=100')).body.data.length === jobs)

  const started = await call('POST', '/jobsvc/v1/jobs/bulk', { action: 'retry', filter: { queues: ['restart'] } })
  t.equal(started.status, 202)
  t.match(started.body, { matched: jobs })
  const opId: string = started.body.operation_id
  const operation = async () => (await call('GET', `/jobsvc/v1/operations/${opId}`)).body
  await eventually(async () => (await operation()).processed >= 6, 30_000, 'the run to be under way')
  await svc.stop('SIGKILL')

  svc = await install.start()
  const halfway = await operation()
  t.equal(halfway.status, 'running', 'the killed run left its operation running')
  const op = await eventually(
    async () => {
      const o = await operation()
      return o.status === 'running' ? null : o
    },
    60_000,
    'the operation to end',
  )
  t.match(op, { status: 'succeeded', matched: jobs, processed: jobs, succeeded: jobs, failed: 0 })
  for (const id of ids) {
    const history = (await call('GET', `/jobsvc/v1/jobs/${id}/history?limit=100`)).body.data as Array<{
      type: string
      data: { operation_id?: string }
    }>
    t.equal(history.filter((e) => e.data.operation_id === opId).length, 1, `${id} retried once`)
    t.equal(history.at(-1)!.type, 'job_retried')
  }
  t.equal(await install.stop(svc), 0, 'the restarted process shuts down cleanly')
})
