import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { AlertAlreadyExists, AlertNotFound } from '../../domain/errors.ts'
import { alertDecider, type AlertAggregate, type AlertCommand, type AlertEvent, type AlertSettings } from '../../domain/alert.ts'
import { sampleAlertSettings } from '../support/aggregate-samples.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = '2025-03-01T12:00:00.000Z'
const t1 = '2025-03-01T12:05:00.000Z'
const t2 = '2025-03-01T12:10:00.000Z'
const t3 = '2025-03-01T12:15:00.000Z'

const settings = sampleAlertSettings

const ids = { alert_id: 'alr_01jabcdefghjkmnpqrstvwxyz0', project_id: 'prj_1' }

const create = (over: Partial<AlertSettings> = {}, now = t0): AlertCommand => ({
  type: 'create_alert',
  data: { ...settings, ...over, ...ids },
  meta: { now },
})
const update = (over: Partial<AlertSettings> = {}, now = t1): AlertCommand => ({
  type: 'update_alert',
  data: { ...settings, ...over },
  meta: { now },
})
const remove = (now = t1): AlertCommand => ({ type: 'delete_alert', data: {}, meta: { now } })
const evaluate = (value: number, now = t1): AlertCommand => ({ type: 'record_evaluation', data: { value }, meta: { now } })

const created = (over: Partial<AlertSettings> = {}, now = t0): AlertEvent => ({
  type: 'alert_created',
  data: { ...settings, ...over, ...ids, created_at: now },
})
const updated = (over: Partial<AlertSettings> = {}, now = t1): AlertEvent => ({
  type: 'alert_updated',
  data: { ...settings, ...over, updated_at: now },
})
const deleted = (now = t1): AlertEvent => ({ type: 'alert_deleted', data: { deleted_at: now } })
const triggered = (value: number, threshold = settings.threshold, now = t1): AlertEvent => ({
  type: 'alert_triggered',
  data: { value, threshold, triggered_at: now },
})
const resolved = (value: number, threshold = settings.threshold, now = t2): AlertEvent => ({
  type: 'alert_resolved',
  data: { value, threshold, resolved_at: now },
})

t.test('create: alert_created, and the state is an ok alert with the settings', async (t) => {
  const alert = deciderSpec(t, alertDecider).given([]).when(create()).then([created()])
  t.strictSame(alert, {
    ...settings,
    id: ids.alert_id,
    project_id: ids.project_id,
    status: 'ok',
    last_value: null,
    last_evaluated_at: null,
    last_triggered_at: null,
    last_resolved_at: null,
    created_at: t0,
    updated_at: t0,
    deleted: false,
  })
})

t.test('create on an existing id is refused with AlertAlreadyExists (409 invalid_state, like a taken project id)', async (t) => {
  deciderSpec(t, alertDecider).given([created()]).when(create({}, t1)).thenThrows(AlertAlreadyExists, 'invalid_state')
  deciderSpec(t, alertDecider)
    .given([created(), deleted()])
    .when(create({}, t2))
    .thenThrows(AlertAlreadyExists, 'invalid_state', 'a deleted id is not reused either')
})

t.test('update with changed settings: alert_updated, created_at kept', async (t) => {
  const changes: Partial<AlertSettings>[] = [
    { name: 'renamed' },
    { kind: 'dead_letter_count' },
    { queue: null },
    { threshold: 3 },
    { window_minutes: 10 },
    { email: [] },
    { email: ['ops@example.com', 'oncall@example.com'] },
    { webhook: true },
    { enabled: false },
  ]
  for (const change of changes) {
    const alert = deciderSpec(t, alertDecider)
      .given([created()])
      .when(update(change))
      .then([updated(change)], `changed ${JSON.stringify(change)}`)
    const { name, kind, queue, threshold, window_minutes, email, webhook, enabled } = alert!
    t.strictSame(
      { name, kind, queue, threshold, window_minutes, email, webhook, enabled },
      { ...settings, ...change },
      'the state carries the new settings',
    )
    t.match(alert, { created_at: t0, updated_at: t1, status: 'ok', deleted: false })
  }
})

