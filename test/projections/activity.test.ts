import t from 'tap'
import { ulid } from 'ulid'
import type { JobCommand } from '../../domain/job.ts'
import type { ProjectCommand } from '../../domain/project/index.ts'
import type { UserCommand } from '../../domain/user.ts'
import { activityFeed } from '../../projections/activity.ts'
import { jobHandler, projectHandler, userHandler } from '../../streams/aggregates.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { createJobData } from '../support/job-commands.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, activityFeed)

const at = (minute: number) => `2024-06-01T13:${String(minute).padStart(2, '0')}:00.000Z`
const meta = (minute: number) => ({ now: at(minute) })

const rowsOf = (records: readonly EventRecord[]) => bench.sql`SELECT * FROM activity WHERE seq = ANY(${records.map((r) => r.seq)}) ORDER BY seq, id`
/** The activity id of the record's only event: the event's ULID. */
const idOf = (record: EventRecord) => record.message.events[0]!.id.replace(/^evt_/, '')

async function jobHistory() {
  const projectId = `prj_${ulid().toLowerCase()}`
  const ref = jobHandler.ref(projectId, `job_${ulid().toLowerCase()}`)
  const decide = (command: JobCommand) => bench.decide(jobHandler, ref, command)
  const created = await decide({ type: 'create_job', data: createJobData({ job_id: ref.id, project_id: projectId, queue: 'mail' }), meta: meta(0) })
  const cancelled = await decide({ type: 'cancel_job', data: {}, meta: meta(1) })
  return { ref, projectId, created, cancelled }
}

t.test('a job: a row for its creation and its cancellation, in its project', async (t) => {
  const { ref, projectId, created, cancelled } = await jobHistory()
  await bench.project([created, cancelled])
  const rows = await rowsOf([created, cancelled])
  t.match(rows, [
    {
      id: idOf(created),
      project_id: projectId,
      user_id: null,
      kind: 'job_created',
      target_type: 'job',
      target_id: ref.id,
      summary: 'Job email created in queue mail',
    },
    {
      id: idOf(cancelled),
      project_id: projectId,
      user_id: null,
      kind: 'job_cancelled',
      target_type: 'job',
      target_id: ref.id,
      summary: 'Job cancelled (requested)',
    },
  ])
  t.same(
    rows.map((r) => JSON.parse(r.metadata)),
    [{ job_type: 'email', queue: 'mail' }, { reason: 'requested' }],
  )
  t.same(
    rows.map((r) => r.created_at.toISOString()),
    [at(0), at(1)],
    'the time of the event',
  )
  t.same(
    rows.map((r) => Number(r.seq)),
    [created.seq, cancelled.seq],
  )
})

t.test('a change a member asked for through their session names them: the actor column and the metadata', async (t) => {
  const projectId = `prj_${ulid().toLowerCase()}`
  const ref = jobHandler.ref(projectId, `job_${ulid().toLowerCase()}`)
  const actor = { user_id: `usr_${ulid().toLowerCase()}`, email: 'member@example.com' }
  const decide = (command: JobCommand) => bench.decide(jobHandler, ref, command)
  const created = await decide({ type: 'create_job', data: createJobData({ job_id: ref.id, project_id: projectId, queue: 'mail' }), meta: meta(0) })
  const cancelled = await decide({ type: 'cancel_job', data: {}, meta: { ...meta(1), actor } })
  t.same(cancelled.message.events[0]!.actor, actor, 'the stored event carries the member')
  t.equal(created.message.events[0]!.actor, undefined, 'and one asked for by a key none')
  await bench.project([created, cancelled])
  const rows = await rowsOf([created, cancelled])
  t.same(
    rows.map((r) => [r.kind, r.user_id, JSON.parse(r.metadata)]),
    [
      ['job_created', null, { job_type: 'email', queue: 'mail' }],
      ['job_cancelled', actor.user_id, { reason: 'requested', actor }],
    ],
  )
})

t.test('a running job cancelled (issue 28): one job_cancelled row when it is asked for, naming the member; none at its end', async (t) => {
  const projectId = `prj_${ulid().toLowerCase()}`
  const ref = jobHandler.ref(projectId, `job_${ulid().toLowerCase()}`)
  const actor = { user_id: `usr_${ulid().toLowerCase()}`, email: 'member@example.com' }
  const decide = (command: JobCommand) => bench.decide(jobHandler, ref, command)
  const created = await decide({ type: 'create_job', data: createJobData({ job_id: ref.id, project_id: projectId, queue: 'mail' }), meta: meta(0) })
  const claimed = await decide({ type: 'claim_job', data: { worker_id: 'w1' }, meta: meta(1) })
  const asked = await decide({ type: 'cancel_job', data: { include_running: true }, meta: { ...meta(2), actor } })
  const ended = await decide({
    type: 'ack_job',
    data: { worker_id: 'w1', status: 'failed', duration_ms: 10, error: null },
    meta: meta(3),
  })
  t.equal((ended.message.state as { state: string } | null)?.state, 'cancelled')
  await bench.project([created, claimed, asked, ended])
  const rows = await rowsOf([claimed, asked, ended])
  t.same(
    rows.map((r) => [r.kind, r.user_id, JSON.parse(r.metadata)]),
    [['job_cancelled', actor.user_id, { reason: 'requested', running: true, actor }]],
  )
  t.equal(rows[0]!.summary, 'Job cancelled while running (attempt 1); its worker is told to stop')
})

