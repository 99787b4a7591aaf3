/**
 * Writes test/fixtures/log-v1/: the event log as the code of commit 82ef59b wrote it (every
 * message carrying the whole job state, payload, last error and progress included), and what
 * that code answered about it. The upgrade test (test/streams/log-upgrade.test.ts) publishes
 * these messages into a fresh namespace and checks that later code loads, projects, answers,
 * claims and acks them the same.
 *
 * Run once, with the code of that commit: `npx tsx test/support/write-log-v1-fixture.ts`. The
 * fixture is committed; running this again with later code would record later code's messages.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, startHarness, type Harness } from './harness.ts'
import { jobsApi } from './jobs-api.ts'

const outDir = fileURLToPath(new URL('../fixtures/log-v1/', import.meta.url))

/** One stored message: what a publish needs to store it again, byte for byte. */
export interface FixtureMessage {
  seq: number
  subject: string
  headers: Record<string, string>
  /** The msgpack body, base64. */
  data: string
}

async function main(): Promise<void> {
  const teardowns: Array<() => unknown> = []
  const t = { teardown: (fn: () => unknown) => void teardowns.unshift(fn) }
  try {
    const h = await startHarness(t, 'log-v1-fixture.test.ts', {
      roles: ['api', 'projector', 'scheduler'],
      config: { webhookAllowHosts: ['127.0.0.1:9'] },
    })
    await record(h)
  } finally {
    for (const fn of teardowns) await fn()
  }
}

