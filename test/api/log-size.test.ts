import { randomBytes } from 'node:crypto'
import t from 'tap'
import { eventsStreamName, eventSubject } from '../../streams/names.ts'
import { eventually, startHarness } from '../support/harness.ts'
import { isError, jobsApi } from '../support/jobs-api.ts'

/**
 * What the log stores of a job: its payload once (in `job_created`), its progress as small
 * reports on a subject of its own, and a bound on the whole (issue 23: a 200 KB payload and 50
 * progress heartbeats store under 1.1 × the payload plus 20 KB). Measured from the events
 * stream's own byte count, through the HTTP API.
 */

t.test('a job with a 200 KB payload and 50 progress heartbeats stores its payload once', async (t) => {
  const h = await startHarness(t, import.meta.filename)
  const api = jobsApi(h, { jobType: 'big' })
  const stream = eventsStreamName(h.config.namespace)
  const bytes = async () => (await h.runtime.nats.jsm.streams.info(stream)).state.bytes
  const marker = `marker-${randomBytes(8).toString('hex')}`
  const payloadBytes = 200 * 1024
  const payload = { marker, blob: '' }
  payload.blob = 'x'.repeat(payloadBytes - JSON.stringify(payload).length)
  t.equal(JSON.stringify(payload).length, payloadBytes)

  const before = await bytes()
  const job = await api.create({ queue: 'big', payload })
  const claimed = await api.claimOne('big', 'w-big')
  t.same(claimed.payload, payload, 'the poll hands the worker its payload')
  for (let i = 1; i <= 50; i++) {
    const res = await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w-big', progress: i / 50 })
    t.equal(res.status, 200, `heartbeat ${i}`)
  }
  t.equal((await api.ack({ job_id: job.id, worker_id: 'w-big', status: 'succeeded' })).status, 200)
  const stored = (await bytes()) - before
  const bound = 1.1 * payloadBytes + 20 * 1024
  t.ok(stored < bound, `the job stored ${stored} bytes, under ${bound}`)

  // Every message of the job, on both of its subjects: only the first holds the payload.
  const nats = h.runtime.nats
  const own = eventSubject(h.config.namespace, h.projectId, 'job', job.id)
  const reports = eventSubject(h.config.namespace, h.projectId, 'progress', job.id)
  const found: Array<{ subject: string; types: string; hasPayload: boolean }> = []
  for (let seq = 1; ;) {
    const m = await nats.jsm.direct.getMessage(stream, { seq, next_by_subj: `${h.config.namespace}.evt.${h.projectId}.*.${job.id}` })
    if (m === null) break
    found.push({ subject: m.subject, types: m.header.get('Jobsvc-Event-Type'), hasPayload: Buffer.from(m.data).includes(marker) })
    seq = m.seq + 1
  }
  t.strictSame(
    found.filter((m) => m.subject === own).map((m) => m.types),
    ['job_created', 'job_claimed', 'job_succeeded'],
    "the job's own subject holds its decisions only",
  )
  t.equal(
    found.filter((m) => m.subject === reports && m.types === 'job_progressed').length,
    50,
    'each progress change is a report on its own subject',
  )
  t.strictSame(
    found.filter((m) => m.hasPayload).map((m) => m.types),
    ['job_created'],
    'no message after job_created carries the payload',
  )

  const read = await api.getJob(job.id)
  t.match(read, { state: 'succeeded', progress: 1, error: null })
  t.same(read.payload, payload, 'GET still shows the payload')
  const listed = await eventually(async () => {
    const item = (await h.request('GET', `/jobsvc/v1/jobs?queue=big`)).body.data[0]
    return item?.state === 'succeeded' ? item : null
  })
  t.strictSame(listed, read, 'and the list shows the same job')
})

t.test('a heartbeat without a new progress appends nothing', async (t) => {
  const h = await startHarness(t, import.meta.filename, { suffix: '_hb' })
  const api = jobsApi(h, { jobType: 'hb' })
  const job = await api.create({ queue: 'hb' })
  await api.claimOne('hb', 'w-hb')
  const heartbeat = (progress?: number) => h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w-hb', progress })
  t.equal((await heartbeat(0.5)).status, 200)
  const last = await h.runtime.store.lastSequence()
  t.equal((await heartbeat(0.5)).status, 200)
  t.equal((await heartbeat()).status, 200)
  t.equal(await h.runtime.store.lastSequence(), last, 'the same progress again, or none, is liveness only')
  isError(t, await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w-other', progress: 0.7 }), 409, 'worker_mismatch')
  t.equal((await api.getJob(job.id)).progress, 0.5)
})

t.test("an attempt's error is stored once and read back while the job runs again", async (t) => {
  const h = await startHarness(t, import.meta.filename, { suffix: '_err' })
  const api = jobsApi(h, { jobType: 'err' })
  const policy = { base_delay_seconds: 1, factor: 1, max_delay_seconds: 1, jitter_seconds: 0, max_attempts: 3 }
  t.equal((await h.request('PUT', '/jobsvc/v1/retry-policy', policy)).status, 200)
  const marker = `trace-${randomBytes(8).toString('hex')}`
  const error = { type: 'Crash', message: 'it broke', stack_trace: `${marker}\n${'  at frame\n'.repeat(5_000)}` }
  const job = await api.create({ queue: 'err', payload: { to: 'b@example.com' } })
  await api.claimOne('err', 'w1')
  t.equal((await api.ack({ job_id: job.id, worker_id: 'w1', status: 'failed', error })).status, 200)
  const again = await api.claimOne('err', 'w2')
  t.same(again.payload, { to: 'b@example.com' }, 'the retried attempt is handed its payload, read from the job_created')
  await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w2', progress: 0.5 })
  t.match(
    await api.getJob(job.id),
    { state: 'processing', attempt: 2, error, progress: 0.5 },
    'GET shows the last error, from the message that holds it',
  )

  const stream = eventsStreamName(h.config.namespace)
  const holding: string[] = []
  for (let seq = 1; ;) {
    const m = await h.runtime.nats.jsm.direct.getMessage(stream, { seq, next_by_subj: eventSubject(h.config.namespace, h.projectId, 'job', job.id) })
    if (m === null) break
    if (Buffer.from(m.data).includes(marker)) holding.push(m.header.get('Jobsvc-Event-Type'))
    seq = m.seq + 1
  }
  t.strictSame(holding, ['job_attempt_failed'], 'only the message that recorded the error holds it')
  const listed = await eventually(async () => {
    const item = (await h.request('GET', '/jobsvc/v1/jobs?queue=err')).body.data[0]
    return item?.progress === 0.5 ? item : null
  })
  t.strictSame(listed, await api.getJob(job.id), 'the list shows the same job, its error included')
})
