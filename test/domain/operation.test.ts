import t from 'tap'
import { InvalidState, OperationNotFound } from '../../domain/errors.ts'
import { operationDecider, type OperationCommand, type OperationEvent } from '../../domain/operation.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = Date.parse('2025-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()

const about = { operation_id: 'op_1', project_id: 'prj_1', kind: 'webhook_replay', params: { webhook_id: 'whk_1', mode: 'missing' } }

const start = (matched = 3): OperationCommand => ({ type: 'start_operation', data: { ...about, matched }, meta: { now: at(0) } })
const progress = (
  processed: number,
  cursor: string | null = String(processed * 10),
  outcomes = { succeeded: 0, failed: 0 },
  s = processed,
): OperationCommand => ({
  type: 'record_progress',
  data: { cursor, processed, ...outcomes },
  meta: { now: at(s) },
})
const cancel = (s = 30): OperationCommand => ({ type: 'cancel_operation', data: {}, meta: { now: at(s) } })
const finish = (matched: number, succeeded: number, failed: number): OperationCommand => ({
  type: 'finish_operation',
  data: { matched, succeeded, failed },
  meta: { now: at(60) },
})
const fail = (): OperationCommand => ({
  type: 'fail_operation',
  data: { error: { code: 'webhook_not_found', message: 'the webhook subscription was deleted' } },
  meta: { now: at(40) },
})

const started = (matched = 3): OperationEvent => ({ type: 'operation_started', data: { ...about, matched, started_at: at(0) } })
const progressed = (
  processed: number,
  cursor: string | null = String(processed * 10),
  outcomes = { succeeded: 0, failed: 0 },
  s = processed,
): OperationEvent => ({
  type: 'operation_progressed',
  data: { cursor, processed, ...outcomes, progressed_at: at(s) },
})
const cancelled = (s = 30): OperationEvent => ({ type: 'operation_cancelled', data: { cancelled_at: at(s) } })

const spec = (t: Parameters<typeof deciderSpec>[0]) => deciderSpec(t, operationDecider)

t.test('start: a running operation with nothing processed yet', async (t) => {
  const op = spec(t).given([]).when(start()).then([started()])
  t.strictSame(op, {
    id: 'op_1',
    project_id: 'prj_1',
    kind: 'webhook_replay',
    params: about.params,
    status: 'running',
    matched: 3,
    processed: 0,
    succeeded: 0,
    failed: 0,
    cursor: null,
    error: null,
    created_at: at(0),
    updated_at: at(0),
    finished_at: null,
  })
  spec(t).given([started()]).when(start()).thenThrows(InvalidState, 'invalid_state', 'an id is started once')
})

t.test('progress: totals recorded before the run acts, never taken back', async (t) => {
  const op = spec(t)
    .given([started()])
    .when(progress(1))
    .then([progressed(1)])
  t.match(op, { processed: 1, cursor: '10', status: 'running' })
  spec(t)
    .given([started(), progressed(2)])
    .when(progress(1))
    .then([], 'a record behind the state (a stale run) decides nothing')
  spec(t)
    .given([started(), progressed(2)])
    .when(progress(2))
    .then([], 'nor does one that changes nothing')
  spec(t)
    .given([started(), progressed(2)])
    .when(progress(2, '20', { succeeded: 1, failed: 1 }, 5))
    .then([progressed(2, '20', { succeeded: 1, failed: 1 }, 5)], 'outcomes may move on their own')
})

t.test('cancel: the run stops at its next record; what it did stays counted', async (t) => {
  const op = spec(t)
    .given([started(), progressed(1)])
    .when(cancel())
    .then([cancelled()])
  t.match(op, { status: 'cancelled', processed: 1, matched: 3, finished_at: at(30) })
  spec(t)
    .given([started(), progressed(1), cancelled()])
    .when(progress(2))
    .thenThrows(InvalidState, 'invalid_state', 'a run’s next record is refused')
  spec(t).given([started(), cancelled()]).when(cancel(31)).then([], 'stopping it again changes nothing')
  spec(t).given([]).when(cancel()).thenThrows(OperationNotFound, 'operation_not_found')
})

t.test('outcomes: recorded on a running or cancelled operation, counts only; refused once it ended otherwise', async (t) => {
  const outcomes = (succeeded: number, failed: number, s = 35): OperationCommand => ({
    type: 'record_outcomes',
    data: { succeeded, failed },
    meta: { now: at(s) },
  })
  spec(t)
    .given([started(), progressed(2)])
    .when(outcomes(1, 1))
    .then([progressed(2, '20', { succeeded: 1, failed: 1 }, 35)])
  const op = spec(t)
    .given([started(), progressed(2), cancelled()])
    .when(outcomes(2, 0))
    .then([progressed(2, '20', { succeeded: 2, failed: 0 }, 35)], 'a stopped run still records how what it handed on ended')
  t.match(op, { status: 'cancelled', processed: 2, succeeded: 2, failed: 0, finished_at: at(30) })
  spec(t)
    .given([started(), progressed(2, '20', { succeeded: 2, failed: 0 }), cancelled()])
    .when(outcomes(2, 0))
    .then([], 'unchanged: nothing')
  const failed: OperationEvent = { type: 'operation_failed', data: { error: { code: 'x', message: 'y' }, failed_at: at(40) } }
  spec(t).given([started(), failed]).when(outcomes(1, 0)).thenThrows(InvalidState, 'invalid_state')
})

t.test('finish: succeeded with what the run found; an ended operation cannot be stopped or failed', async (t) => {
  const op = spec(t)
    .given([started(3), progressed(2)])
    .when(finish(2, 2, 0))
    .then([{ type: 'operation_succeeded', data: { matched: 2, processed: 2, succeeded: 2, failed: 0, finished_at: at(60) } }])
  t.match(op, { status: 'succeeded', matched: 2, processed: 2, succeeded: 2, failed: 0, finished_at: at(60) })
  const ended = [
    started(3),
    progressed(2),
    { type: 'operation_succeeded', data: { matched: 2, processed: 2, succeeded: 2, failed: 0, finished_at: at(60) } },
  ] as OperationEvent[]
  spec(t).given(ended).when(cancel()).thenThrows(InvalidState, 'invalid_state')
  spec(t).given(ended).when(fail()).thenThrows(InvalidState, 'invalid_state')
})

t.test('fail: the error is kept and the operation ends', async (t) => {
  const op = spec(t)
    .given([started()])
    .when(fail())
    .then([
      {
        type: 'operation_failed',
        data: { error: { code: 'webhook_not_found', message: 'the webhook subscription was deleted' }, failed_at: at(40) },
      },
    ])
  t.match(op, { status: 'failed', error: { code: 'webhook_not_found' }, finished_at: at(40) })
})

t.test('evolve on a missing state', async (t) => {
  evolveOnMissingState(t, operationDecider, started(), [progressed(1), cancelled()])
})
