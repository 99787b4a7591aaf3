import { spawn } from 'node:child_process'
import t from 'tap'
import { eventually, httpRequest, repoRoot, startHarness, withClockShifted } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

// Issue 26, item 4: GET /jobsvc/v1/workers. Every worker seen in the last hour (registered or
// polling), its queues and job types, hostname, last poll, the jobs it runs with their last
// heartbeat, its acks of the last hour; a worker silent past 90 s is `gone`.

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const api = jobsApi(h, { jobType: 'resize' })
const register = (workerId: string, hostname: string) =>
  h.request('POST', '/jobsvc/v1/workers/register', {
    worker_id: workerId,
    queues: ['images'],
    job_types: ['resize'],
    hostname,
    sdk_version: 'test/1',
  })
const workers = async () => (await h.request('GET', '/jobsvc/v1/workers')).body.data as any[]

t.test('two workers: one runs jobs and stays, the other is killed and shown gone', async (t) => {
  t.equal((await register('w-busy', 'host-a')).status, 200)
  t.equal((await register('w-killed', 'host-b')).status, 200)
  t.same((await api.poll({ worker_id: 'w-killed', queues: ['images'] })).body.jobs, [], 'the second worker polls once, then dies')

  const done = await api.create({ queue: 'images' })
  await api.claimOne('images', 'w-busy')
  t.equal((await api.ack({ job_id: done.id, worker_id: 'w-busy', status: 'succeeded', result: { ok: true } })).status, 200)
  const running = await api.create({ queue: 'images' })
  const claimed = await api.claimOne('images', 'w-busy')
  t.equal(claimed.id, running.id)
  t.equal((await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: running.id, worker_id: 'w-busy' })).status, 200)

  const listed = await eventually(
    async () => {
      const data = await workers()
      const busy = data.find((w) => w.worker_id === 'w-busy')
      return data.length === 2 && busy?.finished_last_hour.succeeded === 1 && busy.running[0]?.last_heartbeat_at ? data : null
    },
    10_000,
    'both workers listed, with the busy one’s ack and heartbeat',
  )
  const busy = listed.find((w) => w.worker_id === 'w-busy')
  t.match(busy, {
    hostname: 'host-a',
    sdk_version: 'test/1',
    queues: ['images'],
    job_types: ['resize'],
    status: 'active',
    finished_last_hour: { succeeded: 1, failed: 0 },
  })
  t.ok(busy.last_poll_at && busy.registered_at, 'when it registered and last polled')
  t.equal(busy.running.length, 1)
  t.match(busy.running[0], { job_id: running.id, job_type: 'resize', queue: 'images', attempt: 1 })
  t.equal(listed[0].worker_id, 'w-busy', 'the most recently seen first')
  t.match(
    listed.find((w) => w.worker_id === 'w-killed'),
    { hostname: 'host-b', status: 'active', running: [] },
  )

  // A minute and a half later the busy worker has polled again; the killed one said nothing.
  await withClockShifted(h.runtime, 91_000, async () => {
    await api.poll({ worker_id: 'w-busy', queues: ['images'] })
    const later = await eventually(
      async () => {
        const data = (await h.request('GET', '/jobsvc/v1/workers')).body.data as any[]
        return data.find((w) => w.worker_id === 'w-killed')?.status === 'gone' && data.find((w) => w.worker_id === 'w-busy')?.status === 'active'
          ? data
          : null
      },
      10_000,
      'the killed worker gone, the busy one active',
    )
    t.equal(later[0].worker_id, 'w-busy')
    const one = await h.request('GET', '/jobsvc/v1/workers/w-killed')
    t.equal(one.status, 200)
    t.equal(one.body.status, 'gone')
  })
})

t.test('one worker by id; an unknown id is 404; another project sees none of them', async (t) => {
  const one = await h.request('GET', '/jobsvc/v1/workers/w-busy')
  t.equal(one.status, 200)
  t.equal(one.body.worker_id, 'w-busy')
  isError(t, await h.request('GET', '/jobsvc/v1/workers/w-never'), 404, 'worker_not_found')
  const other = await h.newProject()
  const theirs = await httpRequest(h.url, other.apiKey, 'GET', '/jobsvc/v1/workers')
  t.equal(theirs.status, 200)
  t.same(theirs.body.data, [])
  isError(t, await httpRequest(h.url, other.apiKey, 'GET', '/jobsvc/v1/workers/w-busy'), 404, 'worker_not_found')
})

t.test('a worker process killed mid-job: listed with its job, then gone, its job still shown as running until reaped', async (t) => {
  // A real Python SDK worker, SIGKILLed while its handler runs: nothing says goodbye.
  const job = await api.create({ job_type: 'hang', queue: 'kill-me' })
  const script = [
    'import os, threading, jobsvc',
    'client = jobsvc.Client(os.environ["JOBSVC_URL"], os.environ["JOBSVC_API_KEY"])',
    'worker = jobsvc.Worker(client, queues=["kill-me"], handlers={"hang": lambda job, ctx: threading.Event().wait(600)}, worker_id="w-doomed")',
    'worker.run()',
  ].join('\n')
  const child = spawn('python3', ['-c', script], {
    env: { ...process.env, JOBSVC_URL: h.url, JOBSVC_API_KEY: h.apiKey, PYTHONPATH: `${repoRoot}sdk/python` },
    stdio: 'ignore',
  })
  t.teardown(() => void child.kill('SIGKILL'))
  const seen = await eventually(
    async () => {
      const one = await h.request('GET', '/jobsvc/v1/workers/w-doomed')
      return one.status === 200 && one.body.running.length === 1 ? one.body : null
    },
    20_000,
    'the worker listed, running its job',
  )
  t.match(seen, { status: 'active', queues: ['kill-me'], running: [{ job_id: job.id, job_type: 'hang' }] })
  child.kill('SIGKILL')
  await new Promise((resolve) => child.once('exit', resolve))
  await withClockShifted(h.runtime, 91_000, async () => {
    const gone = await h.request('GET', '/jobsvc/v1/workers/w-doomed')
    t.equal(gone.body.status, 'gone', 'silent past 90 s: gone')
    t.equal(gone.body.running[0]?.job_id, job.id, 'its job is still processing (the reaper retries it once its heartbeats are missed)')
  })
})
