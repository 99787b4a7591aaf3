import t from 'tap'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { rebuildReadModels } from '../../services/roles/projector/rebuild.ts'
import { eventually, httpRequest, startHarness, type Harness } from '../support/harness.ts'
import { runReplay } from '../support/replay-process.ts'
import { projectionTables, readModels, tablesIn } from '../support/read-models.ts'

async function caughtUp(h: Harness): Promise<number | null> {
  const last = await h.runtime.store.lastSequence()
  return (await projectedThrough(h.runtime.sql, projections)) === last ? last : null
}

t.test('npm run replay, while the projector runs, rebuilds read models identical to the live ones', async (t) => {
  const h = await startHarness(t, import.meta.filename)
  const req = async (method: string, path: string, body?: unknown, expected = 200) => {
    const res = await h.request(method, path, body)
    if (res.status !== expected) throw new Error(`${method} ${path} answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body
  }
  const create = (body: Record<string, unknown>) =>
    req('POST', '/jobsvc/v1/jobs', { job_type: 'replay', payload: { a: 1, nested: { b: [1, 2.5, 'x'] } }, ...body }, 201)
  // A poll answers as soon as one job is claimable, so a few may be needed to claim `count`.
  const poll = async (queue: string, worker: string, count: number) => {
    const claimed: Array<{ id: string; attempt: number }> = []
    while (claimed.length < count) {
      const res = await req('POST', '/jobsvc/v1/workers/poll', {
        worker_id: worker,
        queues: [queue],
        capacity: count - claimed.length,
        wait_seconds: 5,
      })
      if (res.jobs.length === 0) throw new Error(`poll on ${queue} claimed ${claimed.length}, wanted ${count}`)
      claimed.push(...res.jobs)
    }
    return claimed
  }
  const ack = (jobId: string, worker: string, status: 'succeeded' | 'failed') =>
    req('POST', '/jobsvc/v1/workers/ack', {
      job_id: jobId,
      worker_id: worker,
      status,
      duration_ms: 12,
      ...(status === 'failed' ? { error: { type: 'Boom', message: 'it broke', stack_trace: 'at x' } } : {}),
    })

  // Succeeded, with tags, an idempotency key and reported progress.
  for (let i = 0; i < 3; i++) await create({ queue: 'q-ok', tags: { n: String(i) }, idempotency_key: `ok-${i}` })
  for (const job of await poll('q-ok', 'w-ok', 3)) {
    await req('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w-ok', progress: 0.5 })
    await ack(job.id, 'w-ok', 'succeeded')
  }
  // A failed attempt that is retried later (pending with a future run_at).
  await create({ queue: 'q-retry', max_attempts: 3 })
  const [retrying] = await poll('q-retry', 'w-retry', 1)
  t.equal((await ack(retrying!.id, 'w-retry', 'failed')).action, 'retry', 'a failed first attempt of three is retried')
  // Dead-lettered; one of them retried by hand and then succeeding on its second attempt.
  await create({ queue: 'q-dead', max_attempts: 1 })
  await create({ queue: 'q-dead', max_attempts: 1 })
  const dead = await poll('q-dead', 'w-dead', 2)
  for (const job of dead) t.equal((await ack(job.id, 'w-dead', 'failed')).action, 'done', 'a failed last attempt is dead-lettered')
  t.equal((await req('POST', `/jobsvc/v1/jobs/${dead[0]!.id}/retry`)).state, 'pending', 'a dead-lettered job retried by hand is pending')
  const [again] = await poll('q-dead', 'w-dead-2', 1)
  t.equal(again!.attempt, 2, 'the retried job is claimed for its second attempt')
  await ack(again!.id, 'w-dead-2', 'succeeded')
  // Cancelled while pending and while scheduled; one left scheduled far ahead; one promoted by the scheduler.
  const cancelPending = await create({ queue: 'q-cancel' })
  await req('POST', `/jobsvc/v1/jobs/${cancelPending.id}/cancel`)
  const later = new Date(Date.now() + 3_600_000).toISOString()
  const cancelScheduled = await create({ queue: 'q-cancel', run_at: later })
  await req('POST', `/jobsvc/v1/jobs/${cancelScheduled.id}/cancel`)
  await create({ queue: 'q-later', run_at: later })
  const soon = await create({ queue: 'q-soon', run_at: new Date(Date.now() + 200).toISOString() })
  // Continuations: activated by the parent's success, cancelled by its cancellation and by its dead-letter.
  const parentOk = await create({ queue: 'q-parent-ok' })
  const childOk = await create({ queue: 'q-child', parent_job_id: parentOk.id })
  const [p1] = await poll('q-parent-ok', 'w-parent', 1)
  await ack(p1!.id, 'w-parent', 'succeeded')
  const [c1] = await poll('q-child', 'w-child', 1)
  t.equal(c1!.id, childOk.id, "the parent's success made its continuation claimable")
  await ack(c1!.id, 'w-child', 'succeeded')
  const parentCancelled = await create({ queue: 'q-parent-cancel' })
  const childCancelled = await create({ queue: 'q-child', parent_job_id: parentCancelled.id })
  await req('POST', `/jobsvc/v1/jobs/${parentCancelled.id}/cancel`)
  const parentDead = await create({ queue: 'q-parent-dead', max_attempts: 1 })
  const childOfDead = await create({ queue: 'q-child', parent_job_id: parentDead.id })
  const [p3] = await poll('q-parent-dead', 'w-parent', 1)
  await ack(p3!.id, 'w-parent', 'failed')
  // A recurring schedule, and a second project with a job of its own.
  await req('POST', '/jobsvc/v1/workers/register', {
    worker_id: 'w-reg',
    queues: ['default'],
    job_types: ['nightly'],
    recurring_schedules: [{ job_type: 'nightly', cron_expression: '0 3 * * *', timezone: 'Europe/Paris' }],
  })
  const other = await h.newProject()
  const otherJob = await httpRequest(h.url, other.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'other', payload: {} })
  t.equal(otherJob.status, 201, 'a second project has a job of its own')

  await eventually(async () => (await req('GET', `/jobsvc/v1/jobs/${soon.id}`)).state === 'pending', 15_000, 'the scheduler to promote the due job')
  for (const [job, state] of [
    [childCancelled, 'cancelled'],
    [childOfDead, 'cancelled'],
    [dead[1], 'dead_letter'],
  ] as const) {
    t.equal((await req('GET', `/jobsvc/v1/jobs/${job!.id}`)).state, state, `${job!.id} is ${state}`)
  }
  const last = await eventually(() => caughtUp(h), 15_000, 'the projector to reach the end of the log')
  const live = await readModels(h.runtime.sql)
  t.same(tablesIn(live), projectionTables(), 'the comparison covers every read-model table')
  t.same(
    { jobs: live.jobs.length, projects: live.projects.length, api_keys: live.api_keys.length, recurring_jobs: live.recurring_jobs.length },
    { jobs: 17, projects: 2, api_keys: 2, recurring_jobs: 1 },
    'the live read models hold the whole history',
  )
  const states = await h.runtime.sql<{ state: string }[]>`SELECT DISTINCT state FROM jobs ORDER BY state`
  t.same(
    states.map((r) => r.state),
    ['cancelled', 'dead_letter', 'pending', 'scheduled', 'succeeded'],
    'the history reaches every state a job rests in',
  )

  // Damage the read models behind the projector's back: only a rebuild from the log repairs this,
  // so equal tables afterwards show that the replay rebuilt them rather than left them alone.
  const sql = h.runtime.sql
  await sql`DELETE FROM jobs WHERE id = ${childOk.id}`
  await sql`UPDATE jobs SET state = 'failed', payload = '{"damaged":true}' WHERE id = ${soon.id}`
  await sql`DELETE FROM recurring_jobs`
  await sql`UPDATE api_keys SET status = 'revoked' WHERE project_id = ${other.projectId}`
  await sql`INSERT INTO projects (id, name, plan, created_at, updated_at, last_seq) VALUES ('proj_bogus', 'bogus', 'free', now(), now(), 1)`
  await sql`UPDATE projection_checkpoints SET last_seq = last_seq + 1000 WHERE name = 'job-list'`
  t.not(JSON.stringify(await readModels(sql)), JSON.stringify(live), 'the read models were damaged')

  const replay = await runReplay(h)
  t.equal(replay.code, 0, 'the replay exits 0 while the projector runs (it stepped down)')
  t.match(replay.output, `read models rebuilt through sequence ${last}`, 'the replay read the whole log')
  t.equal(await h.runtime.store.lastSequence(), last, 'nothing was appended meanwhile')
  const rebuilt = await readModels(h.runtime.sql)
  t.same(rebuilt, live, 'every read-model table equals the live projection row by row')

  const after = await create({ queue: 'q-after' })
  const seen = await eventually(
    async () => {
      const list = await req('GET', '/jobsvc/v1/jobs?queue=q-after')
      return list.data.some((j: { id: string }) => j.id === after.id)
    },
    15_000,
    'the live projector to project a job created after the replay',
  )
  t.ok(seen, 'the live projector resumed after the replay')
  t.ok(await eventually(() => caughtUp(h), 15_000, 'the projector to catch up again'), 'its checkpoint reaches the end of the log')

  // Again under traffic: jobs are created, claimed and acked before, during and after the replay;
  // the claim path keeps writing rows, and the projector resumes from where the replay stopped.
  let busy = true
  const traffic = (async () => {
    for (let i = 0; busy; i++) await create({ queue: 'q-traffic', payload: { i } })
  })()
  const trafficWorker = (async () => {
    while (busy) {
      const res = await req('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-traffic', queues: ['q-traffic'], capacity: 5, wait_seconds: 0.2 })
      for (const job of res.jobs as Array<{ id: string }>) await ack(job.id, 'w-traffic', 'succeeded')
    }
  })()
  traffic.catch(() => undefined)
  trafficWorker.catch(() => undefined)
  await eventually(async () => (await req('GET', '/jobsvc/v1/jobs?queue=q-traffic&state=succeeded')).data.length > 0, 15_000, 'traffic to flow')
  const busyReplay = await runReplay(h)
  t.equal(busyReplay.code, 0, 'a replay under traffic exits 0')
  const busyThrough = Number(/rebuilt through sequence (\d+)/.exec(busyReplay.output)?.[1])
  await eventually(async () => (await h.runtime.store.lastSequence()) > busyThrough + 20, 15_000, 'traffic to go on after the replay')
  busy = false
  await Promise.all([traffic, trafficWorker])
  const busyLast = await eventually(() => caughtUp(h), 15_000, 'the projector to catch up after the traffic')
  t.comment(`replay under traffic rebuilt through ${busyThrough}; the log ended at ${busyLast}`)
  t.ok(busyLast > busyThrough, "events appended after the replay's end were projected by the resumed projector")
  const afterTraffic = await readModels(sql)
  t.same(
    (await sql<{ state: string }[]>`SELECT DISTINCT state FROM jobs WHERE queue = 'q-traffic' AND state NOT IN ('pending', 'succeeded')`).map(
      (r) => r.state,
    ),
    [],
    'traffic jobs are pending or succeeded, none left processing',
  )
  const reference = await rebuildReadModels(h.runtime, () => undefined)
  t.equal(reference.through, busyLast, 'the reference rebuild read the whole log')
  t.ok(
    reference.messages > 0 && reference.events >= reference.messages,
    `it counts what it projected (${reference.events} events in ${reference.messages} messages)`,
  )
  t.same(await readModels(sql), afterTraffic, 'read models after a replay under traffic equal a quiet rebuild row by row')
})
