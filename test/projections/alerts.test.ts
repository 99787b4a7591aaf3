import t from 'tap'
import { ulid } from 'ulid'
import type { AlertCommand, AlertSettings } from '../../domain/alert.ts'
import { alertSettings } from '../../projections/alerts.ts'
import type { Ref } from '../../streams/aggregate-handler.ts'
import { alertHandler } from '../../streams/aggregates.ts'
import { sampleAlertSettings } from '../support/aggregate-samples.ts'
import { openProjectionBench } from '../support/projection-bench.ts'

const bench = await openProjectionBench(t, import.meta.filename, alertSettings)

const projectId = 'prj_alerts'
const settings = sampleAlertSettings
const at = (minute: number) => `2024-06-01T10:${String(minute).padStart(2, '0')}:00.000Z`

const decide = (ref: Ref<'alert'>, command: AlertCommand) => bench.decide(alertHandler, ref, command)
const create = (ref: Ref<'alert'>, minute: number) =>
  decide(ref, { type: 'create_alert', data: { ...settings, alert_id: ref.id, project_id: projectId }, meta: { now: at(minute) } })
const update = (ref: Ref<'alert'>, minute: number, over: Partial<AlertSettings>) =>
  decide(ref, { type: 'update_alert', data: { ...settings, ...over }, meta: { now: at(minute) } })
const evaluate = (ref: Ref<'alert'>, minute: number, value: number) =>
  decide(ref, { type: 'record_evaluation', data: { value }, meta: { now: at(minute) } })
const remove = (ref: Ref<'alert'>, minute: number) => decide(ref, { type: 'delete_alert', data: {}, meta: { now: at(minute) } })

const newAlert = (): Ref<'alert'> => alertHandler.ref(projectId, `alr_${ulid().toLowerCase()}`)
const row = async (id: string) => (await bench.sql`SELECT * FROM alerts WHERE project_id = ${projectId} AND id = ${id}`)[0]

t.test('an alert row follows the alert: created, triggered, resolved, updated, deleted', async (t) => {
  const ref = newAlert()
  const created = await create(ref, 0)
  await bench.project([created])
  const r = await row(ref.id)
  t.match(r, {
    name: 'deep queue',
    kind: 'queue_depth',
    queue: 'q1',
    window_minutes: 60,
    webhook: false,
    enabled: true,
    status: 'ok',
    deleted: false,
  })
  t.equal(Number(r!.threshold), 2)
  t.same(r!.email, ['ops@example.com'])
  t.match(r, { last_value: null, last_triggered_at: null, last_resolved_at: null, last_seq: created.seq })
  t.equal(r!.created_at.toISOString(), at(0))

  const triggered = await evaluate(ref, 1, 5)
  await bench.project([triggered])
  t.match(await row(ref.id), { status: 'firing', last_value: 5, last_seq: triggered.seq })
  t.equal((await row(ref.id))!.last_triggered_at.toISOString(), at(1))

  const resolved = await evaluate(ref, 2, 1)
  const updated = await update(ref, 3, { threshold: 50, enabled: false, email: [] })
  await bench.project([resolved, updated])
  const after = await row(ref.id)
  t.match(after, { status: 'ok', last_value: 1, enabled: false, last_seq: updated.seq }, 'one batch: the newest message wins')
  t.equal(Number(after!.threshold), 50)
  t.same(after!.email, [])
  t.equal(after!.last_resolved_at.toISOString(), at(2))
  t.equal(after!.updated_at.toISOString(), at(3))

  const deleted = await remove(ref, 4)
  await bench.project([deleted])
  t.match(await row(ref.id), { deleted: true, last_seq: deleted.seq }, 'a deleted alert keeps its row')
})

t.test('re-delivering the same sequences changes nothing', async (t) => {
  const ref = newAlert()
  await bench.redeliveryChangesNothing(t, [await create(ref, 0), await evaluate(ref, 1, 3)])
})
