import t from 'tap'
import { openSql } from '../../projections/database.ts'
import { startApiProcess } from '../support/api-process.ts'
import { answerWithin, eventually, httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'
import { lockJobsTable } from '../support/read-models.ts'

/**
 * One tenant's long polls must not take the Postgres pool (20 connections per process) that
 * every tenant's polls and reads share. The API is built here rather than by the harness so the
 * test can count the poll requests the server has received.
 *
 * Polls claim from the ready index, which needs no connection; they ask Postgres only for queues
 * the index cannot vouch for. Here it cannot: the projector is stopped after the log has moved
 * on, so the index cannot be warmed from the read model (its snapshot would predate what the
 * index started following), as when the projector lags the log under load. Every poll then runs
 * the read-model query, and that is what the claim line bounds.
 *
 * The claim transactions are made to block where the test can see them: a separate connection
 * holds `LOCK TABLE jobs IN EXCLUSIVE MODE`, which stops every `SELECT … FOR UPDATE` (and every
 * write) on the jobs table but lets plain reads through. A claim that reached Postgres then sits
 * in `pg_locks` holding its pooled connection, exactly as a slow claim would, and the number of
 * them is what one project's polls hold of the pool.
 */

const pollsOfA = 50
const h = await startHarness(t, import.meta.filename, { roles: ['projector'], tunables: { max_polls_per_project: pollsOfA } })
const perProject = h.config.tunables.claim_transactions_per_project

const { app, context, url, stop } = await startApiProcess(t, h.runtime)
let pollRequests = 0
app.server.on('request', (req) => {
  if (req.url === '/jobsvc/v1/workers/poll') pollRequests++
})

const observer = openSql(h.config.databaseUrl, { max: 2, applicationName: 'poll-fairness-observer' })
t.teardown(() => observer.end({ timeout: 5 }))

/** Backends of this database waiting for a lock on the jobs table: claims that hold a pooled connection. */
async function claimsBlocked(): Promise<number> {
  const [row] = await observer<{ n: number }[]>`
    SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
    WHERE NOT l.granted AND l.locktype = 'relation' AND d.datname = current_database() AND l.relation = 'jobs'::regclass`
  return row!.n
}

t.test("a project's waiting polls (more than the pool) leave another project's polls and reads their connections", async (t) => {
  const b = await h.newProject()
  const asB = (method: string, path: string, body?: unknown) => httpRequest(url, b.apiKey, method, path, body)
  const asA = (method: string, path: string, body?: unknown) => httpRequest(url, h.apiKey, method, path, body)
  const created = await asB('POST', '/jobsvc/v1/jobs', { job_type: 'b-work', queue: 'b-q', payload: {} })
  t.equal(created.status, 201)
  const before = await asB('GET', '/jobsvc/v1/jobs?limit=10')
  t.same(
    before.body.data.map((j: any) => j.id),
    [created.body.id],
    "B's job is in the read model before the lock",
  )

  await h.stopRole('projector')
  const c = await h.newProject()
  const moved = await httpRequest(url, c.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'c-work', queue: 'c-q', payload: {} })
  t.equal(moved.status, 201, 'the log moves on without the projector')
  await eventually(async () => context.ready.position >= Number(moved.headers.get('x-event-seq')), 15_000, 'the index to follow it')

  const release = await lockJobsTable(observer, t)

  let answeredA = 0
  const pollsA: Array<Promise<HttpResponse>> = []
  for (let i = 0; i < pollsOfA; i++) {
    pollsA.push(asA('POST', '/jobsvc/v1/workers/poll', { worker_id: `a-${i}`, queues: ['a-q'], wait_seconds: 30 }).finally(() => answeredA++))
  }
  await eventually(async () => pollRequests === pollsOfA, 15_000, `the server received A's ${pollsOfA} polls`)
  await eventually(
    async () => context.claims.served(h.projectId) + context.claims.waiting(h.projectId) === pollsOfA,
    15_000,
    'every poll of A is claiming or waiting for its turn',
  )
  await eventually(async () => (await claimsBlocked()) === context.claims.running(h.projectId), 15_000, "A's running claims reached Postgres")
  t.notOk(context.ready.isComplete(h.projectId, ['a-q']), "the index cannot vouch for A's queue")

  const listB = await answerWithin(asB('GET', '/jobsvc/v1/jobs?limit=10'))
  t.not(listB, 'pending', "B's jobs list answers while A's polls wait")
  if (listB === 'pending') return
  t.equal(listB.status, 200)
  t.same(
    listB.body.data.map((j: any) => j.id),
    [created.body.id],
  )
  const activityB = await answerWithin(asB('GET', '/jobsvc/v1/activity?limit=5'))
  t.not(activityB, 'pending', "B's activity feed answers too")
  t.equal(answeredA, 0, "none of A's polls has answered: they all still wait")

  const heldByA = await claimsBlocked()
  t.ok(heldByA >= 1 && heldByA <= perProject, `A's ${pollsOfA} polls hold ${heldByA} connections, at most ${perProject}`)
  t.equal(context.claims.running(h.projectId), heldByA, 'as many as A has claim transactions running')
  t.equal(context.claims.waiting(h.projectId), pollsOfA - context.claims.served(h.projectId), "A's other polls wait their turn in memory")

  const extraA = await answerWithin(asA('POST', '/jobsvc/v1/workers/poll', { worker_id: 'a-extra', queues: ['a-q'], wait_seconds: 30 }))
  t.not(extraA, 'pending', `A's poll number ${pollsOfA + 1} is answered at once`)
  if (extraA === 'pending') return
  t.equal(extraA.status, 429)
  t.equal(extraA.body.error.code, 'rate_limit_exceeded')
  t.equal(extraA.headers.get('retry-after'), '2')

  const pollB = asB('POST', '/jobsvc/v1/workers/poll', { worker_id: 'b-1', queues: ['b-q'], wait_seconds: 30 })
  await eventually(async () => (await claimsBlocked()) === heldByA + 1, 15_000, "B's claim reached Postgres beside A's")

  await release()
  const claimedB = await pollB
  t.equal(claimedB.status, 200)
  t.same(
    claimedB.body.jobs.map((j: any) => j.id),
    [created.body.id],
    "B's poll claims B's job",
  )
  await eventually(
    async () => context.claims.running(h.projectId) === 0 && context.claims.waiting(h.projectId) === 0,
    15_000,
    "A's claims ran once the lock was gone",
  )
  t.equal(answeredA, 0, "A's polls, with nothing to claim, keep waiting")

  await stop()
  const answers = await Promise.all(pollsA)
  t.same(
    answers.map((r) => `${r.status} ${r.body?.error?.code}`),
    answers.map(() => '503 service_unavailable'),
    'shutdown ends every waiting poll of A with 503',
  )
  t.equal(context.polls.held(h.projectId), 0, "and frees every slot of A's")
  t.equal(context.polls.held(b.projectId), 0, "and of B's")
})
