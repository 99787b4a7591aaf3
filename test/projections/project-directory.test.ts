import t from 'tap'
import { ulid } from 'ulid'
import { fold } from '../../domain/decider.ts'
import { projectDecider, type Project, type ProjectEvent } from '../../domain/project/index.ts'
import { applyBatch } from '../../projections/checkpoints.ts'
import { projectDirectory, upsertProjectRows } from '../../projections/project-directory.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { projectHandler } from '../../streams/aggregates.ts'
import type { EventRecord } from '../../streams/event-store.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

const { sql, store } = await openIsolatedStore(t, import.meta.filename)

const newEventId = () => `evt_${ulid()}`
const keyPrefix = () => `jobsvc_test_${ulid().slice(-12).toLowerCase()}`

async function createProject(): Promise<{ ref: Ref<'project'>; created: EventRecord; prefix: string }> {
  const id = `prj_${ulid().toLowerCase()}`
  const ref = projectHandler.ref(id)
  const prefix = keyPrefix()
  await projectHandler.decide({ store, newUlid: ulid }, ref, {
    type: 'create_project',
    data: { project_id: id, name: 'Acme', plan: 'pro', owner_email: 'ops@acme.test', key: { prefix, key_hash: 'a'.repeat(64) } },
    meta: { now: '2024-05-01T10:00:00.000Z' },
  })
  return { ref, created: (await store.history(ref)).at(-1)!, prefix }
}

/** A second key issued to an existing project, appended as the decider would fold it. */
async function issueKey(ref: Ref<'project'>, created: EventRecord): Promise<{ record: EventRecord; prefix: string }> {
  const prefix = keyPrefix()
  const event: ProjectEvent = { type: 'api_key_issued', data: { prefix, key_hash: 'b'.repeat(64), issued_at: '2024-05-02T10:00:00.000Z' } }
  const state = fold(projectDecider, created.message.state as Project, [event])
  await store.append(ref, [{ ...event, id: newEventId(), time: event.data.issued_at }], state, created.seq)
  return { record: (await store.history(ref)).at(-1)!, prefix }
}

const projectRow = async (id: string) => (await sql`SELECT *, xmin::text AS version FROM projects WHERE id = ${id}`)[0]
const keyRows = (id: string) => sql`SELECT *, xmin::text AS version FROM api_keys WHERE project_id = ${id} ORDER BY issued_at`

t.test('project_created and api_key_issued give a project row and its key', async (t) => {
  const { ref, created, prefix } = await createProject()
  t.same(
    created.message.events.map((e) => e.type),
    ['project_created', 'api_key_issued'],
    'one message carries both events',
  )
  await applyBatch(sql, [projectDirectory], [created])
  const p = await projectRow(ref.id)
  t.match(p, { id: ref.id, name: 'Acme', plan: 'pro', owner_email: 'ops@acme.test', last_seq: created.seq })
  t.equal(p!.created_at.toISOString(), '2024-05-01T10:00:00.000Z')
  const keys = await keyRows(ref.id)
  t.equal(keys.length, 1)
  t.match(keys[0], { prefix, project_id: ref.id, key_hash: 'a'.repeat(64), status: 'active', expires_at: null, last_seq: created.seq })
  t.equal(keys[0]!.issued_at.toISOString(), '2024-05-01T10:00:00.000Z')
})

t.test('re-delivering the same sequence changes nothing', async (t) => {
  const { ref, created } = await createProject()
  await upsertProjectRows(sql, [created])
  const [project, keys] = [await projectRow(ref.id), await keyRows(ref.id)]
  await upsertProjectRows(sql, [created])
  await sql.begin((tx) => projectDirectory.apply(tx, [created]))
  t.same(await projectRow(ref.id), project, 'the project row keeps its version')
  t.same(await keyRows(ref.id), keys, 'the keys are not deleted and re-inserted')
})

t.test('a newer message replaces the key set; an older one after it is ignored', async (t) => {
  const { ref, created, prefix } = await createProject()
  const second = await issueKey(ref, created)
  await upsertProjectRows(sql, [created])
  await upsertProjectRows(sql, [second.record])
  t.same(
    (await keyRows(ref.id)).map((k) => k.prefix),
    [prefix, second.prefix],
  )
  t.ok((await keyRows(ref.id)).every((k) => k.last_seq === second.record.seq))
  await upsertProjectRows(sql, [created])
  t.same(
    (await keyRows(ref.id)).map((k) => k.prefix),
    [prefix, second.prefix],
    'the older message did not drop the second key',
  )
  t.equal((await projectRow(ref.id))!.last_seq, second.record.seq)
})

t.test('messages of other aggregates leave the directory alone', async (t) => {
  const { created } = await createProject()
  const before = await sql`SELECT count(*)::int AS n FROM projects`
  await upsertProjectRows(sql, [{ ...created, message: { ...created.message, aggregate: 'job' } }])
  t.same(await sql`SELECT count(*)::int AS n FROM projects`, before)
})
