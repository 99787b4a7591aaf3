import t from 'tap'
import { ulid } from 'ulid'
import type { WebhookCommand } from '../../domain/webhook.ts'
import { webhookSubscriptions } from '../../projections/webhooks.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { webhookHandler } from '../../streams/aggregates.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, webhookSubscriptions)

const projectId = 'prj_webhooks'
const at = (minute: number) => `2024-06-01T11:${String(minute).padStart(2, '0')}:00.000Z`

const decide = (ref: Ref<'webhook'>, command: WebhookCommand) => bench.decide(webhookHandler, ref, command)
const create = (ref: Ref<'webhook'>) =>
  decide(ref, {
    type: 'create_webhook',
    data: { webhook_id: ref.id, project_id: projectId, url: 'https://hooks.example.test/a', events: ['job.failed'], secret_encrypted: 'sealed:1' },
    meta: { now: at(0) },
  })
const update = (ref: Ref<'webhook'>, minute: number, data: Extract<WebhookCommand, { type: 'update_webhook' }>['data']) =>
  decide(ref, { type: 'update_webhook', data, meta: { now: at(minute) } })
const rotate = (ref: Ref<'webhook'>, minute: number) =>
  decide(ref, { type: 'rotate_webhook_secret', data: { secret_encrypted: 'sealed:2' }, meta: { now: at(minute) } })
const remove = (ref: Ref<'webhook'>, minute: number) => decide(ref, { type: 'delete_webhook', data: {}, meta: { now: at(minute) } })

const newWebhook = (): Ref<'webhook'> => webhookHandler.ref(projectId, `whk_${ulid().toLowerCase()}`)
const row = async (id: string) => (await bench.sql`SELECT * FROM webhooks WHERE project_id = ${projectId} AND id = ${id}`)[0]

t.test('a subscription row follows the subscription, and never holds its secret', async (t) => {
  const ref = newWebhook()
  const created = await create(ref)
  await bench.project([created])
  const r = await row(ref.id)
  t.match(r, { url: 'https://hooks.example.test/a', is_active: true, deleted: false, updated_at: null, last_seq: created.seq })
  t.equal(r!.events, '["job.failed"]', 'the filter as JSON text')
  t.equal(r!.created_at.toISOString(), at(0))
  t.notOk(
    Object.keys(r!).some((column) => column.includes('secret')),
    'no secret column',
  )

  const updated = await update(ref, 1, { url: 'https://hooks.example.test/b', events: '*', is_active: false })
  await bench.project([updated])
  t.match(await row(ref.id), { url: 'https://hooks.example.test/b', events: '"*"', is_active: false, last_seq: updated.seq })

  const rotated = await rotate(ref, 2)
  await bench.project([rotated])
  t.equal((await row(ref.id))!.updated_at.toISOString(), at(2), 'a rotation shows only as a change')

  const deleted = await remove(ref, 3)
  await bench.project([deleted])
  t.match(await row(ref.id), { deleted: true, is_active: false, last_seq: deleted.seq }, 'a deleted subscription keeps its row')
})

t.test('re-delivering the same sequences changes nothing', async (t) => {
  const ref = newWebhook()
  await bench.redeliveryChangesNothing(t, [await create(ref), await update(ref, 1, { is_active: false })])
})

t.test("the queries: a project's live subscriptions, how many, and the active ones fan-out sends to", async (t) => {
  const other = 'prj_webhook_queries'
  const newIn = (): Ref<'webhook'> => webhookHandler.ref(other, `whk_${ulid().toLowerCase()}`)
  const createIn = (ref: Ref<'webhook'>, minute: number) =>
    decide(ref, {
      type: 'create_webhook',
      data: { webhook_id: ref.id, project_id: other, url: 'https://hooks.example.test/q', events: ['job.failed'], secret_encrypted: 'sealed:1' },
      meta: { now: at(minute) },
    })
  const [a, b, c] = [newIn(), newIn(), newIn()]
  await bench.project([await createIn(a, 0), await createIn(b, 1), await createIn(c, 2)])
  await bench.project([await update(b, 3, { is_active: false }), await remove(c, 4)])
  t.same(await webhookSubscriptions.active(bench.sql, other), [{ id: a.id, events: '["job.failed"]' }])
  t.same(
    (await webhookSubscriptions.ofProject(bench.sql, other)).map((r) => r.id),
    [a.id, b.id],
  )
  t.equal(await webhookSubscriptions.liveCount(bench.sql, other), 2)
  t.equal(await webhookSubscriptions.liveCount(bench.sql, 'prj_none'), 0)
})