t.test('a project: its own id is the project; events that are no activity kind give no row', async (t) => {
  const id = `prj_${ulid().toLowerCase()}`
  const ref = projectHandler.ref(id)
  const decide = (command: ProjectCommand) => bench.decide(projectHandler, ref, command)
  const key = { prefix: `jobsvc_test_${ulid().slice(-12).toLowerCase()}`, key_hash: 'a'.repeat(64) }
  const created = await decide({ type: 'create_project', data: { project_id: id, name: 'Acme', plan: 'pro', owner_email: null, key }, meta: meta(0) })
  const renamed = await decide({ type: 'rename_project', data: { actor_user_id: null, name: 'Acme Two' }, meta: meta(1) })
  await bench.project([created, renamed])
  t.same(await rowsOf([created]), [], 'project_created and api_key_issued are not activity kinds')
  const [row] = await rowsOf([renamed])
  t.match(row, {
    project_id: id,
    user_id: null,
    kind: 'project_renamed',
    target_type: 'project',
    target_id: id,
    summary: 'Project renamed to Acme Two',
  })
  t.same(JSON.parse(row!.metadata), { previous_name: 'Acme', name: 'Acme Two' })
})

t.test('a user: account kinds carry the user and no project', async (t) => {
  const ref = userHandler.ref(`usr_${ulid().toLowerCase()}`)
  const signUp: UserCommand = {
    type: 'sign_up',
    data: {
      user_id: ref.id,
      email: 'ada@example.test',
      password_hash: 'scrypt$x',
      plan: 'free',
      verification: { token_hash: 'v'.repeat(64), expires_at: at(59) },
    },
    meta: meta(0),
  }
  const signedUp = await bench.decide(userHandler, ref, signUp)
  await bench.project([signedUp])
  const rows = await rowsOf([signedUp])
  t.match(rows, [{ project_id: null, user_id: ref.id, kind: 'terms_accepted', target_type: 'user', target_id: ref.id, metadata: null }])
  t.equal(rows[0]!.id, signedUp.message.events[1]!.id.replace(/^evt_/, ''), 'the row of the second event of the message')
})

t.test("a suspension by staff: a row on each of the user's projects, naming who acted", async (t) => {
  const ref = userHandler.ref(`usr_${ulid().toLowerCase()}`)
  const decide = (command: UserCommand) => bench.decide(userHandler, ref, command)
  await decide({
    type: 'sign_up',
    data: { user_id: ref.id, email: 'bo@example.test', password_hash: 'x', plan: 'free', verification: { token_hash: 'v', expires_at: at(59) } },
    meta: meta(0),
  })
  const projects = [`prj_${ulid().toLowerCase()}`, `prj_${ulid().toLowerCase()}`]
  for (const project_id of projects) await decide({ type: 'join_project', data: { project_id }, meta: meta(1) })
  const suspended = await decide({ type: 'suspend_user', data: { staff_user_id: 'usr_staff' }, meta: meta(2) })
  await bench.project([suspended])
  const rows = await rowsOf([suspended])
  t.same(
    rows.map((r) => [r.project_id, r.user_id, r.kind, r.target_id]).sort(),
    projects.map((p) => [p, 'usr_staff', 'admin_user_suspended', ref.id]).sort(),
  )
  t.same(rows.map((r) => r.id).sort(), projects.map((p) => `${idOf(suspended)}.${p}`).sort(), 'one id per project')
})

t.test('re-delivering the same sequences changes nothing', async (t) => {
  const { created, cancelled } = await jobHistory()
  await bench.redeliveryChangesNothing(t, [created, cancelled])
})

t.test("page: a project's activity newest first, the targets a role may see, and a cursor that continues", async (t) => {
  const { projectId, created, cancelled } = await jobHistory()
  await bench.project([created, cancelled])
  const first = await activityFeed.page(bench.sql, projectId, null, null, 1)
  t.same(
    first.rows.map((r) => r.kind),
    ['job_cancelled'],
  )
  t.equal(first.hasMore, true)
  const last = first.rows[0]!
  const rest = await activityFeed.page(bench.sql, projectId, null, { created_at: last.created_at.toISOString(), id: last.id }, 10)
  t.same(
    rest.rows.map((r) => r.kind),
    ['job_created'],
  )
  t.equal(rest.hasMore, false)
  t.same((await activityFeed.page(bench.sql, projectId, ['alert'], null, 10)).rows, [], 'only the target types asked for')
  t.equal((await activityFeed.page(bench.sql, projectId, ['job'], null, 10)).rows.length, 2)
})
