import { readFileSync } from 'node:fs'
import { headers as natsHeaders } from '@nats-io/transport-node'
import { pino } from 'pino'
import t from 'tap'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import * as api from '../../services/roles/api/index.ts'
import * as projector from '../../services/roles/projector/index.ts'
import { rebuildReadModels } from '../../services/roles/projector/rebuild.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import { encodeFeedCursor } from '../../services/use-cases/events/feed-cursor.ts'
import { decode } from '../../streams/codec.ts'
import { JetStreamPublisher } from '../../streams/publisher.ts'
import type { FixtureMessage } from '../support/write-log-v1-fixture.ts'
import { eventually, httpRequest, isolatedNames, removeIsolated, testConfig } from '../support/harness.ts'
import { readModels } from '../support/read-models.ts'

/**
 * Logs written before payloads, errors and progress were kept once (test/fixtures/log-v1: every
 * message of a few jobs, a project, a schedule and a webhook, as the code of 82ef59b stored them,
 * with what that code answered) still load, project, answer and move on: published into a fresh
 * namespace, the read models are built from them, every job reads as it did, and the jobs left
 * pending, processing or waiting are claimed, reported on and acknowledged.
 */

const fixtureDir = new URL('../fixtures/log-v1/', import.meta.url)
const messages = readFileSync(new URL('messages.jsonl', fixtureDir), 'utf8')
  .trim()
  .split('\n')
  .map((line) => JSON.parse(line) as FixtureMessage)
const recorded = JSON.parse(readFileSync(new URL('answers.json', fixtureDir), 'utf8')) as {
  namespace: string
  project_id: string
  api_key: string
  jobs: Record<string, string>
  job: Record<string, Record<string, unknown>>
  history: Record<string, unknown>
  list: unknown
}

const names = isolatedNames(import.meta.filename)
const config = testConfig(names, { validate_responses: true })
t.teardown(() => removeIsolated(names))
const runtime = await openRuntime(config, pino({ level: 'silent' }), 'jobsvc-test')
t.teardown(() => runtime.close())

// The messages go in as they were stored, at the same sequences (so the expected sequences they
// carry still hold), on this namespace's subjects. No role runs yet: nothing else is appended.
const publisher = new JetStreamPublisher(runtime.nats.nc)
for (const m of messages) {
  const h = natsHeaders()
  for (const [name, value] of Object.entries(m.headers)) h.set(name, value)
  const subject = `${names.namespace}${m.subject.slice(recorded.namespace.length)}`
  const { seq } = await publisher.publish(subject, Buffer.from(m.data, 'base64'), h)
  if (seq !== m.seq) throw new Error(`message ${m.seq} was stored at ${seq}`)
}
publisher.close()

t.teardown(await projector.start(runtime))
const role = await api.start(runtime)
t.teardown(role.stop)