t.test('update with the same settings records nothing', async (t) => {
  deciderSpec(t, alertDecider).given([created()]).when(update()).then([])
  deciderSpec(t, alertDecider)
    .given([created(), updated({ threshold: 9 })])
    .when(update({ threshold: 9 }, t2))
    .then([], 'same as the last update')
})

t.test('update of an alert that does not exist is AlertNotFound', async (t) => {
  deciderSpec(t, alertDecider).given([]).when(update()).thenThrows(AlertNotFound, 'alert_not_found')
})

t.test('delete: alert_deleted; afterwards update and delete are AlertNotFound', async (t) => {
  const alert = deciderSpec(t, alertDecider).given([created()]).when(remove()).then([deleted()])
  t.equal(alert?.deleted, true)
  t.equal(alert?.updated_at, t1)
  const spec = deciderSpec(t, alertDecider).given([created(), deleted()])
  spec.when(update({ threshold: 5 }, t2)).thenThrows(AlertNotFound, 'alert_not_found', 'update after delete')
  spec.when(update({}, t2)).thenThrows(AlertNotFound, 'alert_not_found', 'even with unchanged settings')
  spec.when(remove(t2)).thenThrows(AlertNotFound, 'alert_not_found', 'delete after delete')
  deciderSpec(t, alertDecider).given([]).when(remove()).thenThrows(AlertNotFound, 'alert_not_found', 'delete of nothing')
})

t.test('record_evaluation: ok and value above the threshold triggers', async (t) => {
  const alert = deciderSpec(t, alertDecider)
    .given([created()])
    .when(evaluate(3))
    .then([triggered(3)])
  t.match(alert, { status: 'firing', last_value: 3, last_triggered_at: t1, last_evaluated_at: t1, last_resolved_at: null })
})

t.test('record_evaluation: a value equal to the threshold does not trigger', async (t) => {
  deciderSpec(t, alertDecider).given([created()]).when(evaluate(2)).then([])
  deciderSpec(t, alertDecider)
    .given([created({ threshold: 0 })])
    .when(evaluate(0))
    .then([], 'threshold 0, value 0')
  deciderSpec(t, alertDecider)
    .given([created({ threshold: 0 })])
    .when(evaluate(1))
    .then([triggered(1, 0)], 'threshold 0, value 1')
})

t.test('record_evaluation: firing and still above the threshold records nothing (no re-trigger)', async (t) => {
  const spec = deciderSpec(t, alertDecider).given([created(), triggered(3)])
  spec.when(evaluate(3, t2)).then([])
  spec.when(evaluate(50, t2)).then([], 'a higher value does not re-trigger either')
})

t.test('record_evaluation: firing and at or below the threshold resolves', async (t) => {
  const alert = deciderSpec(t, alertDecider)
    .given([created(), triggered(3)])
    .when(evaluate(2, t2))
    .then([resolved(2)])
  t.match(alert, { status: 'ok', last_value: 2, last_triggered_at: t1, last_resolved_at: t2 })
  deciderSpec(t, alertDecider)
    .given([created(), triggered(3)])
    .when(evaluate(0, t2))
    .then([resolved(0)], 'down to zero')
})

t.test('record_evaluation: ok and at or below the threshold records nothing', async (t) => {
  deciderSpec(t, alertDecider).given([created()]).when(evaluate(0)).then([])
  deciderSpec(t, alertDecider)
    .given([created(), triggered(3), resolved(1)])
    .when(evaluate(1, t3))
    .then([], 'after a resolution')
})

t.test('after a resolution the alert can trigger again', async (t) => {
  const alert = deciderSpec(t, alertDecider)
    .given([created(), triggered(3), resolved(1)])
    .when(evaluate(4, t3))
    .then([triggered(4, 2, t3)])
  t.match(alert, { status: 'firing', last_triggered_at: t3, last_resolved_at: t2 })
})

t.test('the threshold in force is the one after an update', async (t) => {
  deciderSpec(t, alertDecider)
    .given([created(), updated({ threshold: 10 })])
    .when(evaluate(5, t2))
    .then([])
  deciderSpec(t, alertDecider)
    .given([created(), triggered(3), updated({ threshold: 10 })])
    .when(evaluate(5, t2))
    .then([resolved(5, 10)], 'raising the threshold above the value resolves')
})

