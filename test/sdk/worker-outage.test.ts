import { JobsvcClient, Worker } from '@jobsvc/sdk'
import t from 'tap'
import { eventually, isolatedNames, removeIsolated, spawnService } from '../support/harness.ts'
import { cliProject, freePort, gate, jobReaches, recordingLogger } from './support.ts'

// A service process restarted under a running worker (as in an upgrade): its waiting poll gets
// the spec's 503, then no answer at all while the process is gone. The worker backs off and
// retries, and a job that finished meanwhile is acked once the service is back.
t.test('a worker rides out a service restart: 503 and refused connections are retried, nothing is lost', async (t) => {
  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  const env = { JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl, PORT: String(await freePort()) }
  const first = await spawnService(env)
  t.teardown(() => first.stop('SIGKILL'))
  // Polls in flight, so that the shutdown comes while one waits on the service (its answer is
  // then the 503) rather than between two polls (a refused connection).
  let pollsInFlight = 0
  const countingFetch: typeof fetch = (input, init) => {
    if (!String(input).includes('/workers/poll')) return fetch(input, init)
    pollsInFlight++
    return fetch(input, init).finally(() => pollsInFlight--)
  }
  const client = new JobsvcClient({ baseUrl: first.url, apiKey: await cliProject(env), fetch: countingFetch })

  const started = gate()
  const finish = gate()
  const logger = recordingLogger()
  const worker = new Worker({
    client,
    queues: ['upgrade'],
    concurrency: 2,
    logger,
    backoff: { baseMs: 100, maxMs: 1_000 },
    handlers: {
      migrate: async () => {
        started.open()
        await finish.opened
      },
      after: () => 'done',
    },
  })
  await worker.start()
  t.teardown(() => worker.stop())
  const job = await client.jobs.create({ job_type: 'migrate', queue: 'upgrade', payload: {} })
  await started.opened
  await eventually(async () => pollsInFlight > 0, 15_000, 'the next poll to wait on the service')

  await first.stop('SIGTERM')
  // The service answers a poll it has read with the spec's 503; one still on its way when the
  // listener closes meets a refused or reset connection instead (status 0). Both are retried.
  const pollFailure = logger.entries.find((e) => e.message.includes('poll failed'))
  t.ok(
    pollFailure?.fields.status === 503 ? pollFailure.fields.code === 'service_unavailable' : pollFailure?.fields.status === 0,
    `the poll in flight met the shutdown (${pollFailure?.fields.status === 503 ? '503 service_unavailable' : 'no answer'}) and was retried`,
  )
  finish.open()
  await eventually(
    async () => logger.entries.some((e) => e.message.includes('ack of 1 jobs failed') && e.fields.status === 0),
    15_000,
    'an ack refused by the stopped service',
  )

  const second = await spawnService(env)
  t.teardown(() => second.stop('SIGKILL'))
  t.equal(second.url, first.url, 'the service is back where the worker points')
  t.match(await jobReaches(client, job.id, 'succeeded'), { attempt: 1 }, 'the retried ack landed: the job succeeded on its first attempt')
  const next = await client.jobs.create({ job_type: 'after', queue: 'upgrade', payload: {} })
  await jobReaches(client, next.id, 'succeeded')
  t.pass('polling resumed on its own')
  await worker.stop()
  t.notOk(
    logger.entries.some((e) => e.level === 'error'),
    'only warnings: every failure was one to retry',
  )
})