const request = (method: string, path: string, body?: unknown) => httpRequest(role.address, recorded.api_key, method, path, body)
async function ok(method: string, path: string, body?: unknown): Promise<any> {
  const res = await request(method, path, body)
  if (res.status !== 200 && res.status !== 201) throw new Error(`${method} ${path} answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}
const caughtUp = async () => {
  const last = await runtime.store.lastSequence()
  return (await projectedThrough(runtime.sql, projections)) >= last ? last : null
}
const jobs = recorded.jobs
const getJob = (name: string) => ok('GET', `/jobsvc/v1/jobs/${jobs[name]}`)
const claimFrom = async (queue: string, worker: string) => {
  const polled = await ok('POST', '/jobsvc/v1/workers/poll', { worker_id: worker, queues: [queue], wait_seconds: 5 })
  t.equal(polled.jobs.length, 1, `one job claimed from ${queue}`)
  return polled.jobs[0]
}

await eventually(caughtUp, 30_000, 'the projector to read the old log')

/**
 * What the code that wrote the log answered, plus the fields added since, as they read on jobs of
 * that log: `result` (issue 26) is null, since no ack of that time carried one.
 */
const withNewFields = (job: object) => ({ ...job, result: null })

type HistoryEntry = { sequence: number; cursor?: string }

/**
 * A recorded history page with the field added since: each event's `cursor` in the event feed
 * (issue 27), its message's sequence and its index there, the last event of a message naming the
 * whole message.
 */
function withCursors(page: { data: HistoryEntry[] }): object {
  return {
    ...page,
    data: page.data.map((e, i, all) => {
      const index = all.slice(0, i).filter((o) => o.sequence === e.sequence).length
      const last = all[i + 1]?.sequence !== e.sequence
      return { ...e, cursor: encodeFeedCursor(recorded.project_id, { seq: e.sequence, index: last ? 'all' : index }) }
    }),
  }
}

t.test('every job, its history and the list read as the code that wrote them answered', async (t) => {
  for (const name of Object.keys(jobs)) {
    t.strictSame(await getJob(name), withNewFields(recorded.job[name]!), `GET ${name}`)
    t.strictSame(
      await ok('GET', `/jobsvc/v1/jobs/${jobs[name]}/history?limit=500`),
      withCursors(recorded.history[name] as { data: HistoryEntry[] }),
      `history of ${name}`,
    )
  }
  const list = recorded.list as { data: object[] }
  t.strictSame(
    await ok('GET', '/jobsvc/v1/jobs?limit=100'),
    { ...list, data: list.data.map(withNewFields) },
    'the list, from the read model built from the old log',
  )
})

/** The whole job each message of the old log carried (schema 1: payload, last error and progress inline), by sequence. */
const storedStates = new Map(messages.map((m) => [m.seq, (decode(Buffer.from(m.data, 'base64')) as { state: Record<string, unknown> | null }).state]))

t.test('each job of the old log reads, as of each of its events, as the message of that event stored it', async (t) => {
  const compared = [
    'state',
    'attempt',
    'max_attempts',
    'run_at',
    'started_at',
    'completed_at',
    'worker_id',
    'duration_ms',
    'payload',
    'error',
    'progress',
    'tags',
  ]
  for (const name of Object.keys(jobs)) {
    const history = (await ok('GET', `/jobsvc/v1/jobs/${jobs[name]}/history?limit=500`)) as {
      data: Array<{ sequence: number; cursor: string; type: string }>
    }
    for (const event of history.data) {
      const answer = await ok('GET', `/jobsvc/v1/jobs/${jobs[name]}?as_of=${encodeURIComponent(event.cursor)}`)
      const stored = storedStates.get(event.sequence)
      if (event.type === 'job_progressed' || stored === null || stored === undefined) continue
      for (const field of compared) t.strictSame(answer[field], stored[field], `${name} as of ${event.type} (${event.sequence}): ${field}`)
    }
    const { as_of: _point, ...latest } = await ok('GET', `/jobsvc/v1/jobs/${jobs[name]}?as_of=${encodeURIComponent(history.data.at(-1)!.cursor)}`)
    t.strictSame(latest, await getJob(name), `${name} as of its last event is ${name} now`)
  }
})

t.test('jobs of the old log are claimed, reported on and acknowledged', async (t) => {
  // Processing, with progress on its own subject: a new report, then the ack of the old claim.
  await ok('POST', '/jobsvc/v1/workers/heartbeat', { job_id: jobs.processing, worker_id: 'w-running', progress: 0.5 })
  t.equal((await getJob('processing')).progress, 0.5, 'a new report replaces the progress the old state carried')
  t.strictSame(await ok('POST', '/jobsvc/v1/workers/ack', { job_id: jobs.processing, worker_id: 'w-running', status: 'succeeded' }), {
    action: 'done',
  })
  t.match(await getJob('processing'), { state: 'succeeded', progress: 0.5, payload: recorded.job.processing!.payload, error: null })

  // Failed once (its state carries its error inline): claimed again with its payload, and the error stays until it succeeds.
  const retrying = await claimFrom('q-retry', 'w-new')
  t.match(retrying, { id: jobs.retrying, attempt: 2, payload: recorded.job.retrying!.payload })
  t.match(await getJob('retrying'), { state: 'processing', progress: null, error: recorded.job.retrying!.error })
  const error = { type: 'Again', message: 'a second failure', stack_trace: 'at y' }
  t.equal((await ok('POST', '/jobsvc/v1/workers/ack', { job_id: jobs.retrying, worker_id: 'w-new', status: 'failed', error })).action, 'retry')
  t.match(await getJob('retrying'), { state: 'pending', error, attempt: 2 })

  // Retried by hand before the upgrade: pending at attempt 1.
  t.match(await claimFrom('q-retried', 'w-new'), { id: jobs.retried, attempt: 2, payload: recorded.job.retried!.payload })
  await ok('POST', '/jobsvc/v1/workers/ack', { job_id: jobs.retried, worker_id: 'w-new', status: 'succeeded' })

  // Dead-lettered before the upgrade, retried after it.
  t.equal((await ok('POST', `/jobsvc/v1/jobs/${jobs.deadLetter}/retry`)).state, 'pending')
  t.match(await getJob('deadLetter'), { state: 'pending', error: null, progress: null })
  t.match(await claimFrom('q-dead', 'w-new'), { id: jobs.deadLetter, attempt: 2, payload: recorded.job.deadLetter!.payload })
  await ok('POST', '/jobsvc/v1/workers/ack', { job_id: jobs.deadLetter, worker_id: 'w-new', status: 'succeeded' })

  // A parent created before the upgrade activates its waiting continuation when it succeeds after it.
  t.match(await claimFrom('q-parent2', 'w-new'), { id: jobs.parentPending })
  t.strictSame(await ok('POST', '/jobsvc/v1/workers/ack', { job_id: jobs.parentPending, worker_id: 'w-new', status: 'succeeded' }), {
    action: 'done',
    children_activated: 1,
  })
  t.match(await claimFrom('q-child2', 'w-new'), { id: jobs.childWaiting, payload: recorded.job.childWaiting!.payload })
  await ok('POST', '/jobsvc/v1/workers/ack', { job_id: jobs.childWaiting, worker_id: 'w-new', status: 'succeeded' })

  // The continuation activated before the upgrade, and the recurring occurrence.
  t.match(await claimFrom('q-child', 'w-new'), { id: jobs.childActivated, payload: recorded.job.childActivated!.payload })
  t.match(await claimFrom('q-recurring', 'w-new'), { id: jobs.recurring, payload: recorded.job.recurring!.payload })
})

t.test('after the new messages, every job reads the same from the log and from the list, and a replay rebuilds the same', async (t) => {
  await eventually(caughtUp, 30_000, 'the projector to reach the new messages')
  const listed = new Map<string, unknown>((await ok('GET', '/jobsvc/v1/jobs?limit=100')).data.map((j: { id: string }) => [j.id, j]))
  for (const name of Object.keys(jobs)) t.strictSame(listed.get(jobs[name]!), await getJob(name), `${name}: the list item is the single read`)
  const live = await readModels(runtime.sql)
  await rebuildReadModels(runtime, () => undefined)
  t.strictSame(await readModels(runtime.sql), live, 'a replay of the old and new messages rebuilds the live read models')
})