t.test('a disabled alert never triggers', async (t) => {
  deciderSpec(t, alertDecider)
    .given([created({ enabled: false })])
    .when(evaluate(1_000))
    .then([])
  deciderSpec(t, alertDecider)
    .given([created(), updated({ enabled: false })])
    .when(evaluate(1_000, t2))
    .then([], 'disabled by an update')
})

t.test('a firing alert that gets disabled resolves at the next evaluation, and stays quiet', async (t) => {
  const alert = deciderSpec(t, alertDecider)
    .given([created(), triggered(3), updated({ enabled: false }, t2)])
    .when(evaluate(7, t3))
    .then([resolved(7, 2, t3)])
  t.match(alert, { status: 'ok', enabled: false, last_resolved_at: t3 })
  deciderSpec(t, alertDecider)
    .given([created(), triggered(3), updated({ enabled: false }, t2), resolved(7, 2, t3)])
    .when(evaluate(7, t3))
    .then([], 'no trigger afterwards')
})

t.test('a deleted or unknown alert records nothing on evaluation', async (t) => {
  deciderSpec(t, alertDecider).given([created(), deleted()]).when(evaluate(100, t2)).then([])
  deciderSpec(t, alertDecider)
    .given([created(), triggered(3), deleted(t2)])
    .when(evaluate(0, t3))
    .then([], 'deleted while firing: no resolution')
  deciderSpec(t, alertDecider).given([]).when(evaluate(100)).then([], 'never created')
})

t.test('evolve on a missing state: alert_created builds it, any other event throws', async (t) => {
  evolveOnMissingState(t, alertDecider, created(), [updated(), triggered(3), resolved(1), deleted()])
})

/**
 * Random evaluations, interleaved with setting changes (threshold, enabled), against one alert.
 * Refused commands never happen here: the alert exists and is never deleted.
 */
type Op = { type: 'evaluate'; value: number } | { type: 'update'; threshold: number; enabled: boolean }

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ type: fc.constant('evaluate' as const), value: fc.integer({ min: 0, max: 8 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('update' as const), threshold: fc.integer({ min: 0, max: 6 }), enabled: fc.boolean() }) },
)

t.test('property: triggers and resolutions alternate strictly, status follows the condition, folding equals the state', async (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 6 }), fc.boolean(), fc.array(op, { maxLength: 60 }), (threshold, enabled, ops) => {
      const first = created({ threshold, enabled })
      const all: AlertEvent[] = [first]
      let state: AlertAggregate = fold(alertDecider, null, [first])
      let minute = 0
      for (const o of ops) {
        minute++
        const now = new Date(Date.parse(t0) + minute * 60_000).toISOString()
        const command: AlertCommand = o.type === 'evaluate' ? evaluate(o.value, now) : update({ threshold: o.threshold, enabled: o.enabled }, now)
        const before = structuredClone(state)
        const events = alertDecider.decide(command, state)
        assert.deepEqual(state, before, 'decide does not mutate the state')
        assert.ok(events.length <= 1, 'at most one event per command')
        state = fold(alertDecider, state, events)
        all.push(...events)
        if (o.type === 'evaluate') {
          const holds = state!.enabled && o.value > state!.threshold
          assert.equal(state!.status, holds ? 'firing' : 'ok', `after evaluating ${o.value}: status matches whether the condition holds`)
          if (events.length === 1) assert.equal(state!.last_value, o.value)
        } else {
          assert.ok(
            events.every((e) => e.type === 'alert_updated'),
            'an update records only alert_updated',
          )
        }
      }
      const transitions = all.filter((e) => e.type === 'alert_triggered' || e.type === 'alert_resolved').map((e) => e.type)
      transitions.forEach((type, i) =>
        assert.equal(type, i % 2 === 0 ? 'alert_triggered' : 'alert_resolved', `transition ${i} of ${transitions.join(',')}`),
      )
      assert.equal(state!.status, transitions.length % 2 === 1 ? 'firing' : 'ok', 'firing exactly when the last transition is a trigger')
      assert.deepEqual(fold(alertDecider, alertDecider.initialState, all), state, 'folding every event from the start gives the same state')
    }),
    { numRuns: 300 },
  )
  t.pass('300 random sequences hold the properties')
})