async function record(h: Harness): Promise<void> {
  const api = jobsApi(h, { jobType: 'fixture.email' })
  const ack = async (body: Record<string, unknown>) => {
    const res = await api.ack(body)
    if (res.status !== 200) throw new Error(`ack answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body
  }
  const heartbeat = async (jobId: string, workerId: string, progress: number) => {
    const res = await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: jobId, worker_id: workerId, progress })
    if (res.status !== 200) throw new Error(`heartbeat answered ${res.status}: ${JSON.stringify(res.body)}`)
  }
  const error = { type: 'ValueError', message: 'the mail server said no', stack_trace: 'Traceback:\n  line 1\n  line 2' }

  // Failed once with an error and progress, now pending again (its retry due in a few seconds).
  const retrying = (await api.create({ queue: 'q-retry', payload: { to: 'a@example.com', n: 1 }, max_attempts: 3 })).id
  await api.claimOne('q-retry', 'w-retry')
  await heartbeat(retrying, 'w-retry', 0.3)
  await heartbeat(retrying, 'w-retry', 0.6)
  await ack({ job_id: retrying, worker_id: 'w-retry', status: 'failed', error })

  // Succeeded after progress, with tags, an idempotency key and a traceparent.
  const traced = await h.request(
    'POST',
    '/jobsvc/v1/jobs',
    { job_type: 'fixture.email', queue: 'q-done', payload: { nested: { list: [1, 2, 3], s: 'é' } }, tags: { team: 'mail' } },
    { 'idempotency-key': 'fixture-key-1', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
  )
  if (traced.status !== 201) throw new Error(`create answered ${traced.status}: ${JSON.stringify(traced.body)}`)
  const succeeded = traced.body.id as string
  await api.claimOne('q-done', 'w-done')
  await heartbeat(succeeded, 'w-done', 0.5)
  await ack({ job_id: succeeded, worker_id: 'w-done', status: 'succeeded', duration_ms: 1234 })

  // Dead-lettered with an error, left so.
  const deadLetter = (await api.create({ queue: 'q-dead', payload: { fate: 'dead' }, max_attempts: 1 })).id
  await api.claimOne('q-dead', 'w-dead')
  await heartbeat(deadLetter, 'w-dead', 0.9)
  await ack({ job_id: deadLetter, worker_id: 'w-dead', status: 'failed', error: { ...error, message: 'fatal' } })

  // Dead-lettered, then retried by hand: pending, error cleared.
  const retried = (await api.create({ queue: 'q-retried', payload: { fate: 'retried' }, max_attempts: 1 })).id
  await api.claimOne('q-retried', 'w-retried')
  await ack({ job_id: retried, worker_id: 'w-retried', status: 'failed', error })
  const retriedAnswer = await h.request('POST', `/jobsvc/v1/jobs/${retried}/retry`)
  if (retriedAnswer.status !== 200) throw new Error(`retry answered ${retriedAnswer.status}`)

  // Claimed and reporting progress, never acked: still processing.
  const processing = (await api.create({ queue: 'q-running', payload: { long: 'x'.repeat(300) }, timeout_seconds: 3600 })).id
  await api.claimOne('q-running', 'w-running')
  await heartbeat(processing, 'w-running', 0.25)

  // A parent that succeeded and its continuation, activated; a pending parent and its waiting continuation.
  const parentDone = (await api.create({ queue: 'q-parent', payload: { step: 1 } })).id
  const childActivated = (await api.create({ queue: 'q-child', payload: { step: 2 }, parent_job_id: parentDone })).id
  await api.claimOne('q-parent', 'w-parent')
  await ack({ job_id: parentDone, worker_id: 'w-parent', status: 'succeeded' })
  const parentPending = (await api.create({ queue: 'q-parent2', payload: { step: 1 } })).id
  const childWaiting = (await api.create({ queue: 'q-child2', payload: { step: 2 }, parent_job_id: parentPending })).id

  // Scheduled far ahead; cancelled.
  const scheduled = (await api.create({ queue: 'q-later', payload: { when: 'later' }, run_at: '2099-01-01T00:00:00.000Z' })).id
  const cancelled = (await api.create({ queue: 'q-cancel', payload: { fate: 'cancelled' }, run_at: '2099-01-01T00:00:00.000Z' })).id
  const cancelledAnswer = await h.request('POST', `/jobsvc/v1/jobs/${cancelled}/cancel`)
  if (cancelledAnswer.status !== 200) throw new Error(`cancel answered ${cancelledAnswer.status}`)

  // A job fired by a recurring schedule, which is then deleted.
  const schedule = await h.request('PUT', '/jobsvc/v1/recurring/rjob_fixture-tick', {
    job_type: 'fixture.tick',
    cron_expression: '* * * * * *',
    queue: 'q-recurring',
    payload: { from: 'schedule' },
  })
  if (schedule.status !== 201) throw new Error(`recurring answered ${schedule.status}: ${JSON.stringify(schedule.body)}`)
  const recurring = await eventually(
    async () => {
      const res = await h.request('GET', '/jobsvc/v1/jobs?job_type=fixture.tick&limit=1')
      return res.body?.data?.[0]?.id as string | undefined
    },
    20_000,
    'a recurring occurrence',
  )
  if ((await h.request('DELETE', '/jobsvc/v1/recurring/rjob_fixture-tick')).status !== 204) throw new Error('recurring delete failed')

  // Other aggregates: a webhook subscription, and a project change (its retry policy).
  const webhook = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['job.succeeded'] })
  if (webhook.status !== 201) throw new Error(`webhook answered ${webhook.status}: ${JSON.stringify(webhook.body)}`)
  const policy = await h.request('PUT', '/jobsvc/v1/retry-policy', {
    base_delay_seconds: 1,
    factor: 2,
    max_delay_seconds: 60,
    jitter_seconds: 0,
    max_attempts: 5,
  })
  if (policy.status !== 200) throw new Error(`retry policy answered ${policy.status}: ${JSON.stringify(policy.body)}`)

  // The projector has caught up with everything written: the answers below are final.
  const nats = h.runtime.nats
  const stream = eventsStreamName(h.config.namespace)
  const lastSeq = (await nats.jsm.streams.info(stream)).state.last_seq
  await eventually(async () => {
    const [row] = await h.runtime.sql<{ last_seq: number }[]>`SELECT last_seq FROM projection_checkpoints WHERE name = 'job-list'`
    return row !== undefined && Number(row.last_seq) >= lastSeq
  })

  const jobs = {
    retrying,
    succeeded,
    deadLetter,
    retried,
    processing,
    parentDone,
    childActivated,
    parentPending,
    childWaiting,
    scheduled,
    cancelled,
    recurring,
  }
  const answers: Record<string, unknown> = {}
  const histories: Record<string, unknown> = {}
  for (const [name, id] of Object.entries(jobs)) {
    answers[name] = await api.getJob(id)
    histories[name] = (await h.request('GET', `/jobsvc/v1/jobs/${id}/history?limit=500`)).body
  }
  const list = (await h.request('GET', '/jobsvc/v1/jobs?limit=100')).body

  const messages: FixtureMessage[] = []
  for (let seq = 1; seq <= lastSeq; seq++) {
    const m = await nats.jsm.direct.getMessage(stream, { seq })
    if (m === null) continue
    const headers: Record<string, string> = {}
    for (const [k, v] of m.header) {
      if (!k.startsWith('Nats-') || k === 'Nats-Msg-Id' || k === 'Nats-Expected-Last-Subject-Sequence') headers[k] = v[0]!
    }
    messages.push({ seq: m.seq, subject: m.subject, headers, data: Buffer.from(m.data).toString('base64') })
  }

  await mkdir(outDir, { recursive: true })
  await writeFile(new URL('messages.jsonl', `file://${outDir}`), messages.map((m) => JSON.stringify(m)).join('\n') + '\n')
  await writeFile(
    new URL('answers.json', `file://${outDir}`),
    JSON.stringify(
      {
        note: 'What the code of commit 82ef59b answered about the messages in messages.jsonl (test/support/write-log-v1-fixture.ts).',
        namespace: h.config.namespace,
        project_id: h.projectId,
        api_key: h.apiKey,
        jobs,
        workers: { processing: 'w-running' },
        job: answers,
        history: histories,
        list,
      },
      null,
      2,
    ) + '\n',
  )
  process.stdout.write(`wrote ${messages.length} messages (through seq ${lastSeq}) to ${outDir}\n`)
}

await main()
