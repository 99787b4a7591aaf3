import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import t from 'tap'
import { eventually, httpRequest } from '../support/harness.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

// Issue 23, item 5: with every role in one process, the projector, scheduler and dispatcher run
// on a worker thread. A crash of that thread took the whole process down (exit code 1) for a
// supervisor to restart; now the thread is started again in the process, which goes on serving.
t.test('a crashed role thread is started again and the process stays up', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'jobsvc-crash-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const injector = pathToFileURL(join(import.meta.dirname, '../support/crash-role-thread.mjs')).href
  const install = await spawnedInstall(t, import.meta.filename, { env: { NODE_OPTIONS: `--import ${injector}`, JOBSVC_TEST_CRASH_DIR: dir } })
  const svc = await install.start()
  let exited: string | null = null
  svc.process.once('exit', (code, signal) => (exited = `exited (${code ?? signal})`))
  const { apiKey } = await createProjectWithCli(install.env, 'restart')
  const request = (method: string, path: string, body?: unknown) => httpRequest(svc.url, apiKey, method, path, body)

  await writeFile(join(dir, 'crash'), '')
  await eventually(async () => existsSync(join(dir, 'crashed')), 15_000, 'the injected crash')
  await eventually(async () => /thread crashed; starting it again/.test(svc.output()), 15_000, 'the crash logged')
  t.equal((await httpRequest(svc.url, null, 'GET', '/jobsvc/health/live')).status, 200, 'the API answers meanwhile')

  // A job for later needs the scheduler to become claimable, and the list needs the projector.
  const created = await request('POST', '/jobsvc/v1/jobs', {
    job_type: 'after-crash',
    queue: 'restart',
    payload: {},
    run_at: new Date(Date.now() + 3_000).toISOString(),
  })
  t.equal(created.status, 201)
  const job = await eventually(
    async () => {
      const res = await request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['restart'], wait_seconds: 2 })
      return res.body?.jobs?.[0] as { id: string } | undefined
    },
    30_000,
    'the job promoted and claimed',
  )
  t.equal(job.id, created.body.id)
  t.equal((await request('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'w', status: 'succeeded' })).status, 200)
  await eventually(
    async () => (await request('GET', `/jobsvc/v1/jobs?queue=restart&state=succeeded`)).body?.data?.length === 1,
    30_000,
    'the list showing it succeeded',
  )
  t.equal(exited, null, 'the process never exited')
  t.match(svc.output(), /thread runs again/)
})
