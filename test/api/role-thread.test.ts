import t from 'tap'
import { eventually, httpRequest, isolatedNames, removeIsolated, spawnService } from '../support/harness.ts'
import { createProjectWithCli } from '../support/spawned-install.ts'

t.test('one process runs the API on its main thread and the other roles on a thread of their own; they work together and stop cleanly', async (t) => {
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const env = { JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl }
  const svc = await spawnService(env)
  t.teardown(() => svc.stop('SIGKILL'))

  const { apiKey } = await createProjectWithCli(env, 'threads')
  const call = (method: string, path: string, body?: unknown) => httpRequest(svc.url, apiKey, method, path, body)
  await eventually(async () => (await call('GET', '/jobsvc/v1/jobs?limit=1')).status === 200, 15_000, 'the new key works')

  const created = await call('POST', '/jobsvc/v1/jobs', { job_type: 'threaded', queue: 'threads', payload: { n: 1 } })
  t.equal(created.status, 201)
  const listed = await call('GET', '/jobsvc/v1/jobs')
  t.ok(
    listed.body.data.some((j: { id: string }) => j.id === created.body.id),
    'the list shows it at once: the API waited for the projector thread',
  )

  const polled = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_thread', queues: ['threads'], wait_seconds: 5 })
  t.equal(polled.status, 200)
  t.strictSame(
    polled.body.jobs.map((j: { id: string }) => j.id),
    [created.body.id],
    'claimed',
  )
  const acked = await call('POST', '/jobsvc/v1/workers/ack', { job_id: created.body.id, worker_id: 'wrk_thread', status: 'succeeded' })
  t.strictSame(acked.body, { action: 'done' })
  await eventually(async () => (await call('GET', `/jobsvc/v1/jobs?state=succeeded`)).body.data.length === 1, 15_000, 'the success projected')

  const logLines = svc
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg?: string; thread?: string })
  const leading = logLines.find((l) => l.msg === 'projector: leading')
  t.equal(leading?.thread, 'projector+scheduler+dispatcher', 'the projector logs from the background thread')

  const exited = new Promise<number | null>((resolve) => svc.process.once('exit', (code) => resolve(code)))
  svc.process.kill('SIGTERM')
  t.equal(await exited, 0, 'SIGTERM stops both threads and the process exits 0')
  t.notMatch(svc.output(), /thread (crashed|exited|failed)/, 'the thread stopped when asked, not by failing')
})
