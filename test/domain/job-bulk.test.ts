import t from 'tap'
import { checkBulkPriority, isBulkApplicable, resolveBulkFilter } from '../../domain/job-bulk.ts'
import { jobDecider, type Job } from '../../domain/job.ts'
import { failedJobState } from '../support/job-commands.ts'

// Issue 28, item 6: which jobs a bulk action is for, and the operation id its job events carry.

t.test('a filter names at least one key; states default to, and must be among, the action’s', async (t) => {
  t.match(resolveBulkFilter('retry', {}), { refused: /at least one/ }, 'an empty filter would match every job')
  t.strictSame(resolveBulkFilter('retry', { queues: ['emails'] }), { filter: { queues: ['emails'], states: ['failed', 'dead_letter'] } })
  t.strictSame(resolveBulkFilter('cancel', { job_types: ['x'] }), { filter: { job_types: ['x'], states: ['pending', 'scheduled'] } })
  t.strictSame(resolveBulkFilter('retry', { states: ['dead_letter'] }), { filter: { states: ['dead_letter'] } })
  t.match(resolveBulkFilter('retry', { states: ['dead_letter', 'pending'] }), {
    refused: /retry applies to failed and dead_letter jobs, not pending/,
  })
  t.match(resolveBulkFilter('cancel', { states: ['processing'] }), { refused: /not processing/ }, 'a bulk cancel never stops a running job')
  t.match(resolveBulkFilter('retry', { created_from: '2025-03-02T00:00:00.000Z', created_until: '2025-03-01T00:00:00.000Z' }), {
    refused: /created_from is after created_until/,
  })
})

t.test('applicability follows the single-job commands', async (t) => {
  t.ok(isBulkApplicable('retry', 'dead_letter'))
  t.ok(isBulkApplicable('retry', 'failed'))
  t.notOk(isBulkApplicable('retry', 'pending'))
  t.ok(isBulkApplicable('cancel', 'scheduled'))
  t.notOk(isBulkApplicable('cancel', 'processing'))
  t.ok(isBulkApplicable('set_priority', 'pending'))
})

t.test('priority: required for set_priority only', async (t) => {
  t.match(checkBulkPriority('set_priority', undefined), { refused: /required/ })
  t.match(checkBulkPriority('retry', 5), { refused: /only set_priority/ })
  t.equal(checkBulkPriority('set_priority', -600), null)
  t.equal(checkBulkPriority('cancel', undefined), null)
})

t.test('a retry or cancel named by an operation carries its id; without one the events keep their shape', async (t) => {
  const now = '2025-03-01T12:00:00.000Z'
  const failed = failedJobState({
    attempt: 1,
    maxAttempts: 1,
    error: { type: 'Error', message: 'boom', stack_trace: '' },
    createdAt: now,
    startedAt: now,
    completedAt: now,
  })
  const dead: Job = { ...failed, state: 'dead_letter' }
  const retried = jobDecider.decide({ type: 'retry_job', data: { operation_id: 'op_1' }, meta: { now } }, dead)
  t.match(retried, [{ type: 'job_retried', data: { operation_id: 'op_1', previous_state: 'dead_letter' } }])
  const plain = jobDecider.decide({ type: 'retry_job', data: {}, meta: { now } }, dead)
  t.notOk('operation_id' in plain[0]!.data, 'no operation_id key at all')
  const pending: Job = { ...dead, state: 'pending', completed_at: null }
  const cancelled = jobDecider.decide({ type: 'cancel_job', data: { operation_id: 'op_2' }, meta: { now } }, pending)
  t.match(cancelled, [{ type: 'job_cancelled', data: { reason: 'requested', previous_state: 'pending', operation_id: 'op_2' } }])
  t.notOk('operation_id' in jobDecider.decide({ type: 'cancel_job', data: {}, meta: { now } }, pending)[0]!.data)
})
